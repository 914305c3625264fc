"""The numbers users quote about the KV cache: prefix-cache hit rates against an infinite
cache, and how much of a KV transfer a pipelined prefill hides, from request tables built
by hand (each number checkable on paper) and from the driver under the fluid simulator."""

from __future__ import annotations

import copy
import json
import math
from datetime import datetime

import pandas as pd
import pytest
import yaml

from experiments.analysis.estimates import serving_estimate
from experiments.analysis.headline import headline
from experiments.analysis.metrics import pipelining_metrics, prefix_cache_metrics
from experiments.analysis.summary import summarize
from experiments.output.report import write_report
from experiments.output.results import new_run_dir, write_json, write_table
from experiments.spec.load import SPECS_DIR, expand, load_spec
from tests.unit.run_configs import config_of_spec
from topologies import rail_optimized
from traffic.serving import build_serving, fabric_rate, simulate
from traffic.serving.cache import IdealPrefixCache, ideal_hit_blocks
from traffic.serving.requests import busy_after

NAN = math.nan


# ---- the ideal cache ----------------------------------------------------------------------


def test_ideal_cache_hits_each_prompt_prefix_seen_at_an_earlier_arrival():
    arrivals = [
        [1, 2, 3],  # cold
        [1, 2, 4],  # 1, 2 seen; 4 new
        [1, 2, 4, 5],  # 1, 2, 4 seen (4 from the request before)
        [9, 1, 2],  # the walk stops at the unseen first block: no hit at all
        [],  # no block ids: nothing to hit
        [9, 1, 7],  # 9 and 1 seen by now
        [8, 8],  # a block repeated within one prompt does not hit itself
    ]
    assert ideal_hit_blocks(arrivals) == [0, 2, 3, 0, 0, 2, 0]


def test_ideal_cache_is_unbounded():
    cache = IdealPrefixCache()
    cache.arrive(list(range(100_000)))
    assert cache.arrive(list(range(100_000)) + [-1]) == 100_000


# ---- prefix-cache hit rates from a request table ------------------------------------------


def cache_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3],
            "input_tokens": [2048, 2048, 1024, 5000],
            # 1: 2 local + 1 remote block; 2: all 2 blocks remote but capped at 1023
            "cached_tokens": [0, 1536, 1023, 0],
            "local_hit_blocks": [0, 2, 0, 0],
            "remote_hit_blocks": [0, 1, 2, 0],
            "ideal_cached_tokens": [0, 2047, 1023, 0],
            # request 3 can never fit an instance: the router never placed it
            "prefill_instance": ["prefill0", "prefill1", "prefill0", None],
        }
    )


def test_hit_rate_is_cached_over_prompt_tokens_split_local_and_remote():
    m = prefix_cache_metrics(cache_table())
    prompt = 2048 + 2048 + 1024  # request 3 looked nothing up and does not count
    assert (m["requests"], m["prompt_tokens"], m["cached_tokens"]) == (3, prompt, 2559)
    assert m["hit_rate"] == pytest.approx(2559 / prompt)
    # request 1's 1536 cached tokens: 2 of its 3 hit blocks local -> 1024 local, 512 remote
    assert m["local_hit_rate"] == pytest.approx(1024 / prompt)
    assert m["remote_hit_rate"] == pytest.approx((512 + 1023) / prompt)
    assert m["local_hit_rate"] + m["remote_hit_rate"] == pytest.approx(m["hit_rate"])
    assert m["ideal_hit_rate"] == pytest.approx((2047 + 1023) / prompt)
    assert m["ideal_hit_rate"] > m["hit_rate"]
    json.dumps(m, allow_nan=False)


def test_hit_rates_are_none_without_prompts_or_for_runs_that_predate_the_ideal():
    empty = prefix_cache_metrics(cache_table().iloc[0:0])
    assert empty["requests"] == 0 and empty["hit_rate"] is None
    assert empty["ideal_hit_rate"] is None
    old = prefix_cache_metrics(cache_table().drop(columns=["ideal_cached_tokens"]))
    assert old["hit_rate"] is not None and old["ideal_hit_rate"] is None


# ---- hidden fraction from a request table -------------------------------------------------


def test_busy_time_is_the_union_of_message_intervals_and_exposed_is_after_prefill():
    # two rank pairs overlap on [10, 30] and [20, 40]; a gap; then [60, 70] and [70, 90]
    spans = [(60, 70), (10, 30), (20, 40), (70, 90)]
    assert busy_after(spans, after_ns=65) == (30 + 30, 25)
    assert busy_after(spans, after_ns=0) == (60, 60)  # all after: monolithic
    assert busy_after(spans, after_ns=100) == (60, 0)
    assert busy_after([], after_ns=0) == (0, 0)


def pipelined_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3],
            "kv_busy_ms": [10.0, 30.0, NAN, 0.0],  # 2: transfer failed; 3: no bytes
            "kv_exposed_ms": [1.0, 15.0, NAN, 0.0],
        }
    )


def test_hidden_fraction_aggregate_weighs_long_transfers_and_per_request_is_a_column():
    m = pipelining_metrics(pipelined_table())
    assert m["requests"] == 2
    assert m["hidden_fraction"] == pytest.approx(1 - (1 + 15) / (10 + 30))
    per = m["hidden_fraction_per_request"]
    assert per["count"] == 2 and per["mean"] == pytest.approx((0.9 + 0.5) / 2)
    assert per["min"] == pytest.approx(0.5)
    assert m["kv_exposed_ms"]["max"] == 15.0 and m["kv_busy_ms"]["count"] == 2
    json.dumps(m, allow_nan=False)


def test_hidden_fraction_is_none_without_a_measured_transfer():
    assert pipelining_metrics(pipelined_table().iloc[2:3])["hidden_fraction"] is None
    old = pipelining_metrics(pd.DataFrame({"request_id": [0], "kv_transfer_ms": [5.0]}))
    assert old["hidden_fraction"] is None and old["requests"] == 0


# ---- the driver records them; the summary carries them ------------------------------------


@pytest.fixture(scope="module")
def fabric():
    return rail_optimized(servers=4, gpus_per_server=4)


@pytest.fixture(scope="module")
def basic():
    return expand(load_spec(SPECS_DIR / "serving-basic.yaml"))[0].resolved


def _served(spec, fabric, **changes):
    spec = copy.deepcopy(spec)
    spec["workloads"][0] |= {"transfer": "monolithic"} | changes
    loaded = load_spec(yaml.safe_dump(spec))  # the changes resolved as a run resolves them
    spec = loaded.resolved
    driver = build_serving(loaded.config.workloads[0], fabric, 1, 1000, None)
    result = simulate(driver, fabric_rate(fabric), t0_ns=10**12)
    assert result.finished
    return spec, driver, result


SHARED = {
    "synthetic": {
        "n": 8,
        "rate_per_s": 1.0,
        "input_tokens": 4096,
        "output_tokens": 4,
        "shared_prefix_blocks": 6,
    }
}


def test_a_cache_too_small_to_keep_the_shared_prefix_falls_short_of_the_ideal(fabric, basic):
    # 8 blocks a prompt, 4 kept per server: each insert evicts the shared prefix
    small = {"enabled": True, "capacity_blocks": 4}
    spec, driver, result = _served(basic, fabric, arrivals=SHARED, prefix_cache=small)
    m = summarize(None, driver.requests_table(), driver.tokens_table(), None, config_of_spec(spec))
    cache = m["serving"]["prefix_cache"]
    assert cache["enabled"] is True and cache["hit_rate"] == 0.0
    # an infinite cache: requests 1..7 each find the 6 shared blocks
    assert cache["ideal_hit_rate"] == pytest.approx(7 * 6 * 512 / (8 * 4096))
    big = {"enabled": True, "capacity_blocks": 4096}  # round robin: some hits are remote
    spec, driver, result = _served(
        basic, fabric, arrivals=SHARED, prefix_cache=big, router="round_robin"
    )
    m = summarize(None, driver.requests_table(), driver.tokens_table(), None, config_of_spec(spec))
    cache = m["serving"]["prefix_cache"]
    assert cache["hit_rate"] == pytest.approx(cache["ideal_hit_rate"])
    assert cache["remote_hit_rate"] > 0 and cache["local_hit_rate"] > 0
    assert "pipelining" not in m["serving"]  # a monolithic run


def test_pipelining_hides_all_but_the_last_layer_on_a_fast_link(fabric, basic):
    spec, driver, result = _served(basic, fabric, transfer="layer_pipelined")
    req = driver.requests_table()
    layers = 80  # llama-3-70b
    assert req["kv_hidden_fraction"].between(1 - 1.5 / layers, 1).all()
    m = summarize(None, req, driver.tokens_table(), None, config_of_spec(spec))
    hidden = m["serving"]["pipelining"]["hidden_fraction"]
    assert hidden == pytest.approx(1 - 1 / layers, abs=0.005)
    _, mono, _ = _served(basic, fabric, transfer="monolithic")
    assert (mono.requests_table()["kv_hidden_fraction"] == 0).all()  # nothing overlaps


def test_the_report_quotes_the_hit_rates_and_the_hidden_fraction(fabric, basic, tmp_path):
    cache = {"enabled": True, "capacity_blocks": 4}
    spec, driver, _ = _served(
        basic, fabric, arrivals=SHARED, prefix_cache=cache, transfer="layer_pipelined"
    )
    run_dir = new_run_dir(tmp_path, "serving-basic", seed=1, now=datetime(2026, 1, 2, 3, 4, 5))
    tables = {"requests": driver.requests_table(), "tokens": driver.tokens_table()}
    for name, table in tables.items():
        write_table(run_dir, name, table)
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    metrics = summarize(None, tables["requests"], tables["tokens"], None, config_of_spec(spec))
    write_json(
        run_dir,
        "summary",
        {
            "experiment": "serving-basic",
            "run_id": run_dir.name,
            "seed": 1,
            "partial": False,
            "metrics": metrics,
        },
    )
    text = write_report([run_dir]).read_text()
    assert "| prefix-cache hit rate (cached ÷ prompt tokens) | 0 |" in text
    assert "| prefix-cache hit rate, infinite cache | 0.6562 |" in text  # 7 × 6 ÷ (8 × 8)
    assert "| KV transfer hidden behind prefill | 0.9875 |" in text  # 1 − 1/80 layers
    assert "| KV transfer exposed after prefill (ms) | 8 |" in text  # one per request


def test_the_headline_puts_hit_rates_and_hidden_fraction_beside_the_estimate(fabric, basic):
    cache = {"enabled": True, "capacity_blocks": 4}
    spec, driver, _ = _served(
        basic, fabric, arrivals=SHARED, prefix_cache=cache, transfer="layer_pipelined"
    )
    config = config_of_spec(spec)
    metrics = summarize(None, driver.requests_table(), driver.tokens_table(), None, config)
    estimate = {"serving": serving_estimate(config, 0, fabric)}
    lines = {h.label: h for h in headline(metrics, estimate)}
    ideal = lines["prefix-cache hit rate, infinite cache"]
    assert ideal.measured["value"] == pytest.approx(7 * 6 / 64)
    assert ideal.estimate["value"] == pytest.approx(7 * 6 / 64)
    assert lines["prefix-cache hit rate"].measured == {"value": 0.0}
    assert lines["KV transfer hidden behind prefill"].estimate["value"] == pytest.approx(
        1 - 1 / 80, abs=0.005
    )
    off = copy.deepcopy(metrics)
    off["serving"]["prefix_cache"]["enabled"] = False  # no cache: no hit-rate headline
    assert not {h.label for h in headline(off, estimate)} & {"prefix-cache hit rate"}

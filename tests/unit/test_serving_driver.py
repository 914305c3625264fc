"""The serving driver under the fluid simulator: what a user of the served model would see."""

import dataclasses

import numpy as np
import pytest
import yaml

from experiments.spec.load import SPECS_DIR, expand, load_spec
from topologies import rail_optimized
from traffic.serving import ServingError, build_serving, fabric_rate, simulate
from traffic.traces import TraceError, bundled_azure_trace

FIRST_ID = 1000
BASIC = SPECS_DIR / "serving-basic.yaml"


@pytest.fixture(scope="module")
def fabric():
    return rail_optimized(servers=4, gpus_per_server=4)


@pytest.fixture(scope="module")
def basic():
    """The bundled serving-basic spec's workload, typed (50 Azure requests)."""
    return expand(load_spec(BASIC))[0].config.workloads[0]


def _workload(**changes):
    """The serving-basic workload with ``changes`` as a spec writes them, resolved (its
    defaults filled in, its rules checked) and typed again."""
    raw = load_spec(BASIC).raw
    raw["workloads"][0].update(changes)
    return load_spec(yaml.safe_dump(raw), base_dir=SPECS_DIR).config.workloads[0]


def _replaced(section, **changes):
    """``section`` with ``changes`` (a dict changes fields of the section it names), built
    by hand without the spec's checks: what ``build_serving`` must refuse on its own."""
    for key, value in changes.items():
        if isinstance(value, dict):
            changes[key] = _replaced(getattr(section, key), **value)
    return dataclasses.replace(section, **changes)


def _synthetic(n=6, rate=2.0, inp=512, out=8, **extra):
    return {
        "synthetic": {
            "n": n,
            "rate_per_s": rate,
            "input_tokens": inp,
            "output_tokens": out,
            **extra,
        }
    }


def _run(workload, fabric, rate_scale=1.0, seed=1, **overrides):
    driver = build_serving(workload, fabric, seed, FIRST_ID, None, **overrides)
    result = simulate(driver, fabric_rate(fabric, rate_scale), t0_ns=10**12)
    return driver, result


def test_bundled_azure_trace_runs_to_completion(fabric, basic):
    driver, result = _run(basic, fabric)
    assert result.finished
    req = driver.requests_table()
    assert len(req) == 50 and req["served"].all() and req["error"].isna().all()
    assert req["ttft_ms"].notna().all() and (req["ttft_ms"] > 0).all()
    assert (req["kv_transfer_ms"] > 0).all()
    assert (req["kv_bytes"] == req["input_tokens"] * 327_680).all()
    tokens = driver.tokens_table()
    assert tokens.groupby("request_id").size().tolist() == req["output_tokens"].tolist()
    assert tokens["itl_ms"].isna().sum() == 50  # the first token of each request has none
    assert (tokens["itl_ms"].dropna() > 0).all()
    # arrival_ns is absolute: the first request arrives at t0
    assert req["arrival_ns"].min() == 10**12
    # decode ranks all-reduce on every step; prefill ranks hand KV to decode ranks
    assert set(result.flows["kind"]) == {"kv_layer", "collective"}
    assert result.flows["flow_id"].min() == FIRST_ID and result.flows["flow_id"].is_unique
    assert set(driver.hosts) == {f"gpu{s}_{i}" for s in range(4) for i in range(4)}


def test_azure_trace_on_a_different_base_dir(fabric, basic, tmp_path):
    w = _replaced(basic, arrivals={"trace": bundled_azure_trace().name, "limit": 5})
    driver = build_serving(w, fabric, 1, 0, bundled_azure_trace().parent)
    assert len(driver.requests) == 5
    with pytest.raises(TraceError, match="not found"):
        build_serving(w, fabric, 1, 0, tmp_path)


def test_half_link_rate_raises_ttft_p50(fabric):
    # At 400 Gbit/s a KV transfer takes about a millisecond, less than the jitter of
    # joining a 21 ms decode step; at 8 Gbit/s it takes tens of ms, so halving shows.
    w = _workload(transfer="monolithic")
    fast, _ = _run(w, fabric, 0.02)
    slow, _ = _run(w, fabric, 0.01)
    assert slow.requests_table()["ttft_ms"].median() > fast.requests_table()["ttft_ms"].median()


def test_layer_pipelined_beats_monolithic_for_long_prompts(fabric):
    arrivals = _synthetic(n=4, rate=0.5, inp=16_000, out=4)
    ttft = {}
    for transfer in ("monolithic", "layer_pipelined"):
        no_cache = {"enabled": False, "capacity_blocks": 4096}
        w = _workload(transfer=transfer, arrivals=arrivals, prefix_cache=no_cache)
        driver, result = _run(w, fabric)
        kinds = set(result.flows["kind"])
        assert kinds == {"kv_transfer" if transfer == "monolithic" else "kv_layer", "collective"}
        ttft[transfer] = driver.requests_table()["ttft_ms"].median()
    assert ttft["layer_pipelined"] < ttft["monolithic"]


def test_colocated_sends_no_kv_and_prefill_stalls_decode(fabric):
    w = _workload(mode="colocated", decode=None)
    driver, result = _run(w, fabric)
    assert not {"kv_transfer", "kv_layer"} & set(result.flows["kind"])
    req = driver.requests_table()
    assert req["served"].all() and req["kv_transfer_ms"].isna().all()
    assert (req["prefill_instance"] == req["decode_instance"]).all()
    # a prefill on an instance delays that instance's next decode step: some ITL is
    # longer than a plain step
    itl = driver.tokens_table()["itl_ms"].dropna()
    assert itl.max() > 1.5 * itl.median()


def test_prefix_shared_requests_hit_remotely_and_fetch(fabric):
    arrivals = _synthetic(n=8, rate=1.0, inp=4096, out=4, shared_prefix_blocks=6)
    w = _workload(router="round_robin", arrivals=arrivals)
    driver, result = _run(w, fabric)
    req = driver.requests_table()
    assert req["served"].all()
    assert req.loc[0, "cached_tokens"] == 0  # cold cache
    assert (req["remote_hit_blocks"] > 0).any() and (req["local_hit_blocks"] > 0).any()
    assert (req.loc[1:, "cached_tokens"] == 6 * 512).all()
    fetch = result.flows[result.flows["kind"] == "cache_fetch"]
    assert len(fetch) > 0
    # many-to-one: every fetch goes from a server-0 GPU to a server-1 GPU or back
    assert all(s[3] != d[3] for s, d in zip(fetch["src"], fetch["dst"], strict=True))
    stats = driver.cache_stats()
    assert stats["remote_hit_blocks"] == req["remote_hit_blocks"].sum() > 0
    assert stats["bytes_fetched"] == fetch["bytes"].sum()
    assert 0 < stats["hit_rate"] < 1


def test_kv_affinity_keeps_shared_prefix_local(fabric):
    arrivals = _synthetic(n=8, rate=1.0, inp=4096, out=4, shared_prefix_blocks=6)
    w = _workload(router="kv_affinity", router_weight=1.0, arrivals=arrivals)
    driver, result = _run(w, fabric)
    assert (driver.requests_table()["remote_hit_blocks"] == 0).all()
    assert "cache_fetch" not in set(result.flows["kind"])


def test_request_too_big_for_decode_is_unserved(fabric):
    arrivals = _synthetic(n=4, rate=1.0, inp={"dist": "uniform", "low": 100, "high": 3000})
    w = _workload(arrivals=arrivals)
    driver, result = _run(w, fabric, kv_capacity_tokens=2000)
    assert result.finished
    req = driver.requests_table()
    big = req["input_tokens"] + req["output_tokens"] > 2000
    assert big.any() and (~big).any()
    assert not req.loc[big, "served"].any() and req.loc[big, "ttft_ms"].isna().all()
    assert req.loc[big, "error"].str.contains("at most 2000").all()
    assert req.loc[~big, "served"].all()


def test_run_end_records_open_requests_unserved(fabric):
    w = _workload(arrivals=_synthetic(n=5, rate=1.0, out=400))
    driver = build_serving(w, fabric, 1, 0, None)
    result = simulate(driver, fabric_rate(fabric), until_ns=2 * 10**9)
    assert not result.finished
    req = driver.requests_table()
    assert len(req) == 5 and not req["served"].any()
    assert req["error"].str.contains("simulation horizon reached").all()
    assert req["error"].str.contains("decoding|waiting to arrive").all()


def test_failed_kv_message_makes_its_request_unserved(fabric):
    w = _workload(transfer="monolithic", arrivals=_synthetic(n=1, out=2))
    driver = build_serving(w, fabric, 1, 0, None)
    assert driver.start(0) == []
    msgs = driver.on_timer(driver.next_timer_ns())
    assert {m.kind for m in msgs} == {"kv_transfer"} and len(msgs) == 4
    assert driver.on_received(99_999, 5) == []  # not the driver's flow
    assert driver.on_failed(msgs[0].flow_id, "connection reset", msgs[0].t_ns) == []
    for m in msgs[1:]:
        driver.on_received(m.flow_id, m.t_ns + 1000)
    assert driver.next_timer_ns() is not None
    driver.on_timer(driver.next_timer_ns())  # prefill end
    assert driver.finished()
    row = driver.requests_table().iloc[0]
    assert not row["served"] and "connection reset" in row["error"]


def test_tp1_decode_steps_end_by_timer(fabric):
    w = _workload(
        model="llama-3-8b",
        gpu="h100",
        prefill={"servers": [0], "tp": 1},
        decode={"servers": [1], "tp": 1},
        router="least_loaded",
        transfer="monolithic",
        arrivals=_synthetic(n=10, rate=20.0, out=5),
    )
    driver, result = _run(w, fabric)
    assert "collective" not in set(result.flows["kind"])
    req = driver.requests_table()
    assert req["served"].all() and req["tpot_ms"].notna().all()
    assert set(req["prefill_host"]) <= {f"gpu0_{i}" for i in range(4)}
    assert set(req["decode_host"]) <= {f"gpu1_{i}" for i in range(4)}


def test_topology_aware_router_runs(fabric):
    w = _workload(router="topology_aware", decode={"servers": [2, 3], "tp": 2})
    driver, _ = _run(w, fabric)
    req = driver.requests_table()
    assert req["served"].all()
    # rank pairs of 4 → 2 cross rails, so every pair is a spine pair: least loaded spreads
    assert req["decode_instance"].nunique() == 4


def test_same_seed_same_result(fabric):
    w = _workload(arrivals=_synthetic(n=10, rate=5.0))
    a, _ = _run(w, fabric, seed=3)
    b, _ = _run(w, fabric, seed=3)
    np.testing.assert_array_equal(a.tokens_table()["t_ns"], b.tokens_table()["t_ns"])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"decode": {"servers": (1, 2), "tp": 4}}, "overlap"),
        ({"decode": {"servers": (5,), "tp": 4}}, "lacks"),
        ({"prefill": {"servers": (0, 1), "tp": 3}}, "KV heads"),
        ({"model": "gpt-9"}, "unknown model"),
    ],
)
def test_bad_workloads_fail_before_running(fabric, basic, change, match):
    with pytest.raises(ValueError, match=match):
        build_serving(_replaced(basic, **change), fabric, 1, 0, None)


def test_weights_that_do_not_fit_are_an_error(fabric):
    w = _workload(prefill={"servers": [0], "tp": 1}, decode={"servers": [2], "tp": 1})
    with pytest.raises(ServingError, match="do not fit"):
        build_serving(w, fabric, 1, 0, None)


def test_requests_arrive_for_the_live_view_as_planned(fabric):
    w = _workload(arrivals=_synthetic(n=6, rate=2.0))
    driver = build_serving(w, fabric, 1, FIRST_ID, None)
    assert driver.arrived(10**12) == 0  # not started
    driver.start(10**12)
    offsets = sorted(r.arrival_ns - 10**12 for r in driver.requests)
    assert driver.arrived(10**12 + offsets[2]) == 3
    assert driver.arrived(10**12 + offsets[-1]) == 6
    assert driver.arrived(10**12 - 1) == 0

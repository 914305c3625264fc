"""Agentic sessions: the turn chains the generator writes, the closed loop the serving
driver runs under the fluid simulator, the cache reuse later turns see, the context
limit, and the session metrics on a table computed by hand."""

import copy
import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.analysis.metrics.sessions import session_metrics
from experiments.analysis.summary import summarize
from experiments.spec.config import Distribution
from experiments.spec.load import SPECS_DIR, SpecError, expand, load_spec
from tests.unit.run_configs import config_of_spec
from topologies import rail_optimized
from traffic.serving import ServingError, build_serving, fabric_rate, simulate
from traffic.serving.sessions import SessionError, session_arrivals

SESSION = {
    "n": 3,
    "rate_per_s": 2.0,
    "turns": 4,
    "context_tokens": 3000,
    "growth_tokens": 300,
    "output_tokens": 6,
    "tool_ms": 250.0,
}


@pytest.fixture(scope="module")
def fabric():
    return rail_optimized(servers=4, gpus_per_server=4)


@pytest.fixture(scope="module")
def basic():
    """serving-basic's resolved workload (Llama 3 70B, 8,192 tokens of context)."""
    return expand(load_spec(SPECS_DIR / "serving-basic.yaml"))[0].resolved["workloads"][0]


def _typed(workload):
    """A serving-basic workload a test changed, resolved by the spec again and typed (the
    ``ServingWorkload`` a run's configuration holds)."""
    spec = expand(load_spec(SPECS_DIR / "serving-basic.yaml"))[0].resolved
    spec["workloads"][0] = workload
    return load_spec(yaml.safe_dump(spec)).config.workloads[0]


def _run(basic, fabric, *, sessions=SESSION, cache=True, router="kv_affinity", **overrides):
    w = copy.deepcopy(basic)
    w["arrivals"] = {"sessions": dict(sessions)}
    w["router"] = router
    w["prefix_cache"] = {"enabled": cache, "capacity_blocks": 4096}
    driver = build_serving(_typed(w), fabric, 1, 0, None, **overrides)
    result = simulate(driver, fabric_rate(fabric), t0_ns=10**12)
    return driver, result


# --- the generator ----------------------------------------------------------------------


def test_a_turn_carries_the_whole_previous_context_and_its_blocks():
    df = session_arrivals(
        4,
        n=2,
        rate_per_s=1,
        turns=3,
        context_tokens=1000,
        growth_tokens=300,
        output_tokens=100,
        tool_ms=200,
    )
    assert df["session_id"].tolist() == [0, 0, 0, 1, 1, 1]
    assert df["turn"].tolist() == [0, 1, 2] * 2
    # 1000 → 1000 + 100 out + 300 grown = 1400 → 1800
    assert df["input_tokens"].tolist() == [1000, 1400, 1800] * 2
    first, second, third = df["hash_ids"][:3]
    assert second[:1] == first[:1] and second[1] not in first  # block 1 of 1000 was partial
    assert third[:2] == second[:2] and len(third) == math.ceil(1800 / 512)
    other = {h for ids in df["hash_ids"][3:] for h in ids}
    assert not other & {h for ids in df["hash_ids"][:3] for h in ids}  # sessions share none
    # only a session's first turn has an arrival instant; later ones wait tool_ms
    assert df["arrival_ms"].notna().tolist() == [True, False, False] * 2
    assert df["after_ms"].tolist()[1:3] == [200.0, 200.0]
    pd.testing.assert_frame_equal(
        df,
        session_arrivals(
            np.random.default_rng(4),
            n=2,
            rate_per_s=1,
            turns=3,
            context_tokens=1000,
            growth_tokens=300,
            output_tokens=100,
            tool_ms=200,
        ),
    )


def test_distributions_vary_turns_and_tool_time():
    df = session_arrivals(
        1,
        n=40,
        rate_per_s=5,
        turns={"dist": "uniform", "low": 1, "high": 6},
        tool_ms={"dist": "lognormal", "mean": 800, "sigma": 0.5},
    )
    per_session = df.groupby("session_id").size()
    assert per_session.between(1, 6).all() and per_session.nunique() > 2
    assert df["after_ms"].dropna().nunique() > 10
    # the same draws from the typed configuration's Distribution objects
    typed = session_arrivals(
        1,
        n=40,
        rate_per_s=5,
        turns=Distribution("uniform", low=1, high=6),
        tool_ms=Distribution("lognormal", mean=800.0, sigma=0.5),
    )
    pd.testing.assert_frame_equal(df, typed)


def test_a_session_longer_than_the_model_holds_is_refused_naming_the_key():
    with pytest.raises(SessionError, match="session 0 turn 3 needs 8,412 .* lower turns") as e:
        session_arrivals(
            1,
            n=1,
            rate_per_s=1,
            turns=5,
            context_tokens=6000,
            growth_tokens=796,
            output_tokens=6,
            max_context_tokens=8192,
        )
    assert e.value.key == "turns"
    with pytest.raises(SessionError, match="lower context_tokens"):
        session_arrivals(1, n=1, rate_per_s=1, context_tokens=9000, max_context_tokens=8192)


# --- the closed loop under the fluid simulator ------------------------------------------


def test_each_turn_arrives_tool_ms_after_the_previous_turns_last_token(basic, fabric):
    driver, result = _run(basic, fabric)
    assert result.finished
    req = driver.requests_table()
    assert len(req) == 12 and req["served"].all()
    last_token = driver.tokens_table().groupby("request_id")["t_ns"].max()
    for _, turns in req.groupby("session_id"):
        ids, arrivals = turns["request_id"].tolist(), turns["arrival_ns"].tolist()
        for before, after, t in zip(ids, ids[1:], arrivals[1:], strict=False):
            assert t == last_token[before] + 250_000_000, (before, after)


def test_later_turns_hit_the_cache_and_come_sooner(basic, fabric):
    cached, _ = _run(basic, fabric)
    cold, _ = _run(basic, fabric, cache=False)
    req, cold_req = cached.requests_table(), cold.requests_table()
    later = req["turn"] > 0
    assert (req.loc[~later, "cached_tokens"] == 0).all()
    # kv_affinity keeps a session on the server holding its blocks: every full block of
    # the previous prompt is a local hit
    previous_full = req.groupby("session_id")["input_tokens"].shift(1)[later] // 512 * 512
    assert (req.loc[later, "cached_tokens"] == previous_full).all()
    assert (req.loc[later, "local_hit_blocks"] > 0).all()
    assert (req.loc[later, "remote_hit_blocks"] == 0).all()
    assert (cold_req["cached_tokens"] == 0).all()
    assert req.loc[later, "ttft_ms"].median() < 0.5 * cold_req.loc[later, "ttft_ms"].median()
    # a closed loop: faster turns finish the sessions sooner
    assert req["arrival_ns"].max() < cold_req["arrival_ns"].max()


def test_an_unserved_turn_ends_its_session(basic, fabric):
    # turn 1 needs 3312 KV tokens (prompt + output), more than the 3200 an instance holds
    driver, result = _run(basic, fabric, kv_capacity_tokens=3200)
    assert result.finished
    req = driver.requests_table()
    assert req.loc[req["turn"] == 0, "served"].all()
    assert not req.loc[req["turn"] > 0, "served"].any()
    assert req.loc[req["turn"] == 1, "error"].str.contains("KV tokens").all()
    assert req.loc[req["turn"] > 1, "error"].str.contains("never arrived").all()
    assert (req["arrival_ns"] >= 10**12).all()


def test_build_refuses_sessions_the_model_cannot_hold(basic, fabric):
    long = dict(SESSION, turns=20, growth_tokens=400)
    with pytest.raises(SpecError, match=r"arrivals\.sessions\.turns: .*8,192"):
        _run(basic, fabric, sessions=long)  # the spec refuses the longest session
    # sessions put in by hand, past the spec's check: the build refuses what the draws outgrow
    w = _typed(dict(basic, arrivals={"sessions": SESSION}))
    given = dataclasses.replace(w.arrivals.sessions, turns=20, growth_tokens=400)
    w = dataclasses.replace(w, arrivals=dataclasses.replace(w.arrivals, sessions=given))
    with pytest.raises(ServingError, match=r"arrivals\.sessions\.turns: .*8,192"):
        build_serving(w, fabric, 1, 0, None)


# --- the metrics ------------------------------------------------------------------------


def test_session_metrics_by_hand():
    ms = 1_000_000
    req = pd.DataFrame(
        {
            "session_id": [0, 0, 0, 1, 1, -1],
            "turn": [0, 1, 2, 0, 1, 0],
            "arrival_ns": [0, 1100 * ms, 2300 * ms, 500 * ms, 900 * ms, 0],
            "input_tokens": [1000, 1600, 2200, 600, 700, 50],
            "cached_tokens": [0, 512, 1536, 0, 0, 0],
            "ttft_ms": [400.0, 100.0, 80.0, 200.0, math.nan, 10.0],
            "e2e_ms": [1000.0, 900.0, 700.0, 300.0, math.nan, 20.0],
        }
    )
    m = session_metrics(req)
    assert m["sessions"] == 2 and m["completed"] == 1  # session 1's turn 1 was unserved
    assert m["completion_ms"]["count"] == 1 and m["completion_ms"]["max"] == 3000.0
    assert m["ttft_ms"]["first_turn"]["p50"] == 300.0
    assert m["ttft_ms"]["later_turns"]["count"] == 2
    assert m["hit_rate"]["first_turn"] == 0.0
    assert m["hit_rate"]["later_turns"] == pytest.approx(2048 / 4500)
    # later turns could reuse 512 (of 1000) + 1536 (of 1600) + 512 (of 600) tokens
    assert m["reusable_rate"] == pytest.approx(2560 / 4500)
    assert [t["served"] for t in m["by_turn"]] == [2, 1, 1]
    assert session_metrics(req[req["session_id"] < 0]) is None


# --- the bundled presets ----------------------------------------------------------------


def test_the_summary_carries_session_metrics_only_for_sessions(basic, fabric):
    driver, result = _run(basic, fabric)
    whole = expand(load_spec(SPECS_DIR / "serving-basic.yaml"))[0].resolved
    workload = dict(basic, arrivals={"sessions": SESSION})
    spec = config_of_spec(whole | {"duration_s": 10, "workloads": [workload]})
    m = summarize(None, driver.requests_table(), driver.tokens_table(), None, spec)
    sessions = m["serving"]["sessions"]
    assert sessions["sessions"] == sessions["completed"] == 3
    assert [t["requests"] for t in sessions["by_turn"]] == [3, 3, 3, 3]
    assert sessions["hit_rate"]["later_turns"] > 0.8
    plain = build_serving(_typed(basic), fabric, 1)
    simulate(plain, fabric_rate(fabric))
    assert "sessions" not in summarize(None, plain.requests_table(), None, None, spec)["serving"]


def _preset(name):
    run = expand(load_spec(SPECS_DIR / f"{name}.yaml"))[0]
    fab = run.fabric()
    driver = build_serving(run.config.workloads[0], fab, 1)
    until = int((run.resolved["duration_s"] + 5) * 1e9)
    result = simulate(driver, fabric_rate(fab), until_ns=until)
    assert result.finished, f"{name}: its sessions outlast duration_s"
    req = driver.requests_table()
    assert req["served"].all()
    return req, session_metrics(req)


def test_agentic_coding_rereads_126k_tokens_from_the_cache():
    req, m = _preset("sessions-agentic-coding")
    first = req[req["turn"] == 0]
    assert (first["input_tokens"] == 126_000).all() and (req["output_tokens"] == 252).all()
    assert m["turns"]["mean"] == 8 and m["hit_rate"]["later_turns"] > 0.95
    # a tool call costs a short prefill, not the whole context again
    assert m["ttft_ms"]["later_turns"]["p50"] < 0.05 * m["ttft_ms"]["first_turn"]["p50"]


def test_chat_reuses_most_of_each_prompt_and_rag_little():
    chat_req, chat = _preset("sessions-chat")
    rag_req, rag = _preset("sessions-rag")
    assert chat["turns"]["mean"] == 12 and chat["hit_rate"]["later_turns"] > 0.7
    hit = {
        n: r["cached_tokens"].sum() / r["input_tokens"].sum()
        for n, r in (("chat", chat_req), ("rag", rag_req))
    }
    assert hit["rag"] < 0.3 < 0.7 < hit["chat"]
    # prefill-heavy: RAG computes far more prompt tokens per generated token
    computed = {
        n: (r["input_tokens"] - r["cached_tokens"]).sum() / r["output_tokens"].sum()
        for n, r in (("chat", chat_req), ("rag", rag_req))
    }
    assert computed["rag"] > 5 * computed["chat"]


def test_long_document_review_is_one_200k_token_call():
    req, m = _preset("sessions-long-document")
    assert m["turns"]["max"] == 1 and (req["input_tokens"] == 200_000).all()
    assert (req["cached_tokens"] == 0).all() and m["hit_rate"]["later_turns"] is None


def test_the_estimate_sets_later_turns_beside_first_ones(capsys):
    from experiments.analysis.estimates import print_estimates

    assert print_estimates("sessions-chat", ["workloads.0.arrivals.sessions.n=2"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "sessions:" in x)
    assert "first turns" in line and "later turns (hit rate 8" in line

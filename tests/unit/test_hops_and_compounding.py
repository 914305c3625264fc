"""Hops per request and how latency tails compound over a session's turns, on
hand-made requests tables (``metrics.hops``, ``metrics.sessions``)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.analysis.metrics.hops import hop_metrics, request_hops
from experiments.analysis.metrics.sessions import session_metrics
from topologies import make_fabric


def test_hops_follow_the_fabric():
    """A 2 x 4 HyperX, two GPUs per router: same router 0 hops, one coordinate apart 1,
    both apart 2; a request without a decode host has none."""
    f = make_fabric("hyperx", shape=[2, 4], k=2)  # h0,h1 on r0_0; h2,h3 on r0_1; h8 on r1_0
    req = pd.DataFrame(
        {
            "prefill_host": ["h0", "h0", "h0", "h0", "h0"],
            "decode_host": ["h1", "h2", "h8", "h10", None],
            "ttft_ms": [10.0, 20.0, 30.0, 40.0, 50.0],
            "kv_transfer_ms": [1.0, 2.0, 3.0, 4.0, None],
        }
    )
    assert request_hops(req, f).tolist()[:4] == [0.0, 1.0, 1.0, 2.0]
    assert math.isnan(request_hops(req, f).iloc[4])
    by = {row["hops"]: row for row in hop_metrics(req, f)["by_hops"]}
    assert sorted(by) == [0, 1, 2]
    assert by[1]["requests"] == 2 and by[1]["ttft_ms"]["p50"] == pytest.approx(25.0)
    assert by[2]["kv_transfer_ms"]["max"] == pytest.approx(4.0)


def test_no_hops_when_nothing_crosses_a_switch():
    f = make_fabric("rail_optimized", servers=2, gpus_per_server=2, spines=1)
    req = pd.DataFrame(
        {
            "prefill_host": ["gpu0_0"],
            "decode_host": ["gpu0_1"],
            "ttft_ms": [1.0],
            "kv_transfer_ms": [1.0],
        }
    )
    assert hop_metrics(req, f) is None  # two GPUs of one server: NVLink


def _sessions(ttft: list[list[float]]) -> pd.DataFrame:
    rows = []
    for sid, turns in enumerate(ttft):
        for turn, t in enumerate(turns):
            rows.append(
                {
                    "session_id": sid,
                    "turn": turn,
                    "arrival_ns": (sid * 100 + turn) * 10**9,
                    "ttft_ms": t,
                    "e2e_ms": t + 5.0,
                    "input_tokens": 1000,
                    "cached_tokens": 0,
                }
            )
    return pd.DataFrame(rows)


def test_a_session_waits_the_sum_of_its_turns():
    m = session_metrics(_sessions([[10.0, 20.0, 30.0], [5.0, 5.0, 5.0]]))
    assert m["waiting_ms"]["count"] == 2
    assert m["waiting_ms"]["max"] == pytest.approx(60.0)
    assert m["waiting_ms"]["mean"] == pytest.approx(37.5)
    assert [t["ttft_p99_ms"] for t in m["by_turn"]] == pytest.approx([9.95, 19.85, 29.75])


def test_one_slow_turn_marks_its_session_and_independence_predicts_the_share():
    """Ten sessions of five turns; only session 0 has turns above the p90 (two of
    them): 10 % of sessions hit the tail where independent turns would give
    1 - 0.9^5 = 41 %."""
    ttft = [[100.0, 100.0, 10.0, 10.0, 10.0]] + [[10.0] * 5 for _ in range(9)]
    slow = session_metrics(_sessions(ttft))["slow_turns"]
    assert slow["threshold_ms"] == pytest.approx(10.0)
    assert slow["sessions_with_one"] == pytest.approx(0.1)
    assert slow["if_independent"] == pytest.approx(1 - 0.9**5)

"""Noisy-neighbour slowdown on hand-made tables with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.analysis.metrics.tenants import active_intervals, inside, noisy_neighbour

MS = 1_000_000


def flows(rows):
    return pd.DataFrame(rows, columns=["tenant", "t_start_ns", "t_end_ns", "fct_ms", "ok"])


def test_intervals_merge_and_membership():
    f = flows(
        [
            ("b", 0, 10 * MS, 10, True),
            ("b", 5 * MS, 20 * MS, 15, True),
            ("b", 50 * MS, 60 * MS, 10, True),
            ("a", 0, 1, 0, True),
        ]
    )
    iv = active_intervals(f, "b")
    assert iv.tolist() == [[0, 20 * MS], [50 * MS, 60 * MS]]
    times = np.array([-1, 0, 20 * MS, 21 * MS, 55 * MS, 61 * MS], dtype=float)
    assert inside(times, iv).tolist() == [False, True, True, False, True, False]


def test_victim_flows_are_slower_while_the_aggressor_is_active():
    rows = [("b", 100 * MS, 200 * MS, 100, True)]
    rows += [("a", t * MS, t * MS + 4 * MS, 4.0, True) for t in range(0, 100, 10)]  # quiet
    rows += [("a", t * MS, t * MS + 12 * MS, 12.0, True) for t in range(100, 200, 10)]  # noisy
    out = noisy_neighbour(flows(rows), None, None, victim="a", aggressor="b")
    assert out["metric"] == "fct_ms"
    assert out["with_aggressor"]["count"] == 10 and out["without_aggressor"]["count"] == 10
    assert out["slowdown_p99"] == pytest.approx(3.0)
    assert out["aggressor_active_s"] == pytest.approx(0.1)


def test_a_serving_victim_is_judged_by_its_inter_token_latency():
    f = flows([("moe", 0, 50 * MS, 50, True)])
    requests = pd.DataFrame({"request_id": [1, 2], "tenant": ["chat", "other"]})
    tokens = pd.DataFrame(
        {
            "request_id": [1, 1, 1, 1, 2],
            "t_ns": [10 * MS, 40 * MS, 70 * MS, 90 * MS, 20 * MS],
            "itl_ms": [np.nan, 30.0, 20.0, 20.0, 99.0],
        }
    )
    out = noisy_neighbour(f, tokens, requests, victim="chat", aggressor="moe")
    assert out["metric"] == "itl_ms"
    assert out["with_aggressor"]["p50"] == 30.0 and out["without_aggressor"]["p50"] == 20.0
    assert out["slowdown_p50"] == pytest.approx(1.5)


def test_no_aggressor_traffic_means_no_slowdown_figure():
    f = flows([("a", 0, MS, 1.0, True)])
    out = noisy_neighbour(f, None, None, victim="a", aggressor="nobody")
    assert out["slowdown_p99"] is None and out["without_aggressor"]["count"] == 1

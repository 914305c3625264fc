"""The busiest second against the rest (experiments.analysis.metrics.bursts) on tables
computed by hand, and its place in the summary and the report."""

import math

import numpy as np
import pandas as pd
import pytest

from experiments.analysis.metrics.bursts import (
    busiest_second,
    peak_second_metrics,
    requests_ahead,
)
from experiments.analysis.summary import summarize
from experiments.spec.config import Slo
from tests.unit.run_configs import serving_config

S = 1_000_000_000
MS = 1_000_000


def _requests(arrivals_ms, ttft, prefill_ms, session_id=None):
    arrival = np.asarray(arrivals_ms, dtype=float) * MS
    out = pd.DataFrame(
        {
            "request_id": range(len(arrival)),
            "arrival_ns": arrival,
            "ttft_ms": ttft,
            "tpot_ms": 5.0,
            "e2e_ms": np.asarray(ttft, dtype=float) + 50,
            "kv_transfer_ms": 2.0,
            "input_tokens": 1000,
            "cached_tokens": 0,
            "prefill_end_ns": arrival + np.asarray(prefill_ms, dtype=float) * MS,
        }
    )
    if session_id is not None:
        out["session_id"] = session_id
    return out


def test_the_busiest_second_is_found_wherever_it_starts():
    # arrivals at 0, 2.0, 2.3, 2.9, 3.1, 5: [2.3, 3.3) holds 3, as does [2.0, 3.0)
    t = np.array([0, 2000, 2300, 2900, 3100, 5000], dtype=float) * MS
    assert busiest_second(t) == (1, 3)  # the earliest of the tied intervals
    assert busiest_second(np.array([0.0, 1.0 * S])) == (0, 1)  # [t, t + 1 s) is half-open


def test_requests_ahead_counts_the_prefills_not_yet_ended():
    arrival = np.array([0, 100, 200, 300], dtype=float)
    end = np.array([250, 150, np.nan, 310], dtype=float)  # the third never prefilled
    # at 100: the first is ahead; at 200: the first (the second ended at 150);
    # at 300: the unprefilled third (the first ended at 250)
    assert requests_ahead(arrival, end).tolist() == [0, 1, 1, 1]


def test_the_peak_seconds_requests_wait_longer_than_the_rest():
    # 10 quiet arrivals, one every second; a burst of 5 within 400 ms at 20 s
    quiet = [i * 1000.0 for i in range(10)]
    burst = [20000.0 + 100 * k for k in range(5)]
    # each burst request waits for the one before: prefill ends at 20.3, 20.6, 20.9, 21.2 s
    prefill = [40.0] * 10 + [300.0, 500.0, 700.0, 900.0, math.nan]  # the last one unserved
    ttft = [p + 10 for p in prefill]
    m = peak_second_metrics(_requests(quiet + burst, ttft, prefill))
    assert m["requests"] == 15 and m["span_s"] == pytest.approx(20.4)
    peak, rest = m["peak"], m["rest"]
    assert peak["start_s"] == pytest.approx(20.0) and peak["requests"] == 5
    assert peak["share"] == pytest.approx(5 / 15) and peak["unserved"] == 1
    assert peak["ttft_ms"]["count"] == 4 and peak["ttft_ms"]["p50"] == pytest.approx(610.0)
    assert rest["requests"] == 10 and rest["ttft_ms"]["p50"] == 50.0
    assert m["peak_over_rest_ttft_p50"] == pytest.approx(12.2)
    # the last burst request arrives (20.4 s) behind three unfinished prefills
    assert peak["requests_ahead"]["max"] == 3 and rest["requests_ahead"]["max"] == 0
    assert peak["prefill_ms"]["max"] == 900.0 and rest["prefill_ms"]["max"] == 40.0


def test_session_turns_and_runs_within_one_second_have_no_peak_second():
    quiet = [i * 1000.0 for i in range(4)]
    sessions = _requests(quiet, [50.0] * 4, [40.0] * 4, session_id=[0, 0, 1, 1])
    assert peak_second_metrics(sessions) is None
    assert peak_second_metrics(_requests([0, 300, 900], [1.0] * 3, [1.0] * 3)) is None


def test_the_summary_and_report_carry_the_peak_second(tmp_path):
    from experiments.output.formatting import at_path
    from experiments.output.metric_rows import LATENCY_ROWS

    quiet = [i * 1000.0 for i in range(10)]
    burst = [20000.0 + 100 * k for k in range(5)]
    req = _requests(quiet + burst, [50.0] * 10 + [90.0] * 5, [40.0] * 15)
    spec = serving_config(25.0, slo=Slo(ttft_ms=100.0, tpot_ms=50.0))
    m = summarize(None, req, None, None, spec)
    assert m["serving"]["peak_second"]["peak"]["ttft_ms"]["p50"] == 90.0
    shown = [label for label, path in LATENCY_ROWS if at_path(m, path)]
    assert "TTFT, busiest second's arrivals (ms)" in shown
    assert "TTFT, other arrivals (ms)" in shown


def test_the_reference_index_carries_what_the_handouts_query():
    from experiments.orchestration.reference import run_index

    quiet = [i * 1000.0 for i in range(10)]
    burst = [20000.0 + 100 * k for k in range(5)]
    req = _requests(quiet + burst, [50.0] * 10 + [90.0] * 5, [40.0] * 15)
    spec = serving_config(25.0, cache=True, slo=Slo(ttft_ms=100.0, tpot_ms=50.0))
    entry = run_index({"label": "x", "metrics": summarize(None, req, None, None, spec)}, "s")
    # jq '.runs[] | .peak_second.peak_ttft_ms.p50, .prefix_cache.hit_rate' (the handouts)
    assert entry["peak_second"]["peak_ttft_ms"]["p50"] == 90.0
    assert entry["peak_second"]["rest_prefill_ms"]["p50"] == 40.0
    assert entry["peak_second"]["share"] == pytest.approx(5 / 15)
    assert entry["prefix_cache"]["hit_rate"] == 0.0

"""A dilated run (``scale.time_dilation``) against an undilated one: it takes longer on
the wall clock, writes its tables in real-equivalent time, and reports the same serving
times (TTFT and TPOT are set by compute and the shaped links, which both dilate)."""

from __future__ import annotations

import time

import pytest

from .runs import run_spec, summary, tables
from .test_serving import SPEC

pytestmark = pytest.mark.root


def _run(tmp_path, name: str, d: int) -> tuple[dict, float, tuple]:
    from traffic.traces import bundled_azure_trace

    text = SPEC.replace("TRACE", str(bundled_azure_trace()))
    text = text.replace("limit: 50", "limit: 12").replace("duration_s: 25", "duration_s: 10")
    t = time.monotonic()
    run_dir = run_spec(tmp_path, name, text, f"scale.time_dilation={d}")
    wall = time.monotonic() - t
    return summary(run_dir), wall, tables(run_dir, "requests", "queues", "flows")


def test_a_dilated_serving_run_reports_real_equivalent_times(tmp_path):
    s1, wall1, (req1, q1, f1) = _run(tmp_path, "d1", 1)
    s3, wall3, (req3, q3, f3) = _run(tmp_path, "d3", 3)
    for req in (req1, req3):
        assert len(req) == 12 and req["served"].all(), req["error"].dropna().tolist()
    # three times slower on the wall clock: its ~7 s of real-equivalent traffic took ~21 s
    # (the build and teardown, ~15 s, are not dilated)
    assert wall3 > wall1 + 5, (wall1, wall3)
    # yet every table reads in real-equivalent time: the queues were sampled over the
    # run's 10 s (plus the drain), not over the 30 s of wall time it took
    assert (q3["t_ns"].max() - q3["t_ns"].min()) / 1e9 < 10 + 6
    assert (f3["t_end_ns"].max() - f3["t_start_ns"].min()) / 1e9 < 10 + 6
    for col in ("ttft_ms", "tpot_ms"):
        a, b = req1[col].median(), req3[col].median()
        assert 0.75 < b / a < 1.33, (col, a, b)
    # the summary and report say what the run was
    assert (s1["time_dilation"], s3["time_dilation"]) == (1, 3)
    report = next((tmp_path / "d3").glob("*/*/report.md")).read_text()
    assert "time dilation 3" in report

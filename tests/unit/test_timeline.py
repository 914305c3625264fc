"""The per-run timeline, drawn from committed reference runs (copied into tmp_path):
the PNG is in the report, its time axis covers the run, and faults and all-to-all steps
are marked where they happened."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from experiments.output.report import write_report
from experiments.output.results import load_run
from experiments.output.timeline import alltoall_steps, timeline_figure

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference"
PNG = b"\x89PNG\r\n\x1a\n"


def _copy(tmp_path: Path, experiment: str) -> Path:
    runs = sorted((REFERENCE / experiment / "runs").iterdir())
    if not runs:
        pytest.fail(f"no committed reference run of {experiment}")
    dst = tmp_path / experiment / runs[0].name
    shutil.copytree(runs[0], dst, ignore=shutil.ignore_patterns("report.md", "plots"))
    return dst


def _fault_lines(ax) -> list[float]:
    return [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]


def test_link_failure_timeline_is_in_the_report_and_marks_the_faults(tmp_path):
    run_dir = _copy(tmp_path, "link-failure")
    report = write_report([run_dir]).read_text()
    assert "![Timeline](plots/timeline.png)" in report
    assert (run_dir / "plots" / "timeline.png").read_bytes()[:8] == PNG

    run = load_run(run_dir)
    fig = timeline_figure(run)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles[0].startswith("hottest egress queues")
    assert titles[1].startswith("most loaded links") and "real-equivalent" in titles[1]
    assert titles[2:] == [
        "inter-token latency of every token",
        "TTFT of every request, at its arrival",
    ]
    # The spec fails rail1-spine0 at 3 s and restores it at 6 s of a 9 s run.
    faults = run.spec["faults"]
    at = sorted(float(f["at_s"]) for f in faults)
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        assert lo <= 0.0 and hi >= run.config.duration_s
        assert _fault_lines(ax) == pytest.approx(at, abs=0.05)
    # every request is a point at its arrival
    ttft = fig.axes[3].get_lines()[0]
    assert len(ttft.get_xdata()) == len(run.requests)
    assert max(ttft.get_ydata()) == pytest.approx(run.requests["ttft_ms"].max())


def test_alltoall_steps_are_shaded_on_every_panel(tmp_path):
    run_dir = _copy(tmp_path, "noisy-neighbour")
    run = load_run(run_dir)
    steps = alltoall_steps(run.flows)
    a2a = run.flows[run.flows["kind"] == "alltoall"]
    assert len(steps) == a2a.groupby(["tenant", "step"]).ngroups > 1
    fig = timeline_figure(run)
    for ax in fig.axes:
        assert len(ax.patches) == len(steps)
    assert "![Timeline](plots/timeline.png)" in write_report([run_dir]).read_text()


def test_a_run_without_tables_has_no_timeline(tmp_path):
    run_dir = _copy(tmp_path, "link-failure")
    for table in run_dir.glob("*.parquet"):
        table.unlink()
    (run_dir / "events.json").unlink()
    assert timeline_figure(load_run(run_dir)) is None
    assert "plots/timeline.png" not in write_report([run_dir]).read_text()

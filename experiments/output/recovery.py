"""What a report says of a run that never finished, or whose tables were recovered.

A runner killed with SIGKILL (or a machine that lost power) leaves the summary.json
written when the run started (``"partial": true, "error": "run in progress"``), and the
chunks its tables were saved in as it went (``experiments.output.chunks``). The report
of such a run must not look like a short complete one: :func:`unfinished_lines` says
that the run never finished, which tables were recovered from chunks and up to what
instant (the last row, in seconds after the run's t0 when it was recorded), which
tables are absent, and that the fidelity verdict and the metrics were not computed by
the run; :func:`recovered_note` marks metrics the report computed from such tables.
"""

from __future__ import annotations

import pandas as pd

from experiments.output import chunks
from experiments.output.results import TABLES, Run

IN_PROGRESS = "run in progress"  # the error of the summary written when a run starts
# The column that says how far a table got.
TIME_COLUMNS = {
    "flows": "t_end_ns",
    "requests": "arrival_ns",
    "tokens": "t_ns",
    "queues": "t_ns",
    "links": "t_ns",
    "cpu": "t_ns",
}
SERVING_ONLY = ("requests", "tokens")


def never_finished(run: Run) -> bool:
    """The summary is still the one written when the run started."""
    return run.summary.get("error") == IN_PROGRESS and "ended" not in run.summary


def t0_ns(run: Run) -> int | None:
    """The run's t0: events.json's, else the one saved beside the chunks."""
    t0 = run.events.get("t0_ns")
    return int(t0) if isinstance(t0, int) else chunks.read_clock(run.path)


def last_instant_s(run: Run, name: str) -> tuple[float | None, bool]:
    """How far table ``name`` got: its latest instant, in seconds after t0 (``True``)
    or, without a t0, in seconds after its own first row (``False``)."""
    frame = run.table(name)
    col = TIME_COLUMNS.get(name)
    if frame is None or col not in frame or not len(frame):
        return None, False
    times = pd.to_numeric(frame[col], errors="coerce").dropna()
    times = times[times > 0]
    if not len(times):
        return None, False
    t0 = t0_ns(run)
    if t0 is not None:
        return (float(times.max()) - t0) / 1e9, True
    return (float(times.max()) - float(times.min())) / 1e9, False


def expected_tables(run: Run) -> list[str]:
    """The tables this run would have had: the serving ones only with a serving workload."""
    if run.config is None:  # unknown: any of them
        return list(TABLES)
    serving = any(w.kind == "serving" for w in run.config.workloads)
    return [t for t in TABLES if serving or t not in SERVING_ONLY]


def unfinished_lines(run: Run, computed: bool) -> list[str]:
    """The report's paragraph on a run that never finished or has recovered tables;
    ``computed``: whether the report computed metrics from the recovered tables."""
    unfinished = never_finished(run)
    if not unfinished and not run.recovered:
        return []
    lines: list[str] = []
    if unfinished:
        lines += [
            f'> **This run never finished**: its summary.json still says "{IN_PROGRESS}" '
            "(the runner was killed, or the machine stopped, before the end of the run). "
            "**The fidelity verdict and the run's metrics were not computed.**",
            "",
        ]
    if run.recovered:
        lines += [
            "Tables recovered from the chunks saved while the run went on (they stop "
            "where it stopped):",
            "",
        ]
        lines += [f"- {_recovered_row(run, name)}" for name in run.recovered]
        lines.append("")
    if unfinished:
        absent = [t for t in expected_tables(run) if run.table(t) is None]
        if absent:
            lines += [f"Absent (nothing of them was saved): {', '.join(absent)}.", ""]
        if computed:
            lines += [recovered_note(), ""]
        else:
            lines += ["No metrics could be computed from what was recovered.", ""]
    return lines


def recovered_note() -> str:
    return (
        "The numbers below were computed by `kvfabric report` from the recovered "
        "tables of a **partial run**: they cover only the time until it stopped."
    )


def _recovered_row(run: Run, name: str) -> str:
    frame = run.table(name)
    rows = 0 if frame is None else len(frame)
    last, from_t0 = last_instant_s(run, name)
    if last is None:
        until = ""
    elif from_t0:
        until = f", up to {last:.3g} s after t0"
    else:
        until = f", spanning {last:.3g} s (the run's t0 was not recorded)"
    skipped = run.skipped_chunks(name)
    note = f"; {len(skipped)} unreadable chunk(s) skipped ({skipped[0]})" if skipped else ""
    return f"{name}: {rows:,} rows{until}{note}"

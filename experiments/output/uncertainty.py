"""What a report says of a figure's uncertainty: the 95 % interval of each headline
distribution's p50 from the run's own samples (bootstrap over its requests, tokens or
flows), and, for a sweep point run with ``--repeat``, the spread of its primary metrics
across seeds (summary.json's ``repeats``, ``experiments.analysis.repeats``).

Seeded, so a report regenerated from the same tables is the same report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from experiments.analysis.intervals import RESAMPLES, Interval, over_requests
from experiments.analysis.metrics.flows import fct_ms, ok_mask
from experiments.output.formatting import fmt
from experiments.output.results import Run

INTERVAL_SEED = 0
BOOTSTRAP_CELLS = 20_000_000  # resampled values per sample, at most


def resamples(*sizes: int) -> int:
    """Fewer resamples for very large samples (their intervals are narrow anyway)."""
    return max(200, min(RESAMPLES, BOOTSTRAP_CELLS // max(1, *sizes)))


def _column(table: str, column: str) -> Callable[[Run], Any]:
    def values(run: Run) -> Any:
        df = run.table(table)
        return None if df is None or column not in df else df[column]

    return values


def _fct(kind: str | None) -> Callable[[Run], Any]:
    def values(run: Run) -> Any:
        flows = run.flows
        if flows is None or not len(flows):
            return None
        keep = ok_mask(flows) if kind is None else ok_mask(flows) & (flows["kind"] == kind)
        return fct_ms(flows)[keep]

    return values


# The samples behind each headline distribution (``analysis.headline`` labels), as
# summary.json computed them.
SAMPLES: dict[str, Callable[[Run], Any]] = {
    "TTFT": _column("requests", "ttft_ms"),
    "ITL": _column("tokens", "itl_ms"),
    "KV transfer": _column("requests", "kv_transfer_ms"),
    "FCT, kv_transfer flows": _fct("kv_transfer"),
    "FCT, all flows": _fct(None),
}


def p50_interval(run: Run, label: str) -> Interval | None:
    """The 95 % interval of headline ``label``'s p50 (``None`` without its samples)."""
    values = SAMPLES[label](run) if label in SAMPLES else None
    if values is None:
        return None
    return over_requests(values, "p50", INTERVAL_SEED, resamples(len(values)))


def interval_text(ci: Interval | None) -> str:
    return "–" if ci is None else f"{fmt(ci.low)} – {fmt(ci.high)}"


def repeats_lines(summary: dict[str, Any]) -> list[str]:
    """The spread across the seeds of this run's sweep point, when it was repeated."""
    block = summary.get("repeats")
    if not isinstance(block, dict) or not block.get("metrics"):
        return []
    seeds = ", ".join(str(s) for s in block.get("seeds") or [])
    lines = [
        "## Across seeds",
        "",
        f"This sweep point ran with seeds {seeds}: each figure's mean over those runs, "
        "the 95 % interval of that mean (Student's t over the runs) and the coefficient "
        "of variation (standard deviation ÷ mean).",
        "",
        "| metric | per run | mean | 95 % interval | CV |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, figure in block["metrics"].items():
        ci = figure.get("ci95") or {}
        per_run = ", ".join(fmt(v) for v in figure.get("values") or [])
        lines.append(
            f"| {name} | {per_run} | {fmt(figure.get('mean'))} "
            f"| {fmt(ci.get('low'))} – {fmt(ci.get('high'))} | {fmt(figure.get('cv'))} |"
        )
    return [*lines, ""]

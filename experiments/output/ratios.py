"""The comparison report's ratios: each run's p50 over the first run's, with a 95 %
interval, and "no difference detected" where that interval includes 1.

The interval is a bootstrap over each run's own samples (requests, tokens, flows), so it
says how precisely these two runs measured their distributions, not how other seeds would
come out (a sweep point run with ``--repeat`` has that spread in its summary.json's
``repeats``). Seeded, so the same runs give the same report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from experiments.analysis.intervals import ratio_over_requests
from experiments.output.formatting import cell, fmt
from experiments.output.results import Run
from experiments.output.uncertainty import INTERVAL_SEED, resamples

STATISTIC = "p50"

Values = Callable[[Run], Any]


def ratio_verdict(excludes_one: bool) -> str:
    return "differs" if excludes_one else "no difference detected"


def ratio_lines(runs: Sequence[Run], metrics: Sequence[tuple[str, Values]]) -> list[str]:
    """The section: one row per metric and run after the first that both measured."""
    if len(runs) < 2:
        return []
    base = runs[0]
    rows = []
    for title, values in metrics:
        b = values(base)
        if b is None or len(b) < 2:
            continue
        for run in runs[1:]:
            a = values(run)
            if a is None or len(a) < 2:
                continue
            ci = ratio_over_requests(a, b, STATISTIC, INTERVAL_SEED, resamples(len(a), len(b)))
            if ci is None:
                continue
            rows.append(
                f"| {title} | {cell(run.label)} | {fmt(ci.estimate)} "
                f"| {fmt(ci.low)} – {fmt(ci.high)} | {ratio_verdict(ci.excludes_one)} |"
            )
    if not rows:
        return []
    return [
        "## Ratios to the first run",
        "",
        f"p50 of each run ÷ p50 of **{cell(base.label)}**, with its 95 % interval "
        "(bootstrap over each run's requests, tokens or flows); where the interval "
        "includes 1, no difference is detected.",
        "",
        "| metric | run | ratio | 95 % interval | |",
        "| --- | --- | ---: | ---: | --- |",
        *rows,
        "",
    ]

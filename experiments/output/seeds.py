"""The comparison report's answer for repeated sweep points (``--repeat R``, and every
reference): each headline figure per point as its mean over the seeds with a 95 %
interval, and its ratio to the first point with an interval and a verdict.

Runs are grouped by their label without ``seed=``; a point with one run has no interval
and is shown as it is. The ratio is paired by seed: the same seed drives the same
arrivals, prompts and tie-breaks at every point of a sweep, so each seed gives one ratio
(point ÷ first point) and the interval is Student's t over those ratios
(:func:`experiments.analysis.intervals.across_seeds`). With 3 seeds t is 4.30: only a
consistent difference excludes 1, which is the honest reading of three runs.

A p99 goes in only where every seed's sample supports it (``percentile_supported``);
pure (summaries in, Markdown lines out), so a report regenerated from its tables is
byte-identical.
"""

from __future__ import annotations

from collections.abc import Sequence

from experiments.analysis.headline import headline
from experiments.analysis.intervals import Interval, across_seeds, coefficient_of_variation
from experiments.analysis.metrics.stats import percentile_supported
from experiments.output.formatting import cell, fmt
from experiments.output.metric_rows import run_metrics
from experiments.output.ratios import ratio_verdict
from experiments.output.results import Run


def point_label(run: Run) -> str:
    """The sweep point a run belongs to: its label without the ``seed=`` part."""
    parts = [p for p in run.label.split(",") if not p.startswith("seed=")]
    return ",".join(parts) or "base"


def by_point(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs grouped by sweep point, points in the order they first appear."""
    points: dict[str, list[Run]] = {}
    for run in runs:
        points.setdefault(point_label(run), []).append(run)
    return points


def repeated(runs: Sequence[Run]) -> bool:
    """Whether some sweep point ran with more than one seed."""
    return any(len(group) > 1 for group in by_point(runs).values())


def figures(run: Run) -> dict[tuple[str, str], float]:
    """The run's headline figures: ``(name, unit) -> value``; a distribution gives its
    p50 and, where its sample supports one, its p99."""
    out: dict[tuple[str, str], float] = {}
    for h in headline(run_metrics(run), run.summary.get("estimate")):
        if not h.distribution:
            value = h.measured.get("value")
            if isinstance(value, int | float):
                out[(h.label, h.unit)] = float(value)
            continue
        n = h.measured.get("count")
        for q in ("p50", "p99"):
            value = h.measured.get(q)
            supported = not isinstance(n, int) or percentile_supported(q, n)
            if isinstance(value, int | float) and supported:
                out[(f"{h.label} {q}", h.unit)] = float(value)
    return out


def paired_ratio(values: dict[int, float], base: dict[int, float]) -> Interval | None:
    """Mean over the seeds both points ran of value ÷ base value, with its t interval."""
    ratios = [values[s] / base[s] for s in sorted(values) if s in base and base[s] > 0]
    return across_seeds(ratios)


def seed_lines(runs: Sequence[Run]) -> list[str]:
    """The section, or nothing when no point was repeated."""
    if not repeated(runs):
        return []
    points = by_point(runs)
    per_point = {
        p: {int(r.summary.get("seed") or 0): figures(r) for r in group}
        for p, group in points.items()
    }
    quantities = list(
        dict.fromkeys(q for seeds in per_point.values() for f in seeds.values() for q in f)
    )
    first = next(iter(points))
    lines = [
        "## Across seeds",
        "",
        "Each sweep point ran with several seeds. Per headline figure: its value in each "
        "seed, their mean with the 95 % interval of that mean (Student's t over the "
        "seeds) and the coefficient of variation; then the ratio to the first point, "
        f"**{cell(first)}**, paired by seed (the same seed drives the same arrivals at "
        "every point), with its 95 % interval: where that interval includes 1, no "
        "difference is detected.",
        "",
    ]
    for name, unit in quantities:
        base = {s: f[(name, unit)] for s, f in per_point[first].items() if (name, unit) in f}
        rows = []
        for p, seeds in per_point.items():
            values = {s: f[(name, unit)] for s, f in seeds.items() if (name, unit) in f}
            if not values:
                continue
            ordered = [values[s] for s in sorted(values)]
            ci = across_seeds(ordered)
            mean = ci.estimate if ci else ordered[0]
            interval = "–" if ci is None else f"{fmt(ci.low)} – {fmt(ci.high)}"
            ratio = "–" if p == first else _ratio_cells(paired_ratio(values, base))
            rows.append(
                f"| {cell(p)} | {len(ordered)} | {', '.join(fmt(v) for v in ordered)} "
                f"| {fmt(mean)} | {interval} | {fmt(coefficient_of_variation(ordered))} "
                f"| {ratio} |"
            )
        if not rows:
            continue
        lines += [
            f"**{name} ({unit})**",
            "",
            "| point | seeds | per seed | mean | 95 % interval | CV | ÷ first point "
            "(95 % interval) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
            *rows,
            "",
        ]
    return lines


def _ratio_cells(ci: Interval | None) -> str:
    if ci is None:
        return "–"
    return f"{fmt(ci.estimate)} ({fmt(ci.low)} – {fmt(ci.high)}): {ratio_verdict(ci.excludes_one)}"

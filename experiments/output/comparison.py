"""The report of several runs side by side: ``<out>/report.md`` and ``<out>/plots``.

Called by :func:`experiments.output.report.write_report` with two or more runs. The first screen
is the fidelity verdict of every run, the experiment's question and, per headline
quantity (:mod:`experiments.analysis.headline`), a narrow table of one row per run with the
analytic estimate beside it. Then the per-run checks, the key values, the latencies the
headline does not show (one small table each), links to every run's own report written
relative to ``out`` (a copied, moved or committed results folder keeps working) and the
charts: metrics against a single numeric sweep key (else bars), and for TTFT, ITL, KV
transfer, FCT and FCT slowdown (when flows have a ``slowdown`` column) the runs' CDFs
overlaid, each run's estimate drawn in its colour.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from experiments.analysis.headline import headline, question
from experiments.analysis.metrics.flows import fct_ms, ok_mask
from experiments.analysis.metrics.stats import percentile_supported
from experiments.output import plots
from experiments.output.formatting import (
    at_path,
    cell,
    estimate_cell,
    fmt,
    percentile_cell,
    revision_text,
    short_label,
    slug,
    too_small,
    units_note,
    verdict_word,
    write_text,
)
from experiments.output.html import write_html
from experiments.output.metric_rows import (
    COMPARE_VALUES,
    LATENCY_ROWS,
    PLOTS,
    REPORT,
    key_metrics,
    run_metrics,
    run_scale,
)
from experiments.output.ratios import ratio_lines
from experiments.output.results import Run
from experiments.output.run_labels import labelled
from experiments.output.seeds import seed_lines

__all__ = ["compare_dir", "write_compare"]


def compare_dir(parent: Path) -> Path:
    """A fresh ``<parent>/compare-<timestamp>`` path (``-2``, ``-3``... if taken)."""
    base = parent / f"compare-{datetime.now():%Y%m%d-%H%M%S}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def write_compare(runs: list[Run], out: Path) -> Path:
    """Write the comparison of ``runs`` into ``out``; returns the path of report.md. Each
    run is labelled by what tells it apart from the others (``run_labels``)."""
    out.mkdir(parents=True, exist_ok=True)
    runs = labelled(runs)
    experiments = sorted({str(r.summary.get("experiment") or r.path.parent.name) for r in runs})
    lines = [f"# Comparison of {len(runs)} runs: {', '.join(experiments)}", ""]
    lines += _revision_lines(runs)
    lines += _compare_verdicts(runs)
    if len(experiments) == 1:
        asked = question(experiments[0])
        lines += [f"> **Question.** {cell(asked)}", ""] if asked else []
    across = seed_lines(runs)  # repeated points: means, intervals, paired ratios
    lines += across
    headline_lines = _compare_headline(runs)
    if across and headline_lines:
        headline_lines[:2] = ["## Headline, run by run", ""]
    lines += headline_lines
    if not across:  # one run per point: the ratio of each run to the first, by bootstrap
        lines += ratio_lines(runs, [(title, values) for title, _, values, _ in CDF_METRICS[:4]])
    lines += _compare_checks(runs)
    rows = [key_metrics(r) for r in runs]
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns and c != "run_id"]
    latency = [c for c in columns if c.endswith((" p50", " p99"))]
    counts = [c for c in columns if c.endswith(" n")]
    values = [c for c in columns if c not in latency and c not in counts]
    lines += ["## Key metrics", ""]
    lines += _table(values, rows)
    # one narrow table per latency metric the headline does not already show
    shown = {line[2:-2].rsplit(" (", 1)[0] for line in headline_lines if line.startswith("**")}
    names = [n for n in dict.fromkeys(c.rsplit(" ", 1)[0] for c in latency) if n not in shown]
    if names:
        lines += ["## Other latencies", "", "ms; queue backlog in packets.", ""]
        for name in names:
            lines += [f"**{name}**", ""]
            lines += _table(["label", f"{name} p50", f"{name} p99"], rows)
    lines += ["Runs (each with its own report):", ""]
    for r in runs:
        lines.append(f"- [{cell(r.label)}]({_relative_link(r.path / REPORT, out)})")
    lines.append("")
    lines += _compare_plots(runs, rows, out)
    path = out / REPORT
    write_text(path, "\n".join(lines).rstrip() + "\n")
    write_html(path)  # report.html beside it, self-contained
    return path


def _relative_link(target: Path, base: Path) -> str:
    """``target`` as a link from a file in ``base``: relative (``../runs/x/report.md``),
    so a results folder that is copied, moved or committed keeps its links."""
    rel = os.path.relpath(Path(target).resolve(), Path(base).resolve())
    return Path(rel).as_posix().replace(" ", "%20")


def _table(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    align = ["---" if c in ("label", "fidelity") else "---:" for c in columns]
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(row, c) for c in columns) + " |" for row in rows]
    return lines + [""]


def _cell(row: dict[str, Any], column: str) -> str:
    """A value of a row; a percentile the run's sample cannot support says so, with n."""
    name, _, q = column.rpartition(" ")
    n = row.get(f"{name} n")
    if q in ("p50", "p99") and isinstance(n, int) and not percentile_supported(q, n):
        return too_small(n)
    return fmt(row.get(column))


def _revision_lines(runs: list[Run]) -> list[str]:
    """Which kvfabric made the runs: one line, or one per revision when they differ."""
    made: dict[str, list[str]] = {}
    for r in runs:
        made.setdefault(revision_text(r.summary.get("provenance")), []).append(r.label)
    if len(made) == 1:
        return [f"Made by {next(iter(made))} (every run).", ""]
    lines = ["Made by different revisions: compare with care.", ""]
    lines += [f"- {text}: {cell(', '.join(labels))}" for text, labels in made.items()]
    return [*lines, ""]


def _compare_verdicts(runs: list[Run]) -> list[str]:
    bad = [r.label for r in runs if verdict_word(r.summary.get("fidelity")) != "OK"]
    partial = [r.label for r in runs if r.partial]
    lines = []
    if not bad:
        lines.append("**Fidelity: OK** in every run.")
    else:
        lines.append(
            f"**Fidelity: NOT OK in {len(bad)} of {len(runs)} runs** ({', '.join(bad)}): "
            "the emulation was not faithful (or not judged) there; compare those numbers "
            "with care."
        )
    if partial:
        names = ", ".join(partial)
        lines += ["", f"> **PARTIAL RUNS: {names} were interrupted and are incomplete.**"]
    return lines + [""]


def _compare_checks(runs: list[Run]) -> list[str]:
    lines = ["### Fidelity per run", ""]
    lines += ["| run | fidelity | partial | failed checks |", "| --- | --- | --- | --- |"]
    for r in runs:
        fid = r.summary.get("fidelity") or {}
        failed = [n for n, c in (fid.get("checks") or {}).items() if not c.get("ok")]
        lines.append(
            f"| {r.label} | {verdict_word(fid)} | {'yes' if r.partial else 'no'} "
            f"| {', '.join(failed)} |"
        )
    return lines + [""]


def _compare_headline(runs: list[Run]) -> list[str]:
    """Per headline quantity a narrow table: one row per run, the estimate beside it."""
    per_run = [headline(run_metrics(r), r.summary.get("estimate")) for r in runs]
    labels: dict[tuple[str, str], bool] = {}
    for rows in per_run:
        for h in rows:
            labels.setdefault((h.label, h.unit), h.distribution)
    if not labels:
        return []
    scales = {run_scale(r) for r in runs}
    dilations = {r.summary.get("time_dilation") or 1 for r in runs}
    d = dilations.pop() if len(dilations) == 1 else 0
    lines = ["## Headline", "", units_note(scales.pop() if len(scales) == 1 else None, d), ""]
    dist = [(label, unit) for (label, unit), d in labels.items() if d]
    single = [(label, unit) for (label, unit), d in labels.items() if not d]
    for label, unit in dist:
        lines += [
            f"**{label} ({unit})**",
            "",
            "| run | p50 | p99 | estimate |",
            "| --- | ---: | ---: | ---: |",
        ]
        for r, rows in zip(runs, per_run, strict=True):
            h = next((h for h in rows if h.label == label), None)
            if h is not None:
                p50, p99 = (percentile_cell(h.measured, q) for q in ("p50", "p99"))
                est = estimate_cell(h.estimate)
                lines.append(f"| {cell(r.label)} | {p50} | {p99} | {est} |")
        lines.append("")
    if single:
        lines += [
            "| run | " + " | ".join(f"{label} ({unit})" for label, unit in single) + " |",
            "| --- |" + " ---: |" * len(single),
        ]
        for r, rows in zip(runs, per_run, strict=True):
            by = {h.label: h for h in rows}
            cells = []
            for label, _ in single:
                h = by.get(label)
                text = "–" if h is None else fmt(h.measured["value"])
                if h is not None and h.estimate:
                    text += f" (est. {estimate_cell(h.estimate)})"
                cells.append(text)
            lines.append(f"| {cell(r.label)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _compare_plots(runs: list[Run], rows: list[dict[str, Any]], out: Path) -> list[str]:
    pdir = out / PLOTS
    metrics = [
        short_label(label)
        for label, _ in LATENCY_ROWS
        if any(f"{short_label(label)} p50" in row for row in rows)
    ][:4]
    extra = [label for label, _ in COMPARE_VALUES[:2] if any(label in row for row in rows)]
    points = [r.summary.get("point") or {} for r in runs]
    keys = {k for p in points for k in p}
    made = []
    if len(keys) == 1:
        (key,) = keys
        xs = [p.get(key) for p in points]
        if all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs):
            panels: dict[str, dict[str, list[Any]]] = {}
            for label, _ in LATENCY_ROWS:
                name = short_label(label)
                if name in metrics:
                    panels[label] = {
                        q: [row.get(f"{name} {q}") for row in rows] for q in ("p50", "p99")
                    }
            for name in extra:
                panels[name] = {"value": [row.get(name) for row in rows]}
            p = plots.compare_vs_sweep(key, xs, panels, pdir / "compare_sweep.png")
            if p is not None:
                made.append((f"Key metrics against {key}", p))
    cdfs = _compare_cdfs(runs, pdir)
    if not made:
        # bars only for what no distribution below shows
        shown = {title for title, _ in cdfs}
        labels = [r.label for r in runs]
        for name in metrics:
            if f"{CDF_OF.get(name, name)}, distribution per run" in shown:
                continue
            series = {q: [row.get(f"{name} {q}") for row in rows] for q in ("p50", "p99")}
            unit = next((lb for lb, _ in LATENCY_ROWS if short_label(lb) == name), "")
            unit = unit[len(name) + 2 : -1] if unit.startswith(f"{name} (") else ""
            p = plots.compare_bars(
                labels,
                series,
                pdir / f"compare_{slug(name)}.png",
                title=f"{name}: p50 and p99 per run",
                ylabel=unit,
            )
            if p is not None:
                made.append((name, p))
    made += cdfs
    lines = ["## Charts", ""]
    if not made:
        return lines + ["No metric is common to these runs.", ""]
    for title, p in made:
        lines += [f"### {title}", "", f"![{title}]({p.relative_to(out).as_posix()})", ""]
    return lines


def _fct_slowdown(run: Run) -> Any:
    flows = run.flows
    if flows is None or "slowdown" not in flows:
        return None
    return flows.loc[ok_mask(flows), "slowdown"]


def _fct(run: Run) -> Any:
    return (
        None if run.flows is None or not len(run.flows) else fct_ms(run.flows)[ok_mask(run.flows)]
    )


def _column(table: str, column: str) -> Callable[[Run], Any]:
    def values(run: Run) -> Any:
        df = run.table(table)
        return None if df is None or column not in df else df[column]

    return values


def _kv_fct_estimate(estimate: dict[str, Any]) -> dict[str, float]:
    values = [
        e.get("collisions", {}).get("fct_ms_this_policy")
        for e in estimate.get("kv_transfer") or []
        if isinstance(e, dict)
    ]
    values = [v for v in values if isinstance(v, int | float)]
    return {"value": float(values[0])} if len(values) == 1 else {}


# The CDF that shows a latency row's whole distribution (LATENCY_ROWS short name -> title).
CDF_OF = {"FCT, all flows": "FCT", "TTFT": "TTFT", "ITL": "ITL", "KV transfer": "KV transfer"}
# Overlaid CDFs of a comparison: (title, x label, the run's values, its estimate).
CDF_METRICS: list[tuple[str, str, Callable[[Run], Any], Callable[[dict[str, Any]], dict]]] = [
    (
        "TTFT",
        "time to first token (ms)",
        _column("requests", "ttft_ms"),
        lambda e: at_path(e, ("serving", "ttft_ms")) or {},
    ),
    (
        "ITL",
        "inter-token latency (ms)",
        _column("tokens", "itl_ms"),
        lambda e: at_path(e, ("serving", "itl_ms")) or {},
    ),
    (
        "KV transfer",
        "KV transfer time per request (ms)",
        _column("requests", "kv_transfer_ms"),
        lambda e: at_path(e, ("serving", "kv_transfer_ms")) or {},
    ),
    ("FCT", "flow completion time, completed flows (ms)", _fct, _kv_fct_estimate),
    ("FCT slowdown", "FCT slowdown (measured / ideal)", _fct_slowdown, lambda e: {}),
]


def _compare_cdfs(runs: list[Run], pdir: Path) -> list[tuple[str, Path]]:
    """One overlaid CDF per metric of :data:`CDF_METRICS` that some run has."""
    made = []
    for title, xlabel, values, estimate in CDF_METRICS:
        series, estimates = {}, {}
        for run in runs:
            v = values(run)
            if v is None or not len(v):
                continue
            series[run.label] = v
            est = estimate(run.summary.get("estimate") or {})
            estimates[run.label] = {k: est[k] for k in ("p50", "p99", "value") if k in est}
        path = pdir / f"cdf_{slug(title)}.png"
        what = f"{title}: distribution per run"
        if any(estimates.values()):
            what += "\n(hollow diamonds at p50/p99, or a dotted line: the analytic estimate)"
        p = plots.compare_cdf(series, estimates, xlabel, what, path) if series else None
        if p is None:
            path.unlink(missing_ok=True)
            continue
        made.append((f"{title}, distribution per run", p))
    return made

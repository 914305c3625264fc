"""The report of a ``kvfabric bmwg run`` (Section 14 of
draft-calabria-bmwg-ai-fabric-inference-bench-02): system configuration, workload
characterisation, per-test KPIs with 95 % intervals and trial counts, the fabric health
indicators the emulator has, anomalies, every substitute, the recommended plots
(latency CDFs; throughput against scale where a test sweeps it) and the raw data.

``report_markdown`` is pure (the suite's plan.json and rows in, Markdown out);
``write_report`` reads a suite directory, draws the plots and writes ``report.md`` and
``report.html``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from experiments.bmwg.across import derived_by_test
from experiments.bmwg.aggregate import anomalies, by_point
from experiments.bmwg.catalog import BY_ID, DRAFT
from experiments.bmwg.floor import latency_section
from experiments.bmwg.health import HEALTH
from experiments.bmwg.suite import measured_after_s
from experiments.output.formatting import fmt

SCALE_SWEEPS = {"5.3", "7.3", "9.4", "12.1"}  # tests whose axis is the cluster's size
THROUGHPUT_WORDS = ("TPS", "Goodput", "KV_BW", "bandwidth", "BusBW")
OWN_SCALE = "each procedure's own (a finer one where its messages are small)"
TRANSPORT = (
    "kernel TCP over drop-tail (HTB-shaped, bounded pfifo) queues in Open vSwitch: "
    "no RDMA, no ECN marking, no PFC; congestion shows as loss and retransmission"
)


def _esc(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def interval_text(cell: Mapping[str, Any]) -> tuple[str, str]:
    """(estimate, "low – high") of an aggregate cell; "–" where there is none."""
    est = cell.get("estimate")
    if est is None:
        return "–", "–"
    if cell.get("low") is None:
        return fmt(est), "– (one run)"
    return fmt(est), f"{fmt(cell['low'])} – {fmt(cell['high'])}"


def _configuration(
    plan: Mapping[str, Any], fabric: Mapping[str, Any], rows: Sequence[Mapping]
) -> list[str]:
    raw = plan["fabric"]
    scale = raw.get("scale")
    dilations = sorted({r.get("time_dilation") for r in rows if r.get("time_dilation") is not None})
    lines = [
        "## System configuration",
        "",
        f"- Fabric **{_esc(raw['name'])}**: `{json.dumps(raw['fabric'])}`; "
        f"{fabric.get('gpus', '?')} GPUs, oversubscription {fabric.get('oversubscription', '?')}, "
        f"bisection {fmt(fabric.get('bisection_gbps'))} Gbit/s (real-equivalent).",
        f"- Routing: `{json.dumps(raw.get('controller', {'policy': 'each test’s own'}))}`.",
        f"- Bandwidth scale: {json.dumps(scale) if scale else OWN_SCALE}; "
        "one emulated packet stands for 1,514 ÷ scale real bytes (the grain).",
        f"- Time dilation used: {', '.join(fmt(d) for d in dilations) or 'none recorded'} "
        "(wall seconds per real-equivalent second; every time and rate here reads "
        "real-equivalent).",
        f"- Transport: {TRANSPORT}.",
        f"- Profile **{plan['profile']}**: {plan['runs']} runs planned, estimated "
        f"{fmt(plan['estimated_wall_s'] / 60)} min of wall time.",
    ]
    if raw.get("pools"):
        lines.append(f"- Serving pools from the fabric spec: `{json.dumps(raw['pools'])}`.")
    return [*lines, ""]


def _workloads(plan: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Workload characterisation",
        "",
        "| test | title | trial | runs | warm-up s | run s |",
    ]
    lines.append("| --- | --- | --- | ---: | ---: | ---: |")
    for t in plan["trials"]:
        p = BY_ID[t["test"]]
        lines.append(
            f"| {t['test']} | {_esc(p.title)} | {_esc(t['variant'] or '(one)')} | "
            f"{len(t['runs'])} | {fmt(t['warmup_s'])} | {fmt(t['duration_s'])} |"
        )
    lines.append("")
    for test in plan["tests"]:
        p = BY_ID[test]
        axes = "; ".join(a.name for a in p.sweep.axes) if p.sweep else ""
        lines.append(f"- **{test}** varies: {_esc(axes)}. {_esc(p.notes)}")
    return [*lines, ""]


def _derived_table(cells: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A test's KPIs derived across its points (``across``), one row each."""
    if not cells:
        return []
    lines = [
        "",
        "Derived across the points, seed by seed (each seed's runs at every point), then "
        "across seeds:",
        "",
        "| derived KPI | value | 95 % interval | seeds |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, c in cells.items():
        value, ci = interval_text(c)
        words = c.get("words") or {}
        seeds = str(c["n"]) + "".join(f" (+{k} {w})" for w, k in words.items())
        if c["n"] == 0 and words:  # words only: the most frequent stands as the value
            value, ci = next(iter(words)), "–"
            seeds = ", ".join(f"{w}: {k}" for w, k in words.items())
        lines.append(f"| {_esc(name)} | {_esc(value)} | {ci} | {_esc(seeds)} |")
    return lines


def _kpi_tables(plan: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    points = by_point(rows)
    derived = derived_by_test(rows)
    lines = ["## KPIs per test", ""]
    lines.append(
        "Each value is the mean over the runs (seeds) judged faithful at that point, its "
        "95 % interval Student's t over those runs, n the runs counted of those made."
    )
    lines.append("")
    for test in plan["tests"]:
        p = BY_ID[test]
        lines += [f"### {test} {p.title} ({p.status})", ""]
        lines += [
            "| point | KPI | value | 95 % interval | n |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        for point, data in points.get(test, {}).items():
            for column, cell in data["kpis"].items():
                value, ci = interval_text(cell)
                lines.append(
                    f"| {_esc(point)} | {_esc(column)} | {value} | {ci} | "
                    f"{cell['n']} of {data['runs']} |"
                )
        lines += _derived_table(derived.get(test, {}))
        shown = {c for data in points.get(test, {}).values() for c in data["kpis"]}
        shown |= set(derived.get(test, {}))
        missing = [k for k in p.kpis if not any(c == k or c.startswith(f"{k} ") for c in shown)]
        if missing:
            lines.append("")
            lines.append(
                f"Not in this table: {', '.join(missing)}: needing points or faults these "
                "runs did not have, or not measured by this emulator "
                "(`kvfabric bmwg show " + test + "`)."
            )
        lines.append("")
    return lines


def _health(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    cpu = [r["cpu_max_core_pct"] for r in rows if r.get("cpu_max_core_pct") is not None]
    failed = sum(int(r.get("failed_flows") or 0) for r in rows)
    faults = sum(int(r.get("fault_events") or 0) for r in rows)
    measured = {
        "Switch control-plane CPU": "busiest core of the machine, max over runs: "
        f"{fmt(max(cpu)) if cpu else '–'} %",
        "BGP/OSPF adjacency flaps": f"{faults} fault events applied (the procedures' own)",
        "NIC RDMA QP state": f"{failed} failed flows over all runs",
    }
    lines = ["## Fabric health indicators", "", "| indicator | threshold | here | this suite |"]
    lines.append("| --- | --- | --- | --- |")
    for h in HEALTH:
        got = measured.get(h.name, "not available (" + h.status.replace("_", " ") + ")")
        lines.append(f"| {_esc(h.name)} | {_esc(h.threshold)} | {_esc(h.here)} | {_esc(got)} |")
    return [*lines, "", *_above_edge(rows)]


def _above_edge(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where the traffic went: each test's share of switch egress above the edge."""
    by_test: dict[str, list[float]] = {}
    for r in rows:
        if r.get("above_edge_pct") is not None:
            by_test.setdefault(r["test"], []).append(float(r["above_edge_pct"]))
    if not by_test:
        return []
    low = [t for t, v in by_test.items() if max(v) < 1.0]
    spans = ", ".join(
        f"{t} {fmt(min(v))}" + (f"-{fmt(max(v))}" if max(v) != min(v) else "")
        for t, v in by_test.items()
    )
    lines = [
        "Traffic above the edge switches (spine, core), % of the switches' egress bytes "
        f"per run, by test: {spans}. On a two-tier leaf-spine fabric, traffic that all "
        "crosses a spine gives about 33 % (leaf, spine and leaf each send it once); NVLink "
        "and rail switches count as edge.",
    ]
    if low:
        lines.append(
            f"Under 1 % in every run of {', '.join(low)}: their traffic stayed on edge "
            "(or NVLink) switches, and their KPIs say nothing of the switches above them."
        )
    return [*lines, ""]


def _anomalies(
    plan: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], suite: Mapping[str, Any]
) -> list[str]:
    found = anomalies(rows)
    discarded, not_run = suite.get("discarded") or [], suite.get("not_run") or []
    lines = ["## Anomalies", ""]
    if not found and not plan.get("misfits") and not discarded and not not_run:
        return [*lines, "None: every run was judged faithful and every trial ran.", ""]
    if not_run:
        lines.append(
            f"- **Interrupted**: {len(not_run)} trial(s) not run in full: "
            f"{_esc(', '.join(not_run))}. `bmwg compare` reads only the tests run in full."
        )
    for a in found:
        lines.append(f"- {a['test']} {_esc(a['point'])} seed {a['seed']}: {_esc(a['what'])}")
    for d in discarded:
        failed = "; ".join(f"{k}: {v}" for k, v in (d.get("failed") or {}).items())
        lines.append(
            f"- {d['test']} {_esc(d['point'])} seed {d['seed']}: an attempt judged not "
            f"faithful ({_esc(failed)}), run again with the same seed; the attempt is left "
            "out of the KPIs"
        )
    for m in plan.get("misfits") or []:
        lines.append(
            f"- {m['test']} {_esc(m['variant'])}: not run, the fabric cannot hold it: "
            f"{_esc(m['reason'])}"
        )
    return [*lines, ""]


def _substitutes(plan: Mapping[str, Any]) -> list[str]:
    lines = ["## Substitutes: what stands in for what", ""]
    lines += ["| test | the draft | here |", "| --- | --- | --- |"]
    for test in plan["tests"]:
        for s in BY_ID[test].substitutes:
            lines.append(f"| {test} | {_esc(s.draft)} | {_esc(s.here)} |")
    return [*lines, ""]


def report_markdown(
    plan: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    fabric: Mapping[str, Any],
    figures: Sequence[tuple[str, str]] = (),
    suite: Mapping[str, Any] | None = None,
) -> str:
    """The whole report as Markdown (``figures``: (title, path relative to the report);
    ``suite``: suite.json's record, for the attempts run again and the trials not run)."""
    lines = [
        f"# BMWG inference-fabric benchmark: {plan['fabric']['name']}, profile {plan['profile']}",
        "",
        f"{DRAFT}, tests {', '.join(plan['tests'])}, run by `kvfabric bmwg run`.",
        "",
    ]
    lines += _configuration(plan, fabric, rows)
    lines += _workloads(plan)
    lines += _kpi_tables(plan, rows)
    lines += _health(rows)
    lines += latency_section(rows)
    lines += _anomalies(plan, rows, suite or {})
    lines += _substitutes(plan)
    if figures:
        lines += ["## Plots", ""]
        lines += [f"![{_esc(t)}]({p})\n" for t, p in figures]
    lines += [
        "## Raw data",
        "",
        "- `suite.json`: every run's row (verdict, health, KPI numbers), the KPIs derived "
        "across points and the anomalies.",
        "- `<test>/kpis.csv`, `<test>/kpis.json`: per run, and per point with intervals.",
        "- `plan.json`: the fabric, the profile, every trial and what did not fit.",
        "- `runs/<test>/…`: each run's own results directory (tables, summary, report).",
        "",
    ]
    return "\n".join(lines)


def _samples(
    rows: Sequence[Mapping[str, Any]], test: str, warmups: Mapping[tuple[str, str], float]
) -> dict[str, dict[str, list[float]]]:
    """point → {"TTFT": […], "KV_xfer_latency": […]} pooled over the counted runs, each
    after its trial's warm-up (``warmups``: by test and variant)."""
    from experiments.analysis.bmwg.throughput import KV_KINDS
    from experiments.analysis.bmwg.window import measured
    from experiments.output.results import load_run

    out: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r["test"] != test or not r.get("run_dir") or r.get("error"):
            continue
        try:
            run = load_run(Path(r["run_dir"]))
        except Exception:
            continue
        start = int(run.events.get("t0_ns") or 0)
        warm = warmups.get((test, r["variant"]), 0.0)
        got = out.setdefault(r["point"], {"TTFT": [], "KV_xfer_latency": []})
        if run.requests is not None and len(run.requests):
            got["TTFT"] += (
                measured(run.requests, "requests", start, warm)["ttft_ms"].dropna().tolist()
            )
        if run.flows is not None and len(run.flows):
            kv = measured(run.flows, "flows", start, warm)
            got["KV_xfer_latency"] += (
                kv.loc[kv["kind"].isin(KV_KINDS) & kv["ok"].astype(bool), "fct_ms"]
                .dropna()
                .tolist()
            )
    return out


def _decades(series: Iterable[np.ndarray]) -> float:
    """How many powers of ten the positive values of ``series`` span (0 if none)."""
    values = np.concatenate([a[a > 0] for a in series] or [np.array([])])
    return float(np.log10(values.max() / values.min())) if values.size else 0.0


def _plots(
    suite_dir: Path, plan: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = suite_dir / "plots"
    folder.mkdir(exist_ok=True)
    figures = []
    points = by_point(rows)
    warmups = {
        (t["test"], t["variant"]): measured_after_s(t["test"], t["warmup_s"])
        for t in plan["trials"]
    }
    for test in plan["tests"]:
        samples = _samples(rows, test, warmups)
        for metric in ("TTFT", "KV_xfer_latency"):
            series = {p: np.sort(np.asarray(s[metric])) for p, s in samples.items() if s[metric]}
            if not series:
                continue
            fig, ax = plt.subplots(figsize=(7, 4))
            for label, arr in series.items():
                ax.step(
                    arr,
                    np.arange(1, arr.size + 1) / arr.size,
                    where="post",
                    label=f"{label} (n={arr.size})",
                )
            ax.set_xlabel(f"{metric}, ms (real-equivalent)")
            if _decades(series.values()) >= 2:  # 0.07 ms and 190 ms on one axis: log
                ax.set_xscale("log")
            ax.set_ylabel("fraction ≤ x")
            ax.set_title(f"{test}: {metric} CDF")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="x-small")
            name = f"{test.replace('.', '-')}-{metric}-cdf.png"
            fig.savefig(folder / name, dpi=100, bbox_inches="tight")
            plt.close(fig)
            figures.append((f"{test} {metric} CDF", f"plots/{name}"))
        if test not in SCALE_SWEEPS:
            continue
        pts = points.get(test, {})
        columns = sorted(
            {c for d in pts.values() for c in d["kpis"] if any(w in c for w in THROUGHPUT_WORDS)}
        )
        for column in columns:
            xs = [
                p for p, d in pts.items() if d["kpis"].get(column, {}).get("estimate") is not None
            ]
            if not xs:
                continue
            cells = [pts[p]["kpis"][column] for p in xs]
            est = np.array([c["estimate"] for c in cells])
            low = np.array([c["low"] if c["low"] is not None else c["estimate"] for c in cells])
            high = np.array([c["high"] if c["high"] is not None else c["estimate"] for c in cells])
            fig, ax = plt.subplots(figsize=(7, 4))
            ax.errorbar(range(len(xs)), est, yerr=[est - low, high - est], marker="o", capsize=4)
            ax.set_xticks(range(len(xs)), xs, rotation=20, fontsize="small")
            ax.set_ylabel(column)
            ax.set_title(f"{test}: {column} against scale (95 % intervals)")
            ax.grid(True, alpha=0.3)
            name = f"{test.replace('.', '-')}-{column.split()[0]}-vs-scale.png"
            fig.savefig(folder / name, dpi=100, bbox_inches="tight")
            plt.close(fig)
            figures.append((f"{test} {column} against scale", f"plots/{name}"))
    return figures


def fabric_facts(raw: Mapping[str, Any]) -> dict[str, Any]:
    """GPUs, oversubscription and bisection of a plan's fabric (for the report)."""
    from experiments.spec.load import SPECS_DIR, load_spec

    spec = {"name": "fabric", "duration_s": 1, "fabric": raw["fabric"]}
    fabric = load_spec(yaml.safe_dump(spec), base_dir=SPECS_DIR).fabric()
    over = sorted(set(fabric.oversubscription().values()))
    return {
        "gpus": len(fabric.gpus),
        "oversubscription": " / ".join(f"{o:g}:1" for o in over) or "–",
        "bisection_gbps": fabric.bisection_gbps(),
    }


def write_report(suite_dir: Path) -> Path:
    """``report.md`` and ``report.html`` of a suite directory; returns report.md."""
    from experiments.output.html import write_html

    plan = json.loads((suite_dir / "plan.json").read_text())
    suite = json.loads((suite_dir / "suite.json").read_text())
    plan = {**plan, "tests": suite.get("tests", plan["tests"])}  # an interrupted suite's
    rows = suite["rows"]
    figures = _plots(suite_dir, plan, rows)
    text = report_markdown(plan, rows, fabric_facts(plan["fabric"]), figures, suite)
    path = suite_dir / "report.md"
    path.write_text(text, encoding="utf-8")
    write_html(path)
    return path

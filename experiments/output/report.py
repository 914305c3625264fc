"""``kvfabric report``: report.md and plots of one run, or of several runs side by side.

    write_report([run_dir])                 # <run>/report.md + <run>/plots/*.png
    write_report(sweep_dirs)                # <parent>/compare-<timestamp>/report.md + plots
    write_report(run_dirs, Path("cmp"))     # the comparison in ./cmp

Everything comes from the results directory (summary.json, spec.yaml and the tables),
so a report can be regenerated at any time without root or the network, and the same
directory always gives the same report. The fidelity verdict comes first: a number from
an emulation that was not faithful, or from an interrupted run, must not be read
without that warning.

The first screen answers the experiment's question: the verdict, the question (from the
experiment's handout), then the headline numbers (:mod:`experiments.analysis.headline`) in
real-equivalent units, each beside its analytic estimate. Below come the fidelity checks,
the spec, the latencies as a few narrow tables and the plots, the run's timeline
(:mod:`experiments.output.timeline`) first. The report of several runs is
:mod:`experiments.output.comparison`'s; both build on :mod:`.metric_rows` (what a
report shows of a run's metrics) and :mod:`.formatting`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from experiments.analysis.headline import headline, question
from experiments.output import plots
from experiments.output.comparison import compare_dir, write_compare
from experiments.output.fabric_picture import write_fabric_picture
from experiments.output.fault_report import fault_lines
from experiments.output.formatting import (
    SHORT_REVISION,
    at_path,
    cell,
    estimate_cell,
    fmt,
    kv,
    percentile_cell,
    revision_text,
    units_note,
    write_text,
)
from experiments.output.grain import grain_lines
from experiments.output.html import write_html
from experiments.output.metric_rows import (
    LATENCY_ROWS,
    PLOTS,
    RAW_VALUE_ROWS,
    REPORT,
    VALUE_ROWS,
    key_metrics,
    run_metrics,
    run_scale,
)
from experiments.output.recovery import never_finished, unfinished_lines
from experiments.output.results import NotARunError, ResultsError, Run, load_run
from experiments.output.timeline import TIMELINE, write_timeline
from experiments.output.uncertainty import interval_text, p50_interval, repeats_lines
from experiments.spec.stored import as_written
from topologies.shaping import DEFAULT_MTU, frame_bytes

__all__ = ["NotARunError", "ResultsError", "key_metrics", "run_metrics", "write_report"]


def write_report(run_dirs: Sequence[Path], out_dir: Path | None = None) -> Path:
    """Write the report of one run (into the run directory, or ``out_dir``) or the
    side-by-side report of several (into ``out_dir``, default
    ``<first run's parent>/compare-<timestamp>``); returns the path of report.md.

    Raises :class:`NotARunError` when a directory is not a kvfabric run.
    """
    if not run_dirs:
        raise ValueError("write_report needs at least one run directory")
    runs = [load_run(Path(d)) for d in run_dirs]
    if len(runs) == 1:
        out = Path(out_dir) if out_dir is not None else runs[0].path
        return _write_single(runs[0], out)
    if out_dir is None:
        out_dir = compare_dir(runs[0].path.parent)
    return write_compare(runs, Path(out_dir))


# ---- one run -------------------------------------------------------------------------------


def _write_single(run: Run, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    m = run_metrics(run)
    lines = [f"# {_title(run)}", "", _provenance_line(run.summary), ""]
    lines += _verdict_lines(run)
    lines += unfinished_lines(run, computed=bool(m))
    lines += _question_lines(run)
    d = run.summary.get("time_dilation") or 1
    lines += _headline_lines(m, run.summary.get("estimate"), run_scale(run), d, run)
    lines += repeats_lines(run.summary)
    lines += _check_lines(run)
    lines += _fault_lines(m)
    lines += _capture_lines(run)
    lines += _spec_lines(run)
    lines += grain_lines(run.config, at_path(m, ("queue_pkts", "hottest")) or [])
    lines += _metric_lines(m, (run.summary.get("fidelity") or {}).get("checks") or {})
    lines += _estimate_lines(run.summary.get("estimate"))
    lines += _plot_lines(run, out)
    path = out / REPORT
    write_text(path, "\n".join(lines).rstrip() + "\n")
    write_html(path)  # report.html beside it, self-contained
    return path


def _fault_lines(m: dict[str, Any]) -> list[str]:
    """Per fault: the controller's timings and what the traffic felt, from the instant
    of the fault (:mod:`experiments.output.fault_report`)."""
    return fault_lines(m)


def _capture_lines(run: Run) -> list[str]:
    """The run's packet captures (events.json ``captures``), linked."""
    caps = run.events.get("captures")
    if not caps:
        return []
    lines = [
        "## Captures",
        "",
        "Open with Wireshark and the KV dissector "
        "(`wireshark -X lua_script:traffic/wireshark/kvfabric.lua FILE`).",
        "",
    ]
    for c in caps:
        note = f" — **{c['error']}**" if c.get("error") else ""
        if c.get("dropped"):
            note += f" — **tcpdump's buffer dropped {c['dropped']} packets**"
        lines.append(f"- [{c['where']}]({c['file']}): {c['bytes'] / 1e6:.2f} MB{note}")
    return [*lines, ""]


def _estimate_lines(estimate: Any, limit: int = 40) -> list[str]:
    """The analytic estimate (``summary.json.estimate``) beside the measurement: one
    row per quantity, latency distributions as p50/p99."""
    if not estimate:
        return []
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and "p50" in value:
            rows.append((prefix, f"p50 {fmt(value.get('p50'))}, p99 {fmt(value.get('p99'))}"))
        elif isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), sub)
        elif not isinstance(value, list):
            rows.append((prefix, fmt(value)))

    walk("", estimate)
    lines = [
        "## Analytic estimate",
        "",
        "What theory predicts from the same parameters "
        "(`kvfabric estimate`); "
        "compare with the measurement above.",
        "",
        "| quantity | predicted |",
        "| --- | ---: |",
    ]
    lines += [f"| {cell(k)} | {cell(v)} |" for k, v in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"| … | {len(rows) - limit} more in summary.json |")
    return [*lines, ""]


def _title(run: Run) -> str:
    name = run.config.name if run.config is not None else None
    experiment = run.summary.get("experiment") or name or run.path.parent.name
    label = run.summary.get("label")
    return (
        f"{experiment}: {label} (run {run.run_id})" if label else f"{experiment} (run {run.run_id})"
    )


def _provenance_line(s: dict[str, Any]) -> str:
    """Which kvfabric made the run, and of which spec: the run names its revision."""
    prov = s.get("provenance")
    sha = prov.get("spec_sha256") if isinstance(prov, dict) else None
    spec = f"; spec sha256 {sha[:SHORT_REVISION]}" if sha else ""
    return f"Made by {revision_text(prov)}{spec}."


def _verdict_lines(run: Run) -> list[str]:
    s = run.summary
    fid = s.get("fidelity")
    lines: list[str] = []
    if s.get("partial"):
        lines += [
            "> **PARTIAL RUN: this run was interrupted and is incomplete.** The tables cover "
            "only the time until it stopped; do not compare its numbers with complete runs.",
            "",
        ]
    if s.get("error") and not never_finished(run):
        lines += [f"> **The run failed:** {s['error']}", ""]
    if not isinstance(fid, dict) or "ok" not in fid:
        lines += ["**Fidelity: not judged** (summary.json has no fidelity verdict).", ""]
        return lines
    checks = fid.get("checks") or {}
    failed = [name for name, c in checks.items() if not c.get("ok")]
    if fid.get("ok"):
        lines.append(
            "**Fidelity: OK**: the emulation stayed faithful; every check passed "
            f"({len(checks)} checks)."
        )
    else:
        which = f" (failed: {', '.join(failed)})" if failed else ""
        lines.append(
            f"**Fidelity: NOT OK: the emulation was not faithful during this run{which}.** "
            "Its numbers describe an overloaded emulator as much as the fabric; "
            "rerun with a smaller scale or fabric before drawing conclusions."
        )
    lines.append("")
    if fid.get("error"):
        lines += [f"The fidelity monitor reported: {cell(fid['error'])}", ""]
    return lines


def _check_lines(run: Run) -> list[str]:
    """The fidelity checks, one row each (the verdict above says whether all passed)."""
    fid = run.summary.get("fidelity")
    checks = (fid.get("checks") or {}) if isinstance(fid, dict) else {}
    lines: list[str] = []
    if checks:
        lines += ["### Fidelity checks", ""]
        lines += [
            "| check | ok | value | threshold | unit | detail |",
            "| --- | --- | ---: | ---: | --- | --- |",
        ]
        for name, c in checks.items():
            mark = "yes" if c.get("ok") else "**NO**"
            lines.append(
                f"| {name} | {mark} | {fmt(c.get('value'))} | {fmt(c.get('threshold'))} "
                f"| {c.get('unit') or ''} | {cell(c.get('detail') or '')} |"
            )
        lines.append("")
    return lines + _envelope_lines(run.summary)


def _envelope_lines(s: dict) -> list[str]:
    """What the run asked of the machine (its envelope) and which compute model timed it."""
    lines = []
    env = s.get("envelope")
    if env:
        peaks = ", ".join(
            f"{n} {fmt(f['peak'])} of {fmt(f['limit'])} {f['unit']}"
            for n, f in (env.get("figures") or {}).items()
            if n != "machine_load"
        )
        state = "fits" if env.get("fits") else "**exceeded** (run with --force)"
        lines.append(f"Envelope: {state}; peaks over 100 ms: {peaks}. {cell(env.get('source'))}.")
        if env.get("flow_size_scale"):
            lines.append(
                f"Flow-size scale: {kv(env['flow_size_scale'])} (sizes × k, "
                "arrivals ÷ k; compare FCT slowdown across k)."
            )
    compute = s.get("compute")
    if compute:
        lines.append(
            f"Compute model: {compute.get('compute_model')} (by tp: "
            f"{kv(compute.get('by_tp') or {})})."
        )
    return [*lines, ""] if lines else []


def _question_lines(run: Run) -> list[str]:
    asked = question(run.summary.get("experiment") or (run.config.name if run.config else None))
    return [f"> **Question.** {cell(asked)}", ""] if asked else []


def _headline_lines(
    m: dict[str, Any],
    estimate: Any,
    scale: float | None,
    dilation: float = 1,
    run: Run | None = None,
) -> list[str]:
    """The headline measurements, each beside its analytic estimate, in two narrow
    tables: distributions (p50 with its 95 % interval from ``run``'s samples, p99) and
    single values."""
    rows = headline(m, estimate if isinstance(estimate, dict) else None)
    if not rows:
        return []
    lines = ["## Headline", "", units_note(scale, dilation), ""]
    dists = [h for h in rows if h.distribution]
    values = [h for h in rows if not h.distribution]
    if dists:
        lines += [
            "| quantity | p50 | p50 95 % interval | p99 | estimate |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        lines += [
            f"| {h.label} ({h.unit}) | {percentile_cell(h.measured, 'p50')} "
            f"| {interval_text(p50_interval(run, h.label) if run is not None else None)} "
            f"| {percentile_cell(h.measured, 'p99')} | {estimate_cell(h.estimate)} |"
            for h in dists
        ]
        lines += [
            "",
            "The p50 interval is a bootstrap over this run's own requests (tokens for ITL, "
            "flows for FCT): how precisely the run measured it, not how another seed would "
            "come out.",
            "",
        ]
    if values:
        lines += ["| quantity | measured | estimate | unit |", "| --- | ---: | ---: | --- |"]
        lines += [
            f"| {h.label} | {fmt(h.measured['value'])} | {estimate_cell(h.estimate)} | {h.unit} |"
            for h in values
        ]
        lines.append("")
    if any(h.estimate for h in rows):
        lines += [
            "The estimate is the analytic prediction from the same parameters "
            "(`kvfabric estimate`; details under *Analytic estimate*).",
            "",
        ]
    return lines


def _spec_lines(run: Run) -> list[str]:
    """The run's configuration (nothing of it when ``run.config`` is unknown). A fabric's and
    a workload's parameters are listed as the run's spec.yaml wrote them (``_as_written``)."""
    c, s = run.config, run.summary
    lines = ["## Run", ""]
    lines.append(
        f"- experiment: {s.get('experiment') or (c.name if c else None) or '?'}, "
        f"run id `{run.run_id}`, seed {s.get('seed', c.seed if c else '?')}"
    )
    if s.get("point"):
        lines.append(f"- sweep point: {kv(s['point'])}")
    if s.get("started") or s.get("ended"):
        lines.append(f"- started {s.get('started') or '?'}, ended {s.get('ended') or '?'}")
    written_fabric, written_workloads = _as_written(run)
    if c is not None:
        lines.append(f"- duration: {fmt(c.duration_s)} s")
        lines.append(f"- fabric: **{c.fabric.kind}** ({kv(written_fabric)})")
    scale = run_scale(run)
    if scale is not None:
        lines.append(
            f"- scale: {scale:g} (a 400 Gbit/s link runs at {400e3 * scale:g} Mbit/s; "
            "real-equivalent = emulated / scale)"
        )
        mtu = c.scale.mtu if c is not None else DEFAULT_MTU
        frame = frame_bytes(mtu)
        lines.append(
            f"- packets: MTU {mtu}{' (jumbo frames)' if mtu > DEFAULT_MTU else ''}; one "
            f"emulated packet stands for {frame / scale / 1e6:.3g} MB of real bytes and holds "
            f"a 400 Gbit/s link for {frame * 8 / (400e9 * scale) * 1e3:.2g} ms, the grain of "
            "every queue and transfer time"
        )
    d = s.get("time_dilation") or 1
    if d != 1:
        lines.append(
            f"- time dilation {d:g}: the emulation ran {d:g} times slower than the real "
            f"fabric (links at real × scale ÷ {d:g}, every time × {d:g} on the wall clock); "
            "every time and rate in this report is real-equivalent"
        )
    if c is not None:
        lines.append(f"- policy: **{c.controller.policy}**")
        for i, (w, params) in enumerate(zip(c.workloads, written_workloads, strict=True)):
            lines.append(f"- workload {i}: **{w.kind}** ({kv(params)})")
    lines.append("")
    return lines


def _as_written(run: Run) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The parameters of the run's fabric and of each workload as its spec.yaml lists
    them (``spec.stored.as_written``), so a run of an older version keeps the report it
    had. Empty when ``run.config`` is unknown."""
    if run.config is None:
        return {}, []
    return as_written(run.spec)


def _metric_lines(m: dict[str, Any], checks: dict[str, Any] | None = None) -> list[str]:
    """Latency tables, then single values real-equivalent, then the emulated values in a
    labelled raw section; names the lateness column the fidelity verdict judged."""
    lines = ["## Key metrics", ""]
    if not m:
        return lines + ["No metrics: the run recorded no tables.", ""]
    rows = []
    for label, path in LATENCY_ROWS:
        rows.append((label, at_path(m, path)))
        if path == ("fct_ms",):
            for kind, stats in (m.get("fct_ms_by_kind") or {}).items():
                rows.append((f"FCT, {kind} (ms)", stats))
    for tenant, stats in (at_path(m, ("alltoall", "step_ms")) or {}).items():
        rows.append((f"all-to-all step, tenant {tenant} (ms)", stats))
    for pair, stats in (at_path(m, ("probe", "owd_ms")) or {}).items():
        rows.append((f"probe one-way delay {pair} (ms)", stats))
    rows = [(label, st) for label, st in rows if isinstance(st, dict) and st.get("count")]
    for group, members in _groups(rows):
        lines += [
            f"{group}:",
            "",
            "| metric | count | mean | p50 | p90 | p99 | p99.9 | max |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for label, st in members:
            cells = " | ".join(
                fmt(st.get(k)) if k in ("mean", "max") else percentile_cell(st, k)
                for k in ("mean", "p50", "p90", "p99", "p999", "max")
            )
            lines.append(f"| {label} | {st['count']} | {cells} |")
        lines.append("")
    values = [(label, at_path(m, path), unit) for label, path, unit in VALUE_ROWS]
    values = [v for v in values if v[1] is not None]
    if values:
        lines += ["| quantity | value | unit |", "| --- | ---: | --- |"]
        lines += [f"| {label} | {fmt(v)} | {unit} |" for label, v, unit in values]
        lines.append("")
    lines += _lateness_note(m, checks or {})
    lines += _raw_lines(m)
    hot = at_path(m, ("queue_pkts", "hottest")) or []
    if hot:
        lines += [
            "Hottest egress queues (time-weighted):",
            "",
            "| port | mean pkts | p99 pkts | max pkts | drops | busy fraction |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in hot:
            lines.append(
                f"| {r.get('node')}:{r.get('port')} | {fmt(r.get('mean_pkts'))} "
                f"| {fmt(r.get('p99_pkts'))} | {fmt(r.get('max_pkts'))} "
                f"| {fmt(r.get('drops'))} | {fmt(r.get('frac_above'))} |"
            )
        lines.append("")
    errors = at_path(m, ("flows", "errors")) or {}
    if errors:
        lines += ["Flow errors:", ""]
        lines += [f"- {n} × {cell(msg)}" for msg, n in errors.items()]
        lines.append("")
    return lines


def _lateness_note(m: dict[str, Any], checks: dict[str, Any]) -> list[str]:
    """Two lateness figures, named apart: the start lateness in the table and the
    column the fidelity check judges."""
    if not (m.get("lateness_ms") or {}).get("count"):
        return []
    judged = checks.get("lateness") or {}
    value = judged.get("value")
    at = f" (p99 {fmt(value)} ms, threshold {fmt(judged.get('threshold'))} ms)" if value else ""
    return [
        "The fidelity check `lateness` judges the agents' timer lag, `issue_lateness_ms`"
        f"{at}, over timer-driven flows; *agent start lateness* above is `lateness_ms`"
        " (t_start − t_sched), which also counts waits behind earlier messages on a"
        " connection and group-released flows, and is not judged.",
        "",
    ]


def _raw_lines(m: dict[str, Any]) -> list[str]:
    """The emulated rates and bytes, labelled as such (÷ scale gives the figures above)."""
    raw = [(label, at_path(m, path), unit) for label, path, unit in RAW_VALUE_ROWS]
    raw = [r for r in raw if r[1] is not None]
    if not raw:
        return []
    lines = [
        "Raw, as on the emulated links (not real-equivalent: divide by the scale):",
        "",
        "| quantity | value | unit |",
        "| --- | ---: | --- |",
    ]
    return [*lines, *(f"| {label} | {fmt(v)} | {unit} |" for label, v, unit in raw), ""]


# Which table of latencies a metric goes in (by the start of its label); the rest: flows.
GROUPS = [
    ("Serving latency", ("TTFT", "TPOT", "ITL", "end-to-end", "KV transfer")),
    ("Emulator", ("agent start lateness", "queue backlog")),
]


def _group_of(label: str) -> str:
    for group, starts in GROUPS:
        if label.startswith(starts):
            return group
    return "Flows and transfers"


def _groups(rows: list[tuple[str, Any]]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """``rows`` split into a few narrow tables (serving, flows, emulator), in that order."""
    order = [GROUPS[0][0], "Flows and transfers", GROUPS[1][0]]
    split: dict[str, list[tuple[str, Any]]] = {g: [] for g in order}
    for label, st in rows:
        split[_group_of(label)].append((label, st))
    return [(g, split[g]) for g in order if split[g]]


def _plot_lines(run: Run, out: Path) -> list[str]:
    pdir = out / PLOTS
    fabric = _fabric(run)
    names = plots.port_names(fabric)
    capacity = plots.port_capacity_mbps(fabric, run_scale(run))
    made: list[tuple[str, Path | None]] = [
        ("Timeline", write_timeline(run, pdir / TIMELINE)),
        (FABRIC, _fabric_picture(run, fabric, names, capacity, pdir / "fabric.png")),
        ("Flow completion time by kind", _plot(plots.fct_cdf, run.flows, pdir / "fct_cdf.png")),
        (
            "TTFT and inter-token latency",
            _plot(plots.serving_cdf, run.requests, run.tokens, pdir / "serving_cdf.png"),
        ),
        (
            "TTFT breakdown per request",
            _plot(plots.ttft_breakdown, _ttft_parts(run), pdir / "ttft_breakdown.png"),
        ),
        (
            "Queue occupancy of the hottest ports",
            _plot(partial(plots.queue_timeseries, names=names), run.queues, pdir / "queues.png"),
        ),
        (
            "Drops over time",
            _plot(partial(plots.drops_timeseries, names=names), run.queues, pdir / "drops.png"),
        ),
        (
            "Link utilisation",
            _plot(
                partial(plots.link_heatmap, names=names, capacity_mbps=capacity),
                run.links,
                pdir / "links.png",
            ),
        ),
    ]
    made = [(title, p) for title, p in made if p is not None]
    if not made:
        return ["## Plots", "", "No tables to plot.", ""]
    captions = {
        "TTFT breakdown per request": _ttft_caption(_ttft_parts(run)),
        FABRIC: FABRIC_CAPTION,
    }
    lines = ["## Plots", ""]
    for title, p in made:
        lines += [f"### {title}", "", f"![{title}]({p.relative_to(out).as_posix()})", ""]
        if captions.get(title):
            lines += [captions[title], ""]
    return lines


FABRIC = "The fabric and its hot links"
FABRIC_CAPTION = (
    "Each link is coloured by the p95, over the sampling intervals, of its busier "
    "direction's transmit rate in % of the link's rate (grey: neither end sampled; a "
    "host's own port never is). Numbered red dots: the hottest egress queues as the "
    "table above ranks them, drawn at the switch end they drain, with their peak."
)


def _fabric_picture(run: Run, fabric: Any, names: Any, capacity: Any, path: Path) -> Path | None:
    made = write_fabric_picture(fabric, run.links, run.queues, capacity, path, names)
    if made is None:
        path.unlink(missing_ok=True)  # no stale picture from an earlier report
    return made


def _ttft_caption(parts: Any) -> str:
    """The medians of the TTFT's parts, in one sentence."""
    from experiments.analysis.metrics.ttft_parts import LABELS, PARTS

    if parts is None or not len(parts):
        return ""
    said = ", ".join(f"{LABELS[k]} {fmt(float(parts[k].median()))}" for k in PARTS)
    return (
        f"Medians over {len(parts)} requests (ms): {said}; TTFT "
        f"{fmt(float(parts['ttft_ms'].median()))}. The prefill ends where its KV transfer "
        "was scheduled; the parts add up to each request's TTFT."
    )


def _ttft_parts(run: Run) -> Any:
    """The run's per-request TTFT split (``metrics.ttft_parts``), None without KV moves."""
    from experiments.analysis.metrics.ttft_parts import ttft_parts

    serving = [w for w in (run.config.workloads if run.config else []) if w.kind == "serving"]
    transfer = getattr(serving[0], "transfer", "monolithic") if serving else "monolithic"
    return ttft_parts(run.requests, run.flows, transfer)


def _fabric(run: Run) -> Any:
    """The run's fabric from its configuration (None when unknown or not buildable)."""
    from experiments.spec.typed import fabric_of

    if run.config is None:
        return None
    try:
        return fabric_of(run.config)
    except (ValueError, KeyError):
        return None


def _plot(fn: Callable[..., Path | None], *args: Any) -> Path | None:
    *tables, path = args
    if all(t is None or not len(t) for t in tables[:1]):
        Path(path).unlink(missing_ok=True)  # no stale picture from an earlier report
        return None
    result = fn(*tables, path)
    if result is None:
        Path(path).unlink(missing_ok=True)
    return result

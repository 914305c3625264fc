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
:mod:`experiments.output.comparison`'s, built on the helpers here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiments.analysis.headline import headline, question
from experiments.analysis.summary import summarize
from experiments.output import plots
from experiments.output.recovery import never_finished, unfinished_lines
from experiments.output.results import NotARunError, ResultsError, Run, load_run
from experiments.output.timeline import TIMELINE, write_timeline
from topologies.shaping import DEFAULT_MTU, frame_bytes

__all__ = ["NotARunError", "ResultsError", "key_metrics", "write_report"]

PLOTS = "plots"
REPORT = "report.md"
# Latency metrics shown in the tables, in this order, when a run has them:
# (label, path into summary["metrics"]).
LATENCY_ROWS: list[tuple[str, tuple[str, ...]]] = [
    ("FCT, all flows (ms)", ("fct_ms",)),
    ("incast round (ms)", ("incast", "round_ms")),
    ("TTFT (ms)", ("ttft_ms",)),
    ("TPOT (ms)", ("tpot_ms",)),
    ("ITL (ms)", ("itl_ms",)),
    ("end-to-end (ms)", ("e2e_ms",)),
    ("KV transfer (ms)", ("kv_transfer_ms",)),
    ("KV transfer exposed after prefill (ms)", ("serving", "pipelining", "kv_exposed_ms")),
    ("TTFT, first session turns (ms)", ("serving", "sessions", "ttft_ms", "first_turn")),
    ("TTFT, later session turns (ms)", ("serving", "sessions", "ttft_ms", "later_turns")),
    ("session completion (ms)", ("serving", "sessions", "completion_ms")),
    ("TTFT, busiest second's arrivals (ms)", ("serving", "peak_second", "peak", "ttft_ms")),
    ("TTFT, other arrivals (ms)", ("serving", "peak_second", "rest", "ttft_ms")),
    ("agent lateness (ms)", ("lateness_ms",)),
    ("queue backlog (pkts)", ("queue_pkts", "all")),
]
# Single numbers shown when present: (label, path, unit).
VALUE_ROWS: list[tuple[str, tuple[str, ...], str]] = [
    ("flows", ("flows", "total"), ""),
    ("failed flows", ("flows", "failed"), ""),
    ("goodput (emulated)", ("goodput_mbps",), "Mbit/s"),
    ("goodput (real-equivalent)", ("goodput_real_gbps",), "Gbit/s"),
    ("incast goodput per round, mean (emulated)", ("incast", "goodput_mbps", "mean"), "Mbit/s"),
    ("incast goodput per round, min (emulated)", ("incast", "goodput_mbps", "min"), "Mbit/s"),
    ("incast goodput per round, mean (real)", ("incast", "goodput_real_gbps", "mean"), "Gbit/s"),
    ("Jain fairness across tenants", ("jain_fairness",), ""),
    ("drops", ("drops", "total"), "packets"),
    ("ports with drops", ("drops", "ports_with_drops"), ""),
    ("time above queue threshold (all ports)", ("queue_above", "time_above_s"), "s"),
    ("requests", ("serving", "requests"), ""),
    ("unserved requests", ("serving", "unserved"), ""),
    ("SLO attainment (TTFT and TPOT)", ("serving", "slo", "attainment"), ""),
    ("goodput (requests meeting SLO)", ("serving", "goodput_rps"), "req/s"),
    ("KV transfer share of TTFT", ("serving", "kv_transfer_share_of_ttft", "aggregate"), ""),
    ("prefix-cache hit rate (cached ÷ prompt tokens)", ("serving", "prefix_cache", "hit_rate"), ""),
    ("prefix-cache hit rate, local", ("serving", "prefix_cache", "local_hit_rate"), ""),
    ("prefix-cache hit rate, remote", ("serving", "prefix_cache", "remote_hit_rate"), ""),
    ("prefix-cache hit rate, infinite cache", ("serving", "prefix_cache", "ideal_hit_rate"), ""),
    ("KV transfer hidden behind prefill", ("serving", "pipelining", "hidden_fraction"), ""),
    ("sessions completed", ("serving", "sessions", "completed"), ""),
    ("cache hit rate, later session turns", ("serving", "sessions", "hit_rate", "later_turns"), ""),
    ("KV evictions (HBM full)", ("serving", "kv_tiers", "evictions"), ""),
    ("tokens recomputed after eviction", ("serving", "kv_tiers", "recomputed_tokens"), ""),
    ("KV moved to and from CXL", ("serving", "kv_tiers", "bytes_by_tier", "cxl", "moved"), "bytes"),
    (
        "KV moved to and from flash",
        ("serving", "kv_tiers", "bytes_by_tier", "flash", "moved"),
        "bytes",
    ),  # fmt: skip
    ("evicted requests' stall, p50", ("serving", "kv_tiers", "stall_ms", "p50"), "ms"),
    (
        "ITL p99 of requests never evicted",
        ("serving", "kv_tiers", "itl_ms_never_evicted", "p99"),
        "ms",
    ),  # fmt: skip
    ("share of requests in the busiest second", ("serving", "peak_second", "peak", "share"), ""),
]
# Columns of the comparison table besides p50/p99 of LATENCY_ROWS.
COMPARE_VALUES: list[tuple[str, tuple[str, ...]]] = [
    ("goodput Mbit/s", ("goodput_mbps",)),
    ("incast goodput mean Mbit/s", ("incast", "goodput_mbps", "mean")),
    ("drops", ("drops", "total")),
    ("failed flows", ("flows", "failed")),
    ("SLO attainment", ("serving", "slo", "attainment")),
    ("cache hit rate", ("serving", "prefix_cache", "hit_rate")),
    ("ideal hit rate", ("serving", "prefix_cache", "ideal_hit_rate")),
    ("KV hidden", ("serving", "pipelining", "hidden_fraction")),
    ("evictions", ("serving", "kv_tiers", "evictions")),
    ("recomputed tokens", ("serving", "kv_tiers", "recomputed_tokens")),
    ("Jain", ("jain_fairness",)),
]


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
    from experiments.output.comparison import compare_dir, write_compare  # it builds on this module

    if out_dir is None:
        out_dir = compare_dir(runs[0].path.parent)
    return write_compare(runs, Path(out_dir))


def run_metrics(run: Run) -> dict[str, Any]:
    """The run's metrics: summary.json's, or recomputed from the tables when the
    summary has none (a run interrupted before it could summarise, or killed: then the
    tables are the recovered ones, ``recovery``)."""
    metrics = run.summary.get("metrics")
    if metrics:
        return metrics
    if not run.spec:
        return {}
    try:
        return summarize(run.flows, run.requests, run.tokens, run.queues, run.spec, run.links)
    except (ValueError, KeyError):  # a spec too incomplete to summarise against
        return {}
    except Exception:  # tables cut short by a kill: a report, never a crash
        if never_finished(run):
            return {}
        raise


def key_metrics(run: Run) -> dict[str, Any]:
    """The flat row of a run in a comparison: label, point, verdict, then p50/p99 of
    each latency metric and the single values of :data:`COMPARE_VALUES`."""
    m = run_metrics(run)
    row: dict[str, Any] = {"label": run.label, "run_id": run.run_id}
    row |= {f"point {k}": v for k, v in (run.summary.get("point") or {}).items()}
    row["fidelity"] = _verdict_word(run.summary.get("fidelity"))
    row["partial"] = run.partial
    for label, path in LATENCY_ROWS:
        stats = _get(m, path)
        if isinstance(stats, dict) and stats.get("count"):
            row[f"{_short(label)} p50"] = stats.get("p50")
            row[f"{_short(label)} p99"] = stats.get("p99")
    for label, path in COMPARE_VALUES:
        value = _get(m, path)
        if value is not None:
            row[label] = value
    return row


# ---- one run -------------------------------------------------------------------------------


def _write_single(run: Run, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    m = run_metrics(run)
    lines = [f"# {_title(run)}", ""]
    lines += _verdict_lines(run)
    lines += unfinished_lines(run, computed=bool(m))
    lines += _question_lines(run)
    lines += _headline_lines(m, run.summary.get("estimate"), _run_scale(run))
    lines += _check_lines(run)
    lines += _fault_lines(m)
    lines += _capture_lines(run)
    lines += _spec_lines(run)
    lines += _metric_lines(m)
    lines += _estimate_lines(run.summary.get("estimate"))
    lines += _plot_lines(run, out)
    path = out / REPORT
    _write_text(path, "\n".join(lines).rstrip() + "\n")
    return path


def _fault_lines(m: dict[str, Any]) -> list[str]:
    """Per fault: the controller's timings and what the traffic felt, from the instant
    of the fault (:mod:`experiments.output.fault_report`)."""
    from experiments.output.fault_report import fault_lines  # it builds on this module

    return fault_lines(m)


def _capture_lines(run: Run) -> list[str]:
    """The run's packet captures (events.json ``captures``), linked."""
    caps = run.events.get("captures")
    if not caps:
        return []
    lines = ["## Captures", "",
             "Open with Wireshark and the KV dissector "
             "(`wireshark -X lua_script:traffic/wireshark/kvfabric.lua FILE`).", ""]  # fmt: skip
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
            rows.append((prefix, f"p50 {_fmt(value.get('p50'))}, p99 {_fmt(value.get('p99'))}"))
        elif isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), sub)
        elif not isinstance(value, list):
            rows.append((prefix, _fmt(value)))

    walk("", estimate)
    lines = ["## Analytic estimate", "",
             "What theory predicts from the same parameters "
             "(`kvfabric estimate`); "
             "compare with the measurement above.", "",
             "| quantity | predicted |", "| --- | ---: |"]  # fmt: skip
    lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"| … | {len(rows) - limit} more in summary.json |")
    return [*lines, ""]


def _title(run: Run) -> str:
    experiment = run.summary.get("experiment") or run.spec.get("name") or run.path.parent.name
    label = run.summary.get("label")
    return (
        f"{experiment}: {label} (run {run.run_id})" if label else f"{experiment} (run {run.run_id})"
    )


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
        lines += [f"The fidelity monitor reported: {_cell(fid['error'])}", ""]
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
                f"| {name} | {mark} | {_fmt(c.get('value'))} | {_fmt(c.get('threshold'))} "
                f"| {c.get('unit') or ''} | {_cell(c.get('detail') or '')} |"
            )
        lines.append("")
    return lines + _envelope_lines(run.summary)


def _envelope_lines(s: dict) -> list[str]:
    """What the run asked of the machine (its envelope) and which compute model timed it."""
    lines = []
    env = s.get("envelope")
    if env:
        peaks = ", ".join(f"{n} {_fmt(f['peak'])} of {_fmt(f['limit'])} {f['unit']}"
                          for n, f in (env.get("figures") or {}).items()
                          if n != "machine_load")  # fmt: skip
        state = "fits" if env.get("fits") else "**exceeded** (run with --force)"
        lines.append(f"Envelope: {state}; peaks over 100 ms: {peaks}. {_cell(env.get('source'))}.")
        if env.get("flow_size_scale"):
            lines.append(f"Flow-size scale: {_kv(env['flow_size_scale'])} (sizes × k, "
                         "arrivals ÷ k; compare FCT slowdown across k).")  # fmt: skip
    compute = s.get("compute")
    if compute:
        lines.append(f"Compute model: {compute.get('compute_model')} (by tp: "
                     f"{_kv(compute.get('by_tp') or {})}).")  # fmt: skip
    return [*lines, ""] if lines else []


def _question_lines(run: Run) -> list[str]:
    asked = question(run.summary.get("experiment") or run.spec.get("name"))
    return [f"> **Question.** {_cell(asked)}", ""] if asked else []


def _run_scale(run: Run) -> float | None:
    scale = (run.spec.get("scale") or {}).get("bandwidth", run.summary.get("scale"))
    return float(scale) if isinstance(scale, int | float) and scale > 0 else None


def _units_note(scale: float | None) -> str:
    if scale is None:
        return "Times as measured."
    return (
        f"Real-equivalent units: message bytes and link rates both run at {scale:g} of the "
        "real ones, so times are as measured and rates are emulated ÷ scale."
    )


def _estimate_cell(est: dict[str, float]) -> str:
    if "value" in est:
        return _fmt(est["value"])
    if "p50" in est or "p99" in est:
        return f"p50 {_fmt(est.get('p50'))} · p99 {_fmt(est.get('p99'))}"
    return "–"


def _headline_lines(m: dict[str, Any], estimate: Any, scale: float | None) -> list[str]:
    """The headline measurements, each beside its analytic estimate, in two narrow
    tables: distributions (p50, p99) and single values."""
    rows = headline(m, estimate if isinstance(estimate, dict) else None)
    if not rows:
        return []
    lines = ["## Headline", "", _units_note(scale), ""]
    dists = [h for h in rows if h.distribution]
    values = [h for h in rows if not h.distribution]
    if dists:
        lines += ["| quantity | p50 | p99 | estimate |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {h.label} ({h.unit}) | {_fmt(h.measured['p50'])} "
                  f"| {_fmt(h.measured.get('p99'))} | {_estimate_cell(h.estimate)} |"
                  for h in dists]  # fmt: skip
        lines.append("")
    if values:
        lines += ["| quantity | measured | estimate | unit |", "| --- | ---: | ---: | --- |"]
        lines += [f"| {h.label} | {_fmt(h.measured['value'])} | {_estimate_cell(h.estimate)} "
                  f"| {h.unit} |" for h in values]  # fmt: skip
        lines.append("")
    if any(h.estimate for h in rows):
        lines += [
            "The estimate is the analytic prediction from the same parameters "
            "(`kvfabric estimate`; details under *Analytic estimate*).",
            "",
        ]
    return lines


def _spec_lines(run: Run) -> list[str]:
    spec, s = run.spec, run.summary
    lines = ["## Run", ""]
    lines.append(f"- experiment: {s.get('experiment') or spec.get('name') or '?'}, "
                 f"run id `{run.run_id}`, seed {s.get('seed', spec.get('seed', '?'))}")  # fmt: skip
    if s.get("point"):
        lines.append(f"- sweep point: {_kv(s['point'])}")
    if s.get("started") or s.get("ended"):
        lines.append(f"- started {s.get('started') or '?'}, ended {s.get('ended') or '?'}")
    if spec.get("duration_s") is not None:
        lines.append(f"- duration: {_fmt(spec['duration_s'])} s")
    fabric = dict(spec.get("fabric") or {})
    if fabric:
        kind = fabric.pop("kind", "?")
        lines.append(f"- fabric: **{kind}** ({_kv(fabric)})")
    scale = (spec.get("scale") or {}).get("bandwidth", s.get("scale"))
    if isinstance(scale, int | float) and scale > 0:
        lines.append(
            f"- scale: {scale:g} (a 400 Gbit/s link runs at {400e3 * scale:g} Mbit/s; "
            "real-equivalent = emulated / scale)"
        )
        mtu = int((spec.get("scale") or {}).get("mtu") or DEFAULT_MTU)
        frame = frame_bytes(mtu)
        lines.append(
            f"- packets: MTU {mtu}{' (jumbo frames)' if mtu > DEFAULT_MTU else ''}; one "
            f"emulated packet stands for {frame / scale / 1e6:.3g} MB of real bytes and holds "
            f"a 400 Gbit/s link for {frame * 8 / (400e9 * scale) * 1e3:.2g} ms, the grain of "
            "every queue and transfer time"
        )
    ctl = spec.get("controller") or {}
    if ctl:
        lines.append(f"- policy: **{ctl.get('policy', '?')}**")
    for i, w in enumerate(spec.get("workloads") or []):
        w = dict(w)
        lines.append(f"- workload {i}: **{w.pop('kind', '?')}** ({_kv(w)})")
    lines.append("")
    return lines


def _metric_lines(m: dict[str, Any]) -> list[str]:
    lines = ["## Key metrics", ""]
    if not m:
        return lines + ["No metrics: the run recorded no tables.", ""]
    rows = []
    for label, path in LATENCY_ROWS:
        rows.append((label, _get(m, path)))
        if path == ("fct_ms",):
            for kind, stats in (m.get("fct_ms_by_kind") or {}).items():
                rows.append((f"FCT, {kind} (ms)", stats))
    for tenant, stats in (_get(m, ("alltoall", "step_ms")) or {}).items():
        rows.append((f"all-to-all step, tenant {tenant} (ms)", stats))
    for pair, stats in (_get(m, ("probe", "owd_ms")) or {}).items():
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
                _fmt(st.get(k)) for k in ("mean", "p50", "p90", "p99", "p999", "max")
            )
            lines.append(f"| {label} | {st['count']} | {cells} |")
        lines.append("")
    values = [(label, _get(m, path), unit) for label, path, unit in VALUE_ROWS]
    values = [v for v in values if v[1] is not None]
    if values:
        lines += ["| quantity | value | unit |", "| --- | ---: | --- |"]
        lines += [f"| {label} | {_fmt(v)} | {unit} |" for label, v, unit in values]
        lines.append("")
    hot = _get(m, ("queue_pkts", "hottest")) or []
    if hot:
        lines += [
            "Hottest egress queues (time-weighted):",
            "",
            "| port | mean pkts | p99 pkts | max pkts | drops | busy fraction |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in hot:
            lines.append(
                f"| {r.get('node')}:{r.get('port')} | {_fmt(r.get('mean_pkts'))} "
                f"| {_fmt(r.get('p99_pkts'))} | {_fmt(r.get('max_pkts'))} "
                f"| {_fmt(r.get('drops'))} | {_fmt(r.get('frac_above'))} |"
            )
        lines.append("")
    errors = _get(m, ("flows", "errors")) or {}
    if errors:
        lines += ["Flow errors:", ""]
        lines += [f"- {n} × {_cell(msg)}" for msg, n in errors.items()]
        lines.append("")
    return lines


# Which table of latencies a metric goes in (by the start of its label); the rest: flows.
GROUPS = [
    ("Serving latency", ("TTFT", "TPOT", "ITL", "end-to-end", "KV transfer")),
    ("Emulator", ("agent lateness", "queue backlog")),
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
    made: list[tuple[str, Path | None]] = [
        ("Timeline", write_timeline(run, pdir / TIMELINE)),
        ("Flow completion time by kind", _plot(plots.fct_cdf, run.flows, pdir / "fct_cdf.png")),
        (
            "TTFT and inter-token latency",
            _plot(plots.serving_cdf, run.requests, run.tokens, pdir / "serving_cdf.png"),
        ),
        (
            "Queue occupancy of the hottest ports",
            _plot(plots.queue_timeseries, run.queues, pdir / "queues.png"),
        ),
        ("Link utilisation", _plot(plots.link_heatmap, run.links, pdir / "links.png")),
    ]
    made = [(title, p) for title, p in made if p is not None]
    if not made:
        return ["## Plots", "", "No tables to plot.", ""]
    lines = ["## Plots", ""]
    for title, p in made:
        lines += [f"### {title}", "", f"![{title}]({p.relative_to(out).as_posix()})", ""]
    return lines


def _plot(fn: Callable[..., Path | None], *args: Any) -> Path | None:
    *tables, path = args
    if all(t is None or not len(t) for t in tables[:1]):
        Path(path).unlink(missing_ok=True)  # no stale picture from an earlier report
        return None
    result = fn(*tables, path)
    if result is None:
        Path(path).unlink(missing_ok=True)
    return result


# ---- formatting ----------------------------------------------------------------------------


def _verdict_word(fid: Any) -> str:
    if not isinstance(fid, dict) or "ok" not in fid:
        return "not judged"
    return "OK" if fid.get("ok") else "NOT OK"


def _get(m: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(m, dict):
            return None
        m = m.get(key)
    return m


def _short(label: str) -> str:
    return label.split(" (")[0]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return _cell(str(value))


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _kv(d: dict[str, Any], limit: int = 300) -> str:
    parts = []
    for k, v in d.items():
        shown = v if isinstance(v, str | int | float | bool) or v is None else json.dumps(v)
        parts.append(f"{k}={shown}")
    text = ", ".join(parts)
    return _cell(text if len(text) <= limit else text[: limit - 1] + "…")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)

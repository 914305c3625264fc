"""A run's timeline: what happened when, on one shared time axis, as ``plots/timeline.png``.

    fig = timeline_figure(run)          # a matplotlib Figure, or None with nothing to draw
    path = write_timeline(run, path)    # the PNG, or None

Panels, top to bottom, each drawn only when its table has rows:

1. backlog (packets) of the ``n_queues`` hottest switch egress queues (``queues``);
2. tx rate of the ``n_links`` most loaded ports (``links``): utilisation (0–1) when the
   table has the configured ``rate_mbps``, else real-equivalent Gbit/s (emulated rate ÷
   the run's bandwidth scale), else emulated Mbit/s;
3. inter-token latency of every token, one point each at its instant (``tokens``);
4. TTFT of every request, one point at its arrival (``requests``).

On every panel: fault instants (``events.json`` ``faults``) as red dashed lines, and the
all-to-all steps (``flows`` rows of kind ``alltoall``, per tenant and step, from the
first start to the last end) as grey spans. Time is seconds since the run's traffic
start (``events.json`` ``t0_ns``; else the earliest stamp in any table); the axis spans
from that start (or the first earlier sample) to the run's end (``t_end_ns``, else the
last stamp). Drawing only reads the run directory: no root, no network, and the same
tables give the same PNG.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from experiments.analysis.metrics import hottest_ports
from experiments.analysis.summary import link_rates
from experiments.output import plots
from experiments.output.metric_rows import run_scale
from experiments.output.results import Run

__all__ = [
    "TIMELINE",
    "alltoall_steps",
    "fault_instants",
    "time_origin",
    "timeline_figure",
    "write_timeline",
]

TIMELINE = "timeline.png"


def _stamps(run: Run) -> list[np.ndarray]:
    cols = [
        ("queues", "t_ns"),
        ("links", "t_ns"),
        ("tokens", "t_ns"),
        ("requests", "arrival_ns"),
        ("flows", "t_start_ns"),
        ("flows", "t_end_ns"),
    ]
    out = []
    for table, col in cols:
        df = run.table(table)
        if df is not None and len(df) and col in df:
            arr = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
            arr = arr[np.isfinite(arr)]
            if arr.size:
                out.append(arr)
    return out


def _events(run: Run) -> Mapping[str, Any]:
    return run.events  # events.json: {faults, controller, t0_ns, ...}


def time_origin(run: Run) -> tuple[float, float] | None:
    """``(t0_ns, t_end_ns)`` of the run: the traffic start and end from events.json,
    else the earliest and latest stamp of its tables; ``None`` for a run with neither."""
    events = _events(run)
    stamps = _stamps(run)
    lo = min((float(a.min()) for a in stamps), default=None)
    hi = max((float(a.max()) for a in stamps), default=None)
    t0 = events.get("t0_ns", lo)
    t_end = events.get("t_end_ns", hi)
    if t0 is None or t_end is None:
        return None
    return float(t0), float(t_end)


def fault_instants(run: Run) -> list[tuple[float, str]]:
    """``(t_ns, label)`` of every fault applied, e.g. ``link_down rail1-spine0``."""
    out = []
    for fault in _events(run).get("faults") or []:
        if not isinstance(fault, Mapping) or fault.get("t_ns") is None:
            continue
        what = fault.get("link") or fault.get("node") or fault.get("target") or ""
        if isinstance(what, list | tuple):
            what = "-".join(map(str, what))
        out.append((float(fault["t_ns"]), f"{fault.get('event', 'fault')} {what}".strip()))
    return out


def alltoall_steps(flows: pd.DataFrame | None) -> pd.DataFrame:
    """One row per all-to-all step: ``tenant, step, t_start_ns, t_end_ns`` (first start,
    last end of the step's flows), ordered by start."""
    cols = ["tenant", "step", "t_start_ns", "t_end_ns"]
    if flows is None or not len(flows) or "kind" not in flows:
        return pd.DataFrame(columns=cols)
    a2a = flows[flows["kind"] == "alltoall"]
    if not len(a2a):
        return pd.DataFrame(columns=cols)
    keys = [k for k in ("tenant", "step") if k in a2a]
    start = pd.to_numeric(a2a["t_start_ns"], errors="coerce").astype(float)
    end = pd.to_numeric(a2a["t_end_ns"], errors="coerce").astype(float)
    frame = a2a[keys].assign(t_start_ns=start, t_end_ns=end.fillna(start))
    steps = frame.groupby(keys, sort=True, dropna=False).agg(
        t_start_ns=("t_start_ns", "min"), t_end_ns=("t_end_ns", "max")
    )
    steps = steps.reset_index().dropna(subset=["t_start_ns"])
    for k in cols:
        if k not in steps:
            steps[k] = None
    return steps[cols].sort_values("t_start_ns", kind="stable").reset_index(drop=True)


def _queue_panel(ax, queues: pd.DataFrame, t0: float, n: int) -> None:
    for row in hottest_ports(queues, n).itertuples(index=False):
        g = queues[(queues["node"] == row.node) & (queues["port"] == row.port)]
        g = g.sort_values("t_ns", kind="stable")
        t = (g["t_ns"].to_numpy(dtype=float) - t0) / 1e9
        ax.step(
            t,
            g["backlog_pkts"].to_numpy(dtype=float),
            where="post",
            linewidth=0.9,
            label=f"{row.node}:{row.port}",
        )
    ax.set_ylabel("backlog (pkts)")
    ax.set_title(
        f"hottest egress queues ({min(n, queues.groupby(['node', 'port']).ngroups)})",
        fontsize="medium",
        loc="left",
    )


def _link_panel(ax, links: pd.DataFrame, t0: float, n: int, scale: float | None) -> bool:
    rates = link_rates(links)
    rates = rates[np.isfinite(rates["tx_mbps"].astype(float))]
    if not len(rates):
        return False
    if "rate_mbps" in links and links["rate_mbps"].notna().any():
        cfg = links.groupby(["node", "port"], sort=True)["rate_mbps"].max()
        rates = rates.join(cfg, on=["node", "port"])
        rates["value"] = rates["tx_mbps"] / rates["rate_mbps"]
        unit = "utilisation"
    elif scale is not None:
        rates["value"] = rates["tx_mbps"] / scale / 1000.0
        unit = "Gbit/s (real-equivalent)"
    else:
        rates["value"] = rates["tx_mbps"]
        unit = "Mbit/s (emulated)"
    busiest = (
        rates.groupby(["node", "port"], sort=True)["value"]
        .mean()
        .sort_values(ascending=False, kind="stable")
        .head(n)
    )
    for node, port in busiest.index:
        g = rates[(rates["node"] == node) & (rates["port"] == port)].sort_values("t_ns")
        ax.plot(
            (g["t_ns"].to_numpy(dtype=float) - t0) / 1e9,
            g["value"].to_numpy(dtype=float),
            linewidth=0.9,
            label=f"{node}:{port}",
        )
    ax.set_ylabel(unit.split(" (")[0])
    ax.set_title(f"most loaded links ({len(busiest)}), tx {unit}", fontsize="medium", loc="left")
    return True


def timeline_figure(run: Run, n_queues: int = 4, n_links: int = 4) -> Figure | None:
    """The timeline of ``run`` (see the module docstring), or ``None`` when no table has
    a time series to draw."""
    span = time_origin(run)
    if span is None:
        return None
    t0, t_end = span
    queues, links, tokens, requests = run.queues, run.links, run.tokens, run.requests
    panels = []
    if queues is not None and len(queues):
        panels.append("queues")
    if links is not None and len(links) and len(link_rates(links)):
        panels.append("links")
    if tokens is not None and len(tokens) and "itl_ms" in tokens and tokens["itl_ms"].notna().any():
        panels.append("itl")
    if requests is not None and len(requests) and "ttft_ms" in requests:
        panels.append("ttft")
    if not panels:
        return None
    fig, axes = plots._new(10.0, 2.1 * len(panels) + 0.6, len(panels), 1)
    axes = [row[0] for row in axes]
    for ax, panel in zip(axes, panels, strict=True):
        if panel == "queues":
            _queue_panel(ax, queues, t0, n_queues)
        elif panel == "links":
            _link_panel(ax, links, t0, n_links, run_scale(run))
        elif panel == "itl":
            ok = tokens[tokens["itl_ms"].notna()]
            ax.plot(
                (ok["t_ns"].to_numpy(dtype=float) - t0) / 1e9,
                ok["itl_ms"],
                ".",
                markersize=2,
                alpha=0.5,
                label=f"tokens (n={len(ok)})",
            )
            ax.set_ylabel("ITL (ms)")
            ax.set_title("inter-token latency of every token", fontsize="medium", loc="left")
        else:
            ok = requests[requests["ttft_ms"].notna()]
            ax.plot(
                (ok["arrival_ns"].to_numpy(dtype=float) - t0) / 1e9,
                ok["ttft_ms"],
                "o",
                markersize=3,
                label=f"requests (n={len(ok)})",
            )
            ax.set_ylabel("TTFT (ms)")
            ax.set_title("TTFT of every request, at its arrival", fontsize="medium", loc="left")
    first = min([(float(a.min()) - t0) / 1e9 for a in _stamps(run)] + [0.0])
    last = max([(float(a.max()) - t0) / 1e9 for a in _stamps(run)] + [(t_end - t0) / 1e9])
    steps = alltoall_steps(run.flows)
    faults = fault_instants(run)
    for ax in axes:
        for i, step in enumerate(steps.itertuples(index=False)):
            ax.axvspan(
                (step.t_start_ns - t0) / 1e9,
                (step.t_end_ns - t0) / 1e9,
                color="0.5",
                alpha=0.15,
                linewidth=0,
                label="all-to-all step" if i == 0 else None,
            )
        for i, (t_ns, _what) in enumerate(faults):
            ax.axvline(
                (t_ns - t0) / 1e9,
                color="red",
                linestyle="--",
                linewidth=1.0,
                label="fault" if i == 0 else None,
            )
        ax.set_xlim(first, last)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small", loc="upper right", ncol=2)
    top = axes[0]
    for t_ns, what in faults:
        top.annotate(
            what,
            ((t_ns - t0) / 1e9, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize="x-small",
            color="red",
            rotation=90,
            va="top",
            ha="right",
        )
    for ax in axes[1:]:
        ax.sharex(axes[0])
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    axes[-1].set_xlabel("time since traffic start (s)")
    return fig


def write_timeline(run: Run, path: Path) -> Path | None:
    """Draw :func:`timeline_figure` into ``path``; ``None`` (and no file) with nothing to draw."""
    fig = timeline_figure(run)
    if fig is None:
        Path(path).unlink(missing_ok=True)
        return None
    return plots._save(fig, path)

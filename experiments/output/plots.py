"""Plots of a run's tables and of several runs side by side, as PNG files.

Matplotlib's Agg canvas is used directly (no pyplot, no display, no global figure
state), so plotting works without root, a display or the network, and the same tables
give the same bytes. Every function returns the written path, or ``None`` when there is
nothing to plot (an absent or empty table), so a report can skip the picture.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from experiments.analysis.metrics import hottest_ports
from experiments.analysis.metrics.flows import fct_ms, ok_mask
from experiments.analysis.summary import link_rates
from topologies import Fabric

__all__ = [
    "compare_bars",
    "compare_cdf",
    "compare_vs_sweep",
    "drops_timeseries",
    "fct_cdf",
    "link_heatmap",
    "port_capacity_mbps",
    "port_names",
    "queue_timeseries",
    "serving_cdf",
    "ttft_breakdown",
]

PortNames = Mapping[tuple[str, int], str]  # (node, port) -> "leaf0→spine1"


def port_names(fabric: Fabric | None) -> dict[tuple[str, int], str]:
    """Every switch port named by the node at its other end: ``rail0→spine1``."""
    if fabric is None:
        return {}
    out = {}
    for link in fabric.links:
        for end in link.ends():
            out[(end, link.port_of(end))] = f"{end}→{link.other(end)}"
    return out


def port_capacity_mbps(
    fabric: Fabric | None, bandwidth: float | None
) -> dict[tuple[str, int], float]:
    """Every switch port's configured egress rate, emulated Mbit/s per real-equivalent
    second (as the links table reads): its link's real rate × ``bandwidth``."""
    if fabric is None or not bandwidth:
        return {}
    return {
        (end, link.port_of(end)): link.real_gbps * bandwidth * 1e3
        for link in fabric.links
        for end in link.ends()
    }


def _port(names: PortNames | None, node: str, port: object) -> str:
    try:
        key = (str(node), int(port))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"{node}:{port}"
    return (names or {}).get(key, f"{node}:{port}")


DPI = 100
# PNG metadata without the matplotlib version, so a report does not change on upgrade.
_METADATA = {"Software": None}


def _new(width: float = 7.0, height: float = 4.0, rows: int = 1, cols: int = 1):
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata=_METADATA)
    return path


def _cdf(ax, values: Sequence[float] | np.ndarray | pd.Series, label: str) -> bool:
    arr = np.asarray(values, dtype=float)
    arr = np.sort(arr[np.isfinite(arr)])
    if arr.size == 0:
        return False
    y = np.arange(1, arr.size + 1) / arr.size
    ax.step(arr, y, where="post", label=f"{label} (n={arr.size})")
    return True


def _ccdf(ax, values: Sequence[float] | np.ndarray | pd.Series, label: str) -> bool:
    """The complementary CDF (fraction > x) on a log y-axis: the tail a CDF hides."""
    arr = np.asarray(values, dtype=float)
    arr = np.sort(arr[np.isfinite(arr)])
    if arr.size == 0:
        return False
    y = 1.0 - np.arange(arr.size) / arr.size  # fraction >= each value, never 0
    ax.step(arr, y, where="post", label=f"{label} (n={arr.size})")
    return True


def _finish_ccdf(ax, xlabel: str, title: str, smallest: int) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction ≥ x (log)")
    ax.set_yscale("log")
    ax.set_ylim(max(0.5 / max(smallest, 1), 1e-4), 1.5)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="lower left")


def _finish_cdf(ax, xlabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction ≤ x")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="lower right")


def fct_cdf(flows: pd.DataFrame | None, path: Path) -> Path | None:
    """CDF of the flow completion time of completed flows, one line per kind."""
    if flows is None or not len(flows):
        return None
    ok = ok_mask(flows)
    fct = fct_ms(flows)
    fig, axes = _new()
    ax = axes[0][0]
    drawn = False
    for kind in sorted(flows["kind"].dropna().unique(), key=str):
        drawn |= _cdf(ax, fct[ok & (flows["kind"] == kind)], str(kind))
    if not drawn:
        return None
    if fct[ok].min() > 0 and fct[ok].max() / fct[ok].min() > 100:
        ax.set_xscale("log")
    _finish_cdf(ax, "flow completion time (ms)", "FCT by flow kind (completed flows)")
    return _save(fig, path)


def serving_cdf(
    requests: pd.DataFrame | None, tokens: pd.DataFrame | None, path: Path
) -> Path | None:
    """CDFs of TTFT (and KV transfer time) and of the inter-token latency, and under
    each its CCDF on a log axis, where the tail is read."""
    if requests is None or not len(requests):
        return None
    fig, axes = _new(10.0, 7.0, 2, 2)
    (left, right), (left_tail, right_tail) = axes
    first = {"TTFT": requests["ttft_ms"]}
    if "kv_transfer_ms" in requests:
        first["KV transfer"] = requests["kv_transfer_ms"]
    second = {}
    if tokens is not None and len(tokens) and "itl_ms" in tokens:
        second["ITL"] = tokens["itl_ms"]
    if "tpot_ms" in requests:
        second["TPOT"] = requests["tpot_ms"]
    drawn = False
    for (cdf_ax, tail_ax), series, title in (
        ((left, left_tail), first, "time to first token"),
        ((right, right_tail), second, "inter-token latency"),
    ):
        for label, values in series.items():
            drawn |= _cdf(cdf_ax, values, label)
            _ccdf(tail_ax, values, label)
        _finish_cdf(cdf_ax, "ms", title)
        smallest = min(
            (int(np.isfinite(np.asarray(v, float)).sum()) for v in series.values()), default=1
        )
        _finish_ccdf(tail_ax, "ms", f"{title}: the tail", smallest)
    return _save(fig, path) if drawn else None


def ttft_breakdown(parts: pd.DataFrame | None, path: Path) -> Path | None:
    """One stacked bar per request in arrival order: its TTFT split into waiting +
    prefill, KV transfer after the prefill and decode start
    (``metrics.ttft_parts``)."""
    from experiments.analysis.metrics.ttft_parts import LABELS, PARTS

    if parts is None or not len(parts):
        return None
    fig, axes = _new(max(7.0, 0.12 * len(parts) + 3), 4.0)
    ax = axes[0][0]
    x = np.arange(len(parts))
    bottom = np.zeros(len(parts))
    for part in PARTS:
        values = parts[part].to_numpy(dtype=float)
        ax.bar(x, values, bottom=bottom, width=0.85, label=LABELS[part])
        bottom += values
    ax.set_xlabel("request (arrival order)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("where each request's time to first token went")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", ncol=3)
    return _save(fig, path)


def queue_timeseries(
    queues: pd.DataFrame | None, path: Path, n: int = 5, names: PortNames | None = None
) -> Path | None:
    """Backlog (packets) over time of the ``n`` hottest switch egress ports, each named
    by its neighbour (``names``: ``port_names`` of the run's fabric)."""
    if queues is None or not len(queues):
        return None
    hot = hottest_ports(queues, n)
    t0 = float(queues["t_ns"].min())
    fig, axes = _new(8.0, 4.0)
    ax = axes[0][0]
    for row in hot.itertuples(index=False):
        g = queues[(queues["node"] == row.node) & (queues["port"] == row.port)]
        g = g.sort_values("t_ns", kind="stable")
        t = (g["t_ns"].to_numpy(dtype=float) - t0) / 1e9
        ax.step(
            t,
            g["backlog_pkts"].to_numpy(dtype=float),
            where="post",
            label=f"{_port(names, row.node, row.port)} (mean {row.mean_pkts:.1f})",
        )
    ax.set_xlabel("time since first sample (s)")
    ax.set_ylabel("backlog (packets)")
    ax.set_title(f"egress queue occupancy, {len(hot)} hottest ports")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper right")
    return _save(fig, path)


def drops_timeseries(
    queues: pd.DataFrame | None,
    path: Path,
    n: int = 5,
    names: PortNames | None = None,
    bin_s: float = 0.1,
) -> Path | None:
    """Packets dropped per ``bin_s`` over time at the ``n`` ports that dropped most
    (the queues' own counters; ``None`` when no queue dropped)."""
    if queues is None or not len(queues) or "drops" not in queues:
        return None
    g = queues.sort_values("t_ns", kind="stable").groupby(["node", "port"], sort=True)
    total = (g["drops"].max() - g["drops"].min()).sort_values(ascending=False, kind="stable")
    total = total[total > 0].head(n)
    if not len(total):
        return None
    t0 = float(queues["t_ns"].min())
    span = (float(queues["t_ns"].max()) - t0) / 1e9
    edges = np.arange(0.0, span + bin_s, bin_s)
    fig, axes = _new(8.0, 4.0)
    ax = axes[0][0]
    for (node, port), dropped in total.items():
        rows = g.get_group((node, port))
        t = (rows["t_ns"].to_numpy(dtype=float) - t0) / 1e9
        step = np.concatenate(
            [[0.0], np.clip(np.diff(rows["drops"].to_numpy(dtype=float)), 0, None)]
        )
        per_bin, _ = np.histogram(t, bins=edges, weights=step)
        ax.step(
            edges[:-1], per_bin, where="post", label=f"{_port(names, node, port)} ({dropped:.0f})"
        )
    ax.set_xlabel("time since first sample (s)")
    ax.set_ylabel(f"packets dropped per {bin_s * 1e3:g} ms")
    ax.set_title(f"drops at the {len(total)} ports that dropped most (total in brackets)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper right")
    return _save(fig, path)


def link_heatmap(
    links: pd.DataFrame | None,
    path: Path,
    bins: int = 60,
    max_ports: int = 40,
    names: PortNames | None = None,
    capacity_mbps: Mapping[tuple[str, int], float] | None = None,
) -> Path | None:
    """Tx rate per port over time as a heatmap, each port named by its neighbour. With
    each port's configured rate (``capacity_mbps``, emulated Mbit/s per second as the
    table reads; or a ``rate_mbps`` column) the colour is utilisation in % of it,
    otherwise the emulated rate in Mbit/s. At most ``max_ports`` rows (the busiest)."""
    if links is None or not len(links):
        return None
    rates = link_rates(links)
    rates = rates[np.isfinite(rates["tx_mbps"].astype(float))]
    if not len(rates):
        return None
    cfg = None
    if capacity_mbps:  # keyed as the table's ports read, whatever their dtype
        cfg = {(str(n), str(p)): v for (n, p), v in capacity_mbps.items()}
    elif "rate_mbps" in links and links["rate_mbps"].notna().any():
        by = links.groupby(["node", "port"], sort=True)["rate_mbps"].max()
        cfg = {(str(n), str(p)): v for (n, p), v in by.items()}
    pairs = zip(rates["node"], rates["port"], strict=True)
    keyed = [cfg.get((str(n), str(p))) for n, p in pairs] if cfg is not None else []
    utilisation = cfg is not None and any(k is not None for k in keyed)
    if utilisation:
        rates = rates.assign(rate_mbps=pd.to_numeric(pd.Series(keyed, index=rates.index)))
        rates = rates[rates["rate_mbps"] > 0]
        rates["value"] = 100.0 * rates["tx_mbps"] / rates["rate_mbps"]
    else:
        rates["value"] = rates["tx_mbps"]
    ports = (
        rates.groupby(["node", "port"], sort=True)["value"]
        .mean()
        .sort_values(ascending=False, kind="stable")
        .head(max_ports)
    )
    keys = sorted(ports.index, key=lambda k: (str(k[0]), str(k[1])))
    t0, t1 = float(links["t_ns"].min()), float(links["t_ns"].max())
    bins = max(1, min(bins, int(rates.groupby(["node", "port"]).size().max())))
    edges = np.linspace(t0, t1 if t1 > t0 else t0 + 1, bins + 1)
    grid = np.full((len(keys), bins), np.nan)
    for i, (node, port) in enumerate(keys):
        g = rates[(rates["node"] == node) & (rates["port"] == port)]
        idx = np.clip(np.searchsorted(edges, g["t_ns"].to_numpy(dtype=float)) - 1, 0, bins - 1)
        for b in np.unique(idx):
            grid[i, b] = float(np.mean(g["value"].to_numpy(dtype=float)[idx == b]))
        # an empty bin lies inside the interval that ends in the next filled bin
        grid[i] = pd.Series(grid[i]).bfill().to_numpy()
    fig, axes = _new(9.0, max(3.0, 0.25 * len(keys) + 1.5))
    ax = axes[0][0]
    extent = (0.0, (edges[-1] - t0) / 1e9, len(keys) - 0.5, -0.5)
    vmax = 100.0 if utilisation else float(np.nanmax(grid)) or 1.0
    image = ax.imshow(
        grid,
        aspect="auto",
        interpolation="nearest",
        extent=extent,
        vmin=0.0,
        vmax=vmax,
        cmap="viridis",
    )
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([_port(names, n, p) for n, p in keys], fontsize="x-small")
    ax.set_xlabel("time since first sample (s)")
    what = "utilisation (% of the port's rate)" if utilisation else "tx rate (emulated Mbit/s)"
    ax.set_title(f"link {what}")
    fig.colorbar(image, ax=ax, label=what)
    return _save(fig, path)


def compare_vs_sweep(
    key: str,
    xs: Sequence[float],
    panels: Mapping[str, Mapping[str, Sequence[float | None]]],
    path: Path,
) -> Path | None:
    """One panel per metric (``{"FCT (ms)": {"p50": [...], "p99": [...]}}``), each line
    against the swept value ``key``, two panels a row. Repeats show as several points at
    one x; the line joins the per-x means."""
    shown = {
        name: {line: ys for line, ys in lines.items() if any(y is not None for y in ys)}
        for name, lines in panels.items()
    }
    shown = {name: lines for name, lines in shown.items() if lines}
    if not shown:
        return None
    cols = 1 if len(shown) == 1 else 2
    rows = (len(shown) + cols - 1) // cols
    fig, axes = _new(5.0 * cols, 3.2 * rows, rows, cols)
    x = np.asarray(xs, dtype=float)
    flat = list(axes.ravel())
    for ax, (name, lines) in zip(flat, shown.items(), strict=False):
        for line, values in lines.items():
            y = np.asarray([np.nan if v is None else v for v in values], dtype=float)
            ux = np.unique(x[np.isfinite(y)])
            (drawn,) = ax.plot(ux, [np.nanmean(y[x == u]) for u in ux], "-", label=line)
            ax.plot(x, y, "o", alpha=0.6, color=drawn.get_color())
        ax.set_xlabel(key)
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    for ax in flat[len(shown) :]:
        ax.set_visible(False)
    return _save(fig, path)


def compare_bars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    path: Path,
    title: str = "",
    ylabel: str = "",
) -> Path | None:
    """Grouped bars: one group per run label, one bar per series (e.g. p50, p99), with
    the metric as title and its unit on the y-axis."""
    names = [n for n, ys in series.items() if any(y is not None for y in ys)]
    if not names or not labels:
        return None
    fig, axes = _new(max(6.0, 1.2 * len(labels) + 2), 4.0)
    ax = axes[0][0]
    width = 0.8 / len(names)
    pos = np.arange(len(labels))
    for i, name in enumerate(names):
        y = [np.nan if v is None else v for v in series[name]]
        ax.bar(pos + i * width - 0.4 + width / 2, y, width, label=name)
    ax.set_xticks(pos)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize="small")
    if title:
        ax.set_title(title)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def compare_cdf(
    series: Mapping[str, Sequence[float] | np.ndarray | pd.Series],
    estimates: Mapping[str, Mapping[str, float]],
    xlabel: str,
    title: str,
    path: Path,
) -> Path | None:
    """One CDF per run (``series``: run label -> values), overlaid. A run's analytic
    estimate (``estimates[label]``) is drawn in the run's colour beside its measurement:
    ``{"p50": x, "p99": y}`` as diamonds at those quantiles, ``{"value": x}`` (a single
    predicted number) as a dotted vertical line. A log x-axis when values span more than
    a factor of 100."""
    fig, axes = _new(8.0, 4.5)
    ax = axes[0][0]
    drawn, lows, highs = False, [], []
    for label, values in series.items():
        if not _cdf(ax, values, label):
            continue
        drawn = True
        colour = ax.get_lines()[-1].get_color()
        arr = np.asarray(values, dtype=float)
        arr = arr[np.isfinite(arr)]
        lows.append(arr.min())
        highs.append(arr.max())
        est = estimates.get(label) or {}
        quantiles = [(est[q], float(q[1:]) / 100) for q in ("p50", "p99") if est.get(q) is not None]
        if quantiles:
            xs, ys = zip(*quantiles, strict=True)
            ax.plot(
                xs,
                ys,
                "D",
                color=colour,
                markerfacecolor="none",
                markersize=7,
                label=f"{label}: estimate p50/p99",
            )
            lows.append(min(xs))
            highs.append(max(xs))
        if est.get("value") is not None:
            ax.axvline(
                est["value"], color=colour, linestyle=":", linewidth=1.5, label=f"{label}: estimate"
            )
            lows.append(est["value"])
            highs.append(est["value"])
    if not drawn:
        return None
    lo, hi = min(lows), max(highs)
    if lo > 0 and hi / lo > 100:
        ax.set_xscale("log")
    _finish_cdf(ax, xlabel, title)
    return _save(fig, path)

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

__all__ = [
    "compare_bars",
    "compare_cdf",
    "compare_vs_sweep",
    "fct_cdf",
    "link_heatmap",
    "queue_timeseries",
    "serving_cdf",
]

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
    """CDFs of TTFT (and KV transfer time) and of the inter-token latency."""
    if requests is None or not len(requests):
        return None
    fig, axes = _new(10.0, 4.0, 1, 2)
    left, right = axes[0]
    drawn = _cdf(left, requests["ttft_ms"], "TTFT")
    if "kv_transfer_ms" in requests:
        _cdf(left, requests["kv_transfer_ms"], "KV transfer")
    _finish_cdf(left, "ms", "time to first token")
    if tokens is not None and len(tokens) and "itl_ms" in tokens:
        drawn |= _cdf(right, tokens["itl_ms"], "ITL")
    if "tpot_ms" in requests:
        drawn |= _cdf(right, requests["tpot_ms"], "TPOT")
    _finish_cdf(right, "ms", "inter-token latency")
    return _save(fig, path) if drawn else None


def queue_timeseries(queues: pd.DataFrame | None, path: Path, n: int = 5) -> Path | None:
    """Backlog (packets) over time of the ``n`` hottest switch egress ports."""
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
            label=f"{row.node}:{row.port} (mean {row.mean_pkts:.1f})",
        )
    ax.set_xlabel("time since first sample (s)")
    ax.set_ylabel("backlog (packets)")
    ax.set_title(f"egress queue occupancy, {len(hot)} hottest ports")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper right")
    return _save(fig, path)


def link_heatmap(
    links: pd.DataFrame | None, path: Path, bins: int = 60, max_ports: int = 40
) -> Path | None:
    """Tx rate per port over time as a heatmap. If the links table has a ``rate_mbps``
    column (the configured emulated rate) the colour is utilisation (0–1), otherwise the
    absolute emulated rate in Mbit/s. At most ``max_ports`` rows (the busiest)."""
    if links is None or not len(links):
        return None
    rates = link_rates(links)
    rates = rates[np.isfinite(rates["tx_mbps"].astype(float))]
    if not len(rates):
        return None
    utilisation = "rate_mbps" in links and links["rate_mbps"].notna().any()
    if utilisation:
        cfg = links.groupby(["node", "port"], sort=True)["rate_mbps"].max()
        rates = rates.join(cfg, on=["node", "port"])
        rates["value"] = rates["tx_mbps"] / rates["rate_mbps"]
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
    vmax = 1.0 if utilisation else float(np.nanmax(grid)) or 1.0
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
    ax.set_yticklabels([f"{n}:{p}" for n, p in keys], fontsize="x-small")
    ax.set_xlabel("time since first sample (s)")
    what = "utilisation (tx / configured rate)" if utilisation else "tx rate (emulated Mbit/s)"
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
    labels: Sequence[str], series: Mapping[str, Sequence[float | None]], path: Path
) -> Path | None:
    """Grouped bars: one group per run label, one bar per series (e.g. p50, p99)."""
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

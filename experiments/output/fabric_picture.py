"""A picture of the fabric: every link coloured by its load, the hottest queues marked.

    load = port_utilisation(run.links, plots.port_capacity_mbps(fabric, scale))
    hot = hot_queues(run.queues)                       # the 3 hottest egress queues
    fig = fabric_figure(fabric, load, hot)             # a matplotlib Figure, no files

A port's load is the p95 over the sampling intervals of its tx rate in % of its configured
rate (the p95 rather than the peak: one short interval reads above 100 % from sampling
jitter alone). A link's load is the higher of its two directions; a link whose ports were
never sampled is drawn grey. Switches and hosts are laid out by tier (hosts at the bottom,
NVLink switches under their GPUs, storage nodes on top); a direct fabric (dragonfly,
hyperx: routers linked to routers) is drawn as a ring of routers, hosts outside.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from experiments.analysis.metrics import hottest_ports
from experiments.analysis.summary import link_rates
from topologies import Fabric, Link
from topologies.fabric import TIER

__all__ = [
    "COLORBAR_LABEL",
    "HotQueue",
    "fabric_figure",
    "hot_queues",
    "layout",
    "link_load",
    "port_utilisation",
    "write_fabric_picture",
]

Port = tuple[str, int]
COLORBAR_LABEL = "utilisation, % of capacity (p95)"
CMAP = "viridis"  # as the link heatmap, so one colour reads as one load in both
UNSAMPLED = "#c8c8c8"
MARK = "#d62728"


@dataclass(frozen=True)
class HotQueue:
    """A switch egress queue (``node``'s ``port``) and the most packets it held."""

    node: str
    port: int
    peak_pkts: float


def port_utilisation(
    links: pd.DataFrame | None, capacity_mbps: Mapping[Port, float], quantile: float = 0.95
) -> dict[Port, float]:
    """Per switch port, the ``quantile`` of its per-interval tx rate in % of its
    configured rate (``plots.port_capacity_mbps``); ports of unknown rate are left out."""
    if links is None or not len(links) or not capacity_mbps:
        return {}
    rates = link_rates(links)
    out = {}
    for (node, port), g in rates.groupby(["node", "port"], sort=True):
        key = _key(node, port)
        if key is None:
            continue
        mbps = g["tx_mbps"].to_numpy(dtype=float)
        mbps = mbps[np.isfinite(mbps)]
        if capacity_mbps.get(key) and mbps.size:
            out[key] = 100.0 * float(np.quantile(mbps, quantile)) / capacity_mbps[key]
    return out


def hot_queues(queues: pd.DataFrame | None, n: int = 3) -> list[HotQueue]:
    """The ``n`` hottest egress queues as the report's table ranks them (time-weighted
    mean backlog, then peak), each with its peak; queues that never held a packet are
    not hot."""
    if queues is None or not len(queues):
        return []
    hot = hottest_ports(queues, n)
    keys = [(_key(r.node, r.port), float(r.max_pkts)) for r in hot.itertuples(index=False)]
    return [HotQueue(*key, peak) for key, peak in keys if key is not None and peak > 0]


def _key(node: object, port: object) -> Port | None:
    """A table's (node, port) as the fabric numbers ports; ``None`` for a port named
    otherwise (``eth1``), which no link of the fabric can be."""
    try:
        return (str(node), int(port))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def link_load(link: Link, utilisation: Mapping[Port, float]) -> float | None:
    """The link's load: the busier of its two directions (``None``: neither sampled)."""
    loads = [utilisation.get((end, link.port_of(end))) for end in link.ends()]
    known = [v for v in loads if v is not None]
    return max(known) if known else None


def _direct(fabric: Fabric) -> bool:
    """Whether switches link to switches of their own tier (a dragonfly or hyperx)."""
    tier = {n.name: TIER[n.kind] for n in fabric.nodes}
    kinds = {n.name: n.kind for n in fabric.nodes}
    return any(
        tier[lk.a] == tier[lk.b] and kinds[lk.a] not in ("gpu", "storage") for lk in fabric.links
    )


def _level(kind: str, top: int) -> int:
    if kind == "nvlink":
        return -1  # the scale-up domain under its GPUs
    if kind == "storage":
        return top + 1
    return TIER[kind]


def layout(fabric: Fabric) -> dict[str, tuple[float, float]]:
    """Where each node is drawn: by tier for a tree (each row ordered under the row above
    it, by the mean place of its neighbours there), a ring for a direct fabric."""
    return _ring(fabric) if _direct(fabric) else _layers(fabric)


def _layers(fabric: Fabric) -> dict[str, tuple[float, float]]:
    top = max(TIER[n.kind] for n in fabric.switches) if fabric.switches else 1
    rows: dict[int, list[str]] = {}
    for node in fabric.nodes:
        rows.setdefault(_level(node.kind, top), []).append(node.name)
    width = max(len(r) for r in rows.values())
    number = {n.name: n.number for n in fabric.nodes}
    pos: dict[str, tuple[float, float]] = {}
    for level in sorted(rows, key=lambda lv: (lv == top + 1, -lv)):  # storage last
        order = {name: _order(fabric, name, pos, number[name]) for name in rows[level]}
        names = sorted(rows[level], key=order.__getitem__)
        xs = np.linspace(0, width - 1, len(names)) if len(names) > 1 else [(width - 1) / 2]
        pos |= {name: (float(x), float(level)) for name, x in zip(names, xs, strict=True)}
    return pos


def _order(
    fabric: Fabric, name: str, pos: Mapping[str, tuple[float, float]], number: int
) -> tuple[float, ...]:
    """A node's place in its row: a GPU by its server (its NVLink domain), anything else
    under the mean place of its neighbours already drawn."""
    node = fabric.node(name)
    if node.is_host and node.server is not None:
        return (node.server, node.index or 0, number)
    placed = [pos[lk.other(name)][0] for lk in fabric.links_of(name) if lk.other(name) in pos]
    return (float(np.mean(placed)) if placed else 0.0, 0, number)


def _ring(fabric: Fabric) -> dict[str, tuple[float, float]]:
    routers = sorted(fabric.switches, key=lambda n: (n.pod or 0, n.index or 0, n.number))
    angle = {r.name: 2 * np.pi * i / len(routers) for i, r in enumerate(routers)}
    pos = {name: (float(np.cos(a)), float(np.sin(a))) for name, a in angle.items()}
    step = 2 * np.pi / max(len(routers), 1)
    for router in routers:
        hosts = [lk.other(router.name) for lk in fabric.links_of(router.name)]
        hosts = [h for h in hosts if fabric.node(h).is_host]
        for i, host in enumerate(hosts):
            a = angle[router.name] + step * 0.6 * ((i + 0.5) / len(hosts) - 0.5)
            pos[host] = (1.35 * float(np.cos(a)), 1.35 * float(np.sin(a)))
    return pos


def fabric_figure(
    fabric: Fabric,
    utilisation: Mapping[Port, float],
    hot: Sequence[HotQueue] = (),
    names: Mapping[Port, str] | None = None,
) -> Figure:
    """The fabric with one line per link, coloured by :func:`link_load` on a 0–100 %
    scale (a colorbar says so; grey: not sampled), and each of ``hot`` marked at its end
    of its link with its peak in packets. Each link's line has ``gid`` ``"a-b"``."""
    pos = layout(fabric)
    xs = [x for x, _ in pos.values()]
    ys = [y for _, y in pos.values()]
    span_x, span_y = max(xs) - min(xs), max(ys) - min(ys)
    width = float(np.clip(2.5 + 0.35 * span_x, 8.0, 18.0))
    height = float(np.clip(width * (span_y + 1) / (span_x + 1), 4.0, 10.0))
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    cmap, norm = colormaps[CMAP], Normalize(vmin=0.0, vmax=100.0, clip=True)
    loads = {lk: link_load(lk, utilisation) for lk in fabric.links}
    for lk in sorted(fabric.links, key=lambda k: -1.0 if loads[k] is None else loads[k]):
        load = loads[lk]
        (x0, y0), (x1, y1) = pos[lk.a], pos[lk.b]
        ax.add_line(
            Line2D(
                [x0, x1],
                [y0, y1],
                color=UNSAMPLED if load is None else cmap(norm(load)),
                linewidth=0.8 if load is None else 1.2 + 2.8 * min(load, 100.0) / 100.0,
                linestyle=":" if lk.kind == "nvlink" else "-",
                gid=f"{lk.a}-{lk.b}",
                zorder=1,
            )
        )
    _draw_nodes(ax, fabric, pos)
    said = [_mark(ax, fabric, pos, queue, rank, names or {}) for rank, queue in enumerate(hot)]
    said = [line for line in said if line]
    if said:
        ax.text(
            0.0,
            -0.02,
            "hottest egress queues:\n" + "\n".join(said),
            transform=ax.transAxes,
            va="top",
            fontsize=8,
            color=MARK,
        )
    ax.autoscale_view()
    ax.margins(0.06, 0.12)
    ax.set_axis_off()
    marked = f"; the {len(hot)} hottest egress queues in red" if hot else ""
    ax.set_title(f"{fabric.kind}: links by load{marked}")
    fig.colorbar(
        ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=COLORBAR_LABEL, extend="max", shrink=0.8
    )
    if any(v is None for v in loads.values()):
        ax.legend(
            handles=[Line2D([], [], color=UNSAMPLED, label="not sampled")],
            loc="lower right",
            fontsize="small",
        )
    return fig


def _draw_nodes(ax, fabric: Fabric, pos: Mapping[str, tuple[float, float]]) -> None:
    label_hosts = len(fabric.hosts) <= 24
    for node in fabric.nodes:
        x, y = pos[node.name]
        if node.is_host:
            ax.plot([x], [y], "o", color="#555555", markersize=4, zorder=2)
            if label_hosts:
                ax.text(x, y - 0.1, node.name, ha="center", va="top", fontsize=6, rotation=90)
            continue
        ax.plot([x], [y], "s", color="#1f3b5c", markersize=9, zorder=2)
        ax.text(x, y + 0.12, node.name, ha="center", va="bottom", fontsize=7, zorder=3)


def _mark(ax, fabric: Fabric, pos, queue: HotQueue, rank: int, names) -> str | None:
    """A numbered red dot where the queue sits (its node's end of the link); returns the
    line that names it with its peak."""
    neighbour = next(
        (
            lk.other(queue.node)
            for lk in fabric.links_of(queue.node)
            if lk.port_of(queue.node) == queue.port
        ),
        None,
    )
    if neighbour is None:
        return None
    (x0, y0), (x1, y1) = pos[queue.node], pos[neighbour]
    x, y = x0 + 0.3 * (x1 - x0), y0 + 0.3 * (y1 - y0)
    ax.plot([x], [y], "o", color=MARK, markersize=11, zorder=4)
    ax.text(x, y, str(rank + 1), color="white", fontsize=7, ha="center", va="center", zorder=5)
    return f"{rank + 1}  {names.get((queue.node, queue.port), f'{queue.node}→{neighbour}')}: " + (
        f"peak {queue.peak_pkts:g} pkts"
    )


def write_fabric_picture(
    fabric: Fabric | None,
    links: pd.DataFrame | None,
    queues: pd.DataFrame | None,
    capacity_mbps: Mapping[Port, float],
    path: Path,
    names: Mapping[Port, str] | None = None,
) -> Path | None:
    """The picture as a PNG at ``path``; ``None`` without a fabric or any sampled table."""
    if fabric is None or all(t is None or not len(t) for t in (links, queues)):
        return None
    fig = fabric_figure(fabric, port_utilisation(links, capacity_mbps), hot_queues(queues), names)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None}, bbox_inches="tight")
    return path

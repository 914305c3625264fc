"""When the fabric's delivered rate came back after a fault, from the ``links`` table
(cumulative per-port counters ``t_ns, node, port, tx_bytes``, sampled together once per
tick, 10 Hz in a run).

The delivered rate is the sum of the tx of the switch ports that face a host: each byte
counts once, when a switch hands it to its destination, whatever the path, so a reroute
onto a longer path does not inflate it and bytes lost in the fabric do not count. Without
a fabric, or when no sampled port faces a host, every port counts (``rate_ports``
"all": a byte once per hop). From time zero ``t0`` (:mod:`.faults`):

- ``pre_fault_mbps``: the mean delivered rate over the ticks of the second before ``t0``;
- smoothed rate: the mean over ``WINDOW_NS`` ending at each tick (from the latest tick at
  least that long before it), counted only for windows that start at or after ``t0``;
- ``back_to_rate_ms``: the end of the first such window at ``BACK_FRACTION`` of
  ``pre_fault_mbps`` or more; ``min_mbps_after``: the lowest smoothed rate up to then
  (to the run's end when it never came back, and then ``back_to_rate_ms`` is None);
  ``dip_pct``: how far that is below the pre-fault rate (0 when it is not).

Limits: the first window ends no sooner than ``WINDOW_NS`` plus up to one sampling period
after the fault, so a dip shorter than that shows as a shallow one and ``back_to_rate_ms``
is then an upper bound. The delivered rate is the offered load's as much as the
network's: serving traffic is bursty, and a lull the workload would have had anyway
reads as a dip, a burst as a recovery; compare with a run without the fault. All are
None without a links table or when the pre-fault rate is below ``IDLE_MBPS``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.queues import counter_increase

WINDOW_NS = 200_000_000
BEFORE_NS = 1_000_000_000
BACK_FRACTION = 0.9
IDLE_MBPS = 0.01


def rate_recovery(links: pd.DataFrame | None, t0: int, fabric: Any = None) -> dict[str, Any]:
    """``back_to_rate_ms, pre_fault_mbps, min_mbps_after, dip_pct, rate_ports`` (module
    doc); None where they cannot be measured."""
    keys = ("back_to_rate_ms", "pre_fault_mbps", "min_mbps_after", "dip_pct", "rate_ports")
    out: dict[str, Any] = dict.fromkeys(keys)
    if links is None or links.empty or "tx_bytes" not in links:
        return out
    t, total, ports = delivered_bytes(links, fabric)
    before = np.flatnonzero((t >= t0 - BEFORE_NS) & (t <= t0))
    if before.size < 2:
        return out | {"rate_ports": ports}
    pre = _mbps(t, total, before[0], before[-1])
    out |= {"pre_fault_mbps": round(pre, 3), "rate_ports": ports}
    if pre < IDLE_MBPS:
        return out
    low, back = np.inf, None
    for i in np.flatnonzero(t > t0):
        j = int(np.searchsorted(t, t[i] - WINDOW_NS, side="right")) - 1
        if j < 0 or t[j] < t0:
            continue
        rate = _mbps(t, total, j, i)
        low = min(low, rate)
        if rate >= BACK_FRACTION * pre:
            back = t[i]
            break
    if np.isfinite(low):
        out["min_mbps_after"] = round(low, 3)
        out["dip_pct"] = round(max(0.0, 100 * (1 - low / pre)), 1)
    out["back_to_rate_ms"] = None if back is None else round((back - t0) / 1e6, 3)
    return out


def delivered_bytes(links: pd.DataFrame, fabric: Any = None) -> tuple[np.ndarray, np.ndarray, str]:
    """``(tick instants, bytes delivered from the first tick to each, "host-facing" or
    "all")``: the tx increase of the counted ports (module doc), summed per tick."""
    facing = _host_facing(fabric)
    keys = links["node"].astype(str) + ":" + links["port"].astype(str)
    chosen = links[keys.isin(facing)] if facing else links.iloc[:0]
    which = "host-facing"
    if chosen.empty:
        chosen, which = links, "all"
    ticks, parts = np.unique(chosen["t_ns"].to_numpy(dtype=float)), []
    for _, g in chosen.groupby(["node", "port"], sort=True):
        g = g.sort_values("t_ns", kind="stable")
        if len(g) > 1:
            inc = counter_increase(g["tx_bytes"])
            parts.append(pd.Series(inc, index=g["t_ns"].to_numpy(dtype=float)[1:]))
    per_tick = pd.concat(parts).groupby(level=0).sum() if parts else pd.Series(dtype=float)
    per_tick = per_tick.reindex(ticks, fill_value=0.0)
    return ticks, np.cumsum(per_tick.to_numpy(dtype=float)), which


def _host_facing(fabric: Any) -> set[str]:
    """``"switch:port"`` of every switch port whose peer is a host."""
    if fabric is None:
        return set()
    out = set()
    for lk in fabric.links:
        for sw, peer in ((lk.a, lk.b), (lk.b, lk.a)):
            if not fabric.node(sw).is_host and fabric.node(peer).is_host:
                out.add(f"{sw}:{lk.port_of(sw)}")
    return out


def _mbps(t: np.ndarray, total: np.ndarray, j: int, i: int) -> float:
    """Mean rate (Mbit/s) from tick ``j`` to tick ``i``."""
    return float(total[i] - total[j]) * 8 / (t[i] - t[j]) * 1e3

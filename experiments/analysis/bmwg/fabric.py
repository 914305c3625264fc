"""The draft's fabric-level KPIs from flows, queues and links tables: Fabric_FCT,
buffer and link utilisation, packet drop rate, and the balance of a set of loads
(JFI, MMR, max/min ratio).

Utilisation is of the emulated rate (a link of ``real_gbps`` runs at
``real_gbps × scale`` Gbit/s): pass each port's emulated capacity in Mbit/s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from experiments.analysis.bmwg.latency import draft_stats
from experiments.analysis.bmwg.throughput import KV_KINDS
from experiments.analysis.metrics import counter_increase, jain_fairness, queue_occupancy
from experiments.analysis.metrics.flows import fct_ms, ok_mask
from experiments.analysis.metrics.stats import Stats, finite
from experiments.analysis.summary import link_rates

UTILISATION_COLUMNS = ["node", "port", "mean_pct", "p95_pct", "p99_pct", "peak_pct"]


def fabric_fct(flows: pd.DataFrame, kinds: tuple[str, ...] = KV_KINDS) -> Stats:
    """Fabric_FCT: completion time of each delivered KV flow (ms; failed flows are
    counted by ``Packet_drop_rate`` and the flows summary, not timed)."""
    kv = flows[flows["kind"].isin(kinds) & ok_mask(flows)]
    return draft_stats(fct_ms(kv))


def buffer_utilization(queues: pd.DataFrame, buffer_pkts: float) -> dict[str, object]:
    """Peak backlog of each sampled egress as % of its buffer, and the highest."""
    occ = queue_occupancy(queues, threshold_pkts=0)
    by_port = {
        f"{r.node}:{r.port}": 100.0 * float(r.max_pkts) / buffer_pkts
        for r in occ.itertuples(index=False)
    }
    return {"peak_pct": max(by_port.values(), default=None), "by_port": by_port}


def link_utilization(
    links: pd.DataFrame, capacity_mbps: float | Mapping[str, float]
) -> pd.DataFrame:
    """Per (node, port): mean, P95, P99 and peak of the sampled tx rate as % of its
    capacity (one emulated Mbit/s for all, or ``"node:port"`` → Mbit/s; ports without
    one are left out). The mean is time-weighted."""
    rows = []
    for (node, port), g in link_rates(links).groupby(["node", "port"], sort=True):
        key = f"{node}:{port}"
        cap = capacity_mbps if not isinstance(capacity_mbps, Mapping) else capacity_mbps.get(key)
        rate = g["tx_mbps"].to_numpy(dtype=float)
        dt = g["dt_s"].to_numpy(dtype=float)
        keep = np.isfinite(rate)
        if not cap or not keep.any():
            continue
        pct = 100.0 * rate[keep] / cap
        mean = float(np.average(pct, weights=dt[keep])) if dt[keep].sum() > 0 else float(pct.mean())
        p95, p99 = (float(np.percentile(pct, q)) for q in (95, 99))
        rows.append([str(node), str(port), mean, p95, p99, float(pct.max())])
    return pd.DataFrame(rows, columns=UTILISATION_COLUMNS)


def drop_rate_ppm(links: pd.DataFrame) -> float | None:
    """Packet_drop_rate: egress drops per million packets offered (sent + dropped),
    over every port of the links table; None when no packet was offered."""
    sent = dropped = 0.0
    for _, g in links.groupby(["node", "port"], sort=True):
        g = g.sort_values("t_ns", kind="stable")
        if len(g) > 1:
            sent += float(counter_increase(g["tx_packets"]).sum())
            dropped += float(counter_increase(g["tx_dropped"]).sum())
    offered = sent + dropped
    return 1e6 * dropped / offered if offered > 0 else None


def jfi(values: Iterable[float]) -> float | None:
    """Jain's fairness index, (Σx)² ÷ (n·Σx²): 1 fair, 1/n one party has it all."""
    return jain_fairness(values)


def mmr(values: Iterable[float]) -> float | None:
    """MMR as [TERMINOLOGY] defines it: the largest load ÷ the mean load (1.0 is a
    perfect ECMP balance). None without a positive mean."""
    arr = finite(values)
    return float(arr.max() / arr.mean()) if arr.size and arr.mean() > 0 else None


def max_min_ratio(values: Iterable[float]) -> float | None:
    """The largest ÷ the smallest (9.3, 9.4); None when the smallest is 0 (unbounded)."""
    arr = finite(values)
    return float(arr.max() / arr.min()) if arr.size and arr.min() > 0 else None


def peak_concurrent_flows(flows: pd.DataFrame, kinds: tuple[str, ...] = KV_KINDS) -> int:
    """The most flows of ``kinds`` in flight at one instant (6.3, 11.2)."""
    kv = flows[flows["kind"].isin(kinds)].dropna(subset=["t_start_ns", "t_end_ns"])
    events = sorted(
        [(float(t), 1) for t in kv["t_start_ns"]] + [(float(t), -1) for t in kv["t_end_ns"]]
    )
    running = peak = 0
    for _, step in events:  # an end before a start at the same instant: -1 sorts first
        running += step
        peak = max(peak, running)
    return peak

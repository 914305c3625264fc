"""Switch egress queues from queues.parquet (``t_ns, node, port, backlog_pkts,
backlog_bytes, drops, sent_bytes``; drops and sent_bytes are cumulative counters).

Samplers do not tick perfectly evenly, so occupancy is time-weighted: each sample holds
until the next one of the same port (the last sample of a port has no interval and only
counts for ``max``). A port with a single sample, or all samples at one instant, falls back
to equal weights.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

OCCUPANCY_COLUMNS = [
    "node",
    "port",
    "samples",
    "span_s",
    "mean_pkts",
    "p99_pkts",
    "max_pkts",
    "max_bytes",
    "frac_above",
    "drops",
    "sent_bytes",
    "dequeue_mbps",
    "busy_dequeue_mbps",
]


def queue_occupancy(queues: pd.DataFrame, threshold_pkts: float) -> pd.DataFrame:
    """One row per (node, port), columns :data:`OCCUPANCY_COLUMNS`:

    - ``mean_pkts``, ``p99_pkts``: time-weighted mean and 99th percentile of the backlog
      (p99 = the smallest backlog the queue was at or below for 99% of the time);
      ``max_pkts``/``max_bytes`` over all samples;
    - ``frac_above``: fraction of time the backlog was strictly above ``threshold_pkts``;
    - ``drops``, ``sent_bytes``: increase of the cumulative counters over the trace,
      counting a counter that went backwards (qdisc re-created) as restarted from 0;
    - ``dequeue_mbps``: sent bytes × 8 over the sampled span; ``busy_dequeue_mbps``: the
      same over only the intervals where the queue was backlogged at both ends, i.e. the
      link should have run at its configured rate (the fidelity monitor checks it). NaN
      where there is no span or no standing queue (:func:`json_records` turns NaN to None).
    """
    rows = []
    for (node, port), g in queues.groupby(["node", "port"], sort=True):
        rows.append([node, port, *_port_row(g.sort_values("t_ns", kind="stable"), threshold_pkts)])
    return pd.DataFrame(rows, columns=OCCUPANCY_COLUMNS)


def hottest_ports(queues: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The ``n`` ports with the highest time-weighted mean backlog (ties broken by max
    backlog, then drops): where a report should look first. Rows of
    :func:`queue_occupancy` with ``frac_above`` = fraction of time non-empty."""
    occ = queue_occupancy(queues, threshold_pkts=0)
    occ = occ.sort_values(
        ["mean_pkts", "max_pkts", "drops", "node", "port"],
        ascending=[False, False, False, True, True],
        kind="stable",
    )
    return occ.head(n).reset_index(drop=True)


def counter_increase(values: np.ndarray | pd.Series) -> np.ndarray:
    """Per-interval increase of a cumulative counter; a decrease means the counter restarted
    from 0, so that interval's increase is the new value (as Prometheus' ``increase``)."""
    c = np.asarray(values, dtype=float)
    d = np.diff(c)
    return np.where(d < 0, c[1:], d)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Smallest value v such that the weight of samples <= v is at least q of the total."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    idx = int(np.searchsorted(cum, q * cum[-1] * (1 - 1e-12), side="left"))
    return float(values[order][min(idx, len(values) - 1)])


def _port_row(g: pd.DataFrame, threshold: float) -> list[object]:
    t = g["t_ns"].to_numpy(dtype=float)
    backlog = g["backlog_pkts"].to_numpy(dtype=float)
    dt = np.diff(t)
    span_ns = float(t[-1] - t[0])
    weights = np.append(dt, 0.0) if span_ns > 0 else np.ones(len(t))
    total = float(weights.sum())
    sent = counter_increase(g["sent_bytes"])
    busy = (backlog[:-1] > 0) & (backlog[1:] > 0)
    busy_ns = float(dt[busy].sum())
    return [
        len(g),
        span_ns / 1e9,
        float(np.dot(weights, backlog) / total),
        weighted_quantile(backlog, weights, 0.99),
        float(backlog.max()),
        float(g["backlog_bytes"].max()),
        float(weights[backlog > threshold].sum() / total),
        int(counter_increase(g["drops"]).sum()),
        int(sent.sum()),
        _mbps(float(sent.sum()), span_ns),
        _mbps(float(sent[busy].sum()), busy_ns),
    ]


def _mbps(n_bytes: float, ns: float) -> float | None:
    return n_bytes * 8 / (ns / 1e9) / 1e6 if ns > 0 else None

"""Hop counts of serving requests: how many switch-to-switch hops each request's KV
crossed (prefill host to decode host, first GPUs of the instances, on the fabric's
fewest-hop routes: the ``minimal`` policy's on every kind but a dragonfly, where a
minimal route may be one hop longer; a run's install event has the policy's own
``path_hops``), and its latencies grouped by that count.

``request_hops`` returns NaN where no switch is crossed (a colocated request, two GPUs
of one server) or a host is missing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.stats import latency_stats, value_stats
from topologies import Fabric


def request_hops(requests: pd.DataFrame, fabric: Fabric) -> pd.Series:
    """Switch-to-switch hops from each request's prefill host to its decode host."""
    names = {h.name for h in fabric.hosts}
    cache: dict[tuple[str, str], float] = {}

    def hops(src: Any, dst: Any) -> float:
        if src not in names or dst not in names or src == dst or fabric.same_server(src, dst):
            return np.nan
        if (src, dst) not in cache:
            cache[(src, dst)] = float(len(fabric.shortest_paths(src, dst)[0]) - 3)
        return cache[(src, dst)]

    pairs = zip(requests["prefill_host"], requests["decode_host"], strict=True)
    return pd.Series([hops(s, d) for s, d in pairs], index=requests.index, dtype=float)


def hop_metrics(requests: pd.DataFrame, fabric: Fabric) -> dict[str, Any] | None:
    """``{hops: stats, by_hops: [{hops, requests, ttft_ms, kv_transfer_ms}]}`` over the
    requests whose KV crossed a switch, or None when none did (or the table names no
    hosts)."""
    if not {"prefill_host", "decode_host"} <= set(requests.columns):
        return None
    hops = request_hops(requests, fabric)
    crossed = requests.assign(hops=hops)[hops.notna()]
    if crossed.empty:
        return None
    return {
        "hops": value_stats(crossed["hops"].to_numpy(dtype=float)),
        "by_hops": [
            {
                "hops": int(n),
                "requests": len(group),
                "ttft_ms": latency_stats(group["ttft_ms"]),
                "kv_transfer_ms": latency_stats(group["kv_transfer_ms"]),
            }
            for n, group in crossed.groupby("hops")
        ],
    }

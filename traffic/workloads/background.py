"""Background traffic: Poisson flow arrivals at a target load, published flow sizes.

The load model of DCTCP/pFabric/HPCC evaluations: flows arrive as a Poisson
process, each between a uniformly random pair of distinct hosts, with a size
from an empirical flow-size CDF (``traffic.flowsizes``). The arrival rate is
chosen so that each host's link carries ``load`` of its rate on average:

    rate (flows/s) = load × hosts × host_gbps × 1e9 / 8 / (k × mean flow bytes)

``flow_size_scale`` k aggregates flows: every size is multiplied by k and the
arrival rate divided by k, so the offered load and the shape of the size
distribution are kept while the number of messages falls k-fold. What it cannot
keep: the count of tiny flows and each flow's own slow start (k flows become one).
Compare runs across k by FCT slowdown (FCT ÷ the flow's ideal FCT), not raw FCT.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..flowsizes import FLOW_SIZE_CDFS, mean_flow_bytes, sample_flow_bytes
from .schedule import WorkloadError, build_schedule, check_hosts, check_positive, ms_to_ns, rng_from


def background(
    hosts: Sequence[str],
    load: float,
    host_gbps: float,
    duration_s: float,
    *,
    distribution: str = "web_search",
    seed: int | np.random.Generator = 0,
    start_ms: float = 0.0,
    tenant: str = "background",
    dscp: int = 0,
    flow_size_scale: float = 1.0,
    first_flow_id: int = 0,
) -> pd.DataFrame:
    """Background flows of kind ``background`` over ``duration_s``, sorted by start.

    - ``hosts``: hosts that send and receive (at least 2); src != dst.
    - ``load``: offered load as a fraction of each host's link rate, in (0, 1].
    - ``host_gbps``: the REAL host link rate in Gbit/s (before scaling).
    - ``duration_s``: arrivals fall in [start, start + duration_s).
    - ``distribution``: ``web_search`` (default) or ``data_mining``.
    - ``seed``: seed or ``numpy.random.Generator`` (arrivals, pairs, sizes).
    - ``flow_size_scale``: k ≥ 1: flow sizes × k and arrivals ÷ k, which keeps the
      offered load and the size distribution's shape with k times fewer flows.
    - ``start_ms``, ``tenant`` (default "background"), ``dscp``, ``first_flow_id``.
    """
    rng = rng_from(seed)
    hosts = list(hosts)
    if len(hosts) < 2:
        raise WorkloadError(f"background needs at least 2 hosts, got {hosts}")
    check_hosts("hosts", hosts, None)
    check_positive("load", load)
    if load > 1:
        raise WorkloadError(f"load={load}; allowed: (0, 1] (a fraction of the host link rate)")
    check_positive("host_gbps", host_gbps)
    check_positive("duration_s", duration_s)
    if distribution not in FLOW_SIZE_CDFS:
        raise WorkloadError(f"distribution={distribution!r}; allowed: {', '.join(FLOW_SIZE_CDFS)}")
    if start_ms < 0:
        raise WorkloadError(f"start_ms must be >= 0, got {start_ms}")
    if not flow_size_scale >= 1:
        raise WorkloadError(f"flow_size_scale={flow_size_scale!r}; allowed: a number >= 1")
    k = float(flow_size_scale)
    rate = load * len(hosts) * host_gbps * 1e9 / 8 / (k * mean_flow_bytes(distribution))
    # A Poisson process on [0, T): a Poisson count, then uniform sorted instants.
    count = int(rng.poisson(rate * duration_s))
    t_ns = np.sort(rng.random(count)) * duration_s * 1e9
    src = rng.integers(len(hosts), size=count)
    dst = rng.integers(len(hosts) - 1, size=count)
    dst = dst + (dst >= src)  # uniform over the other hosts
    names = np.asarray(hosts, dtype=object)
    return build_schedule(
        {
            "kind": ["background"] * count,
            "tenant": [tenant] * count,
            "src": names[src],
            "dst": names[dst],
            "bytes": np.rint(sample_flow_bytes(distribution, rng, count) * k).astype(np.int64),
            "t_sched_ns": ms_to_ns(start_ms) + t_ns.astype(np.int64),
            "dscp": np.full(count, dscp),
        },
        first_flow_id,
    )

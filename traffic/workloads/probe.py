"""Probes: small UDP messages at a fixed rate, for one-way delay of a path under load.

Each probe is one datagram carrying the header's ``t_send_ns``; the receiver's
timestamp minus it is the one-way delay (every agent keeps the coordinator's clock,
``traffic.agents.timebase``: exact on one machine, within the measured offset's
uncertainty across machines). A
probe measures, it is not load: its size is never scaled (``scaled`` false).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..header import HEADER_LEN
from .schedule import WorkloadError, build_schedule, check_hosts, check_positive, ms_to_ns

# Largest UDP payload that fits one 1500-byte-MTU IPv4 packet: 1500 - 20 - 8.
MAX_PROBE_BYTES = 1472


def probe(
    pairs: Sequence[tuple[str, str]],
    rate_hz: float,
    size_bytes: int,
    duration_s: float,
    *,
    hosts: Sequence[str] | None = None,
    start_ms: float = 0.0,
    tenant: str = "probe",
    dscp: int = 0,
    first_flow_id: int = 0,
) -> pd.DataFrame:
    """``floor(duration_s × rate_hz)`` probes per (src, dst) pair, kind ``probe``.

    - ``pairs``: (src, dst) host pairs to measure; src != dst.
    - ``rate_hz``: probes per second per pair; probe k leaves at
      ``start_ms + k / rate_hz`` (all pairs in step, no randomness).
    - ``size_bytes``: UDP payload, from the header size (44) to 1472 so a
      probe is one packet.
    - ``duration_s``: how long to probe.
    - ``hosts``: the fabric's hosts, to reject unknown names (optional).
    - ``start_ms``, ``tenant`` (default "probe"), ``dscp``, ``first_flow_id``: as in
      the other generators.

    ``chunk`` is the probe's sequence number within its pair (loss shows as gaps).
    """
    check_positive("rate_hz", rate_hz)
    check_positive("duration_s", duration_s)
    check_positive("size_bytes", size_bytes, integer=True)
    if not HEADER_LEN <= size_bytes <= MAX_PROBE_BYTES:
        raise WorkloadError(
            f"size_bytes={size_bytes}; allowed {HEADER_LEN}..{MAX_PROBE_BYTES} (one packet)"
        )
    if start_ms < 0:
        raise WorkloadError(f"start_ms must be >= 0, got {start_ms}")
    pairs = [tuple(p) for p in pairs]
    if not pairs:
        raise WorkloadError("pairs is empty; give at least one (src, dst) pair")
    for src, dst in pairs:
        if src == dst:
            raise WorkloadError(f"probe pair ({src!r}, {dst!r}) sends to itself; src != dst")
        check_hosts("pairs", [src, dst], hosts)
    count = int(np.floor(duration_s * rate_hz + 1e-9))
    if count == 0:
        raise WorkloadError(f"duration_s={duration_s} at rate_hz={rate_hz} gives no probe")
    times = ms_to_ns(start_ms) + np.round(np.arange(count) * 1e9 / rate_hz).astype(np.int64)
    n = count * len(pairs)
    return build_schedule(
        {
            "kind": ["probe"] * n,
            "tenant": [tenant] * n,
            "src": [s for _ in range(count) for s, _d in pairs],
            "dst": [d for _ in range(count) for _s, d in pairs],
            "bytes": np.full(n, size_bytes),
            "t_sched_ns": np.repeat(times, len(pairs)),
            "chunk": np.repeat(np.arange(count), len(pairs)),
            "dscp": np.full(n, dscp),
            "proto": ["udp"] * n,
            "scaled": np.zeros(n, dtype=bool),
        },
        first_flow_id,
    )

"""What a message's completion time is made of here: the real fabric's wire time, what
the emulation's coarse packets add, and the emulator's own cost (pure).

A message of ``b`` real bytes crosses a path of hops at real rates ``r_i``. Cut into
packets of ``p`` bytes and store-and-forwarded, it takes (``transfer_ms``)::

    Σ_i min(b, p)·8 / r_i  +  (b − min(b, p))·8 / min_i r_i

its first packet serialised on every hop, the rest paced by the slowest. Three parts of
a measured ``fct_ms`` (every time real-equivalent, like the flows table's):

- ``wire_ms``: the real fabric's time: ``p`` is one real frame (``Scale.frame_bytes``)
  and ``b`` the message with its frames' headers (``on_wire``);
- ``grain_ms``: what the emulation's packets add: at scale ``s`` one emulated frame
  stands for ``frame ÷ s`` real bytes (``Scale.real_bytes_per_packet``), each
  store-and-forwarded whole on every hop; a ``per_flow`` connection's handshake (one
  small frame each way before the first byte: a TCP stand-in's cost, an RDMA queue pair
  has none) is counted here too. Both are modelled: a finer ``scale.bandwidth`` shrinks
  them;
- ``excess_ms``: the rest, ``fct − wire − grain``: what a model of an idle path does
  not have. Under load that is queueing and retransmission, the fabric's; on an idle
  path, the emulator's own cost (the kernel's stacks, the agents' loops, OVS's
  userspace forwarding), which is wall time, so a larger time dilation divides it. The
  least-delayed tenth of a run's messages (``excess_p10_ms``) met the least queueing:
  where even their excess is a large share of the latency, the latency is the
  emulator's, not the fabric's.
- ``burst_ms``: the most the shapers' bursts can take off the model on an idle path.
  Each HTB class lets ``shaping.burst_bytes`` (one wall millisecond at its rate, at
  least two frames) through at once, unpaced: real-equivalent, ``1/d`` ms of the hop's
  rate. On each hop the message's first ``min(b, burst)`` bytes may pass so, so an
  excess down to ``−burst_ms`` is the bursts, not a faster fabric: at ``d = 1`` a
  message under a millisecond of wire time can beat its own serialisation.

The path is the fewest-hop one between the two hosts (``Fabric.shortest_paths``; of
equal ones, the fastest, so the excess is never understated by a slow path the flow
may not have taken).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.flows import TCP_IP_HEADER_BYTES
from topologies import Fabric
from topologies.scale import ETHERNET_HEADER_BYTES, Scale
from topologies.shaping import burst_bytes

HANDSHAKE_FRAME_BYTES = 74  # a SYN or SYN-ACK with options: Ethernet, IP, TCP 40
PARTS = ("wire_ms", "grain_ms", "excess_ms", "burst_ms")


def transfer_ms(real_bytes: float, hop_gbps: Sequence[float], packet_bytes: float) -> float:
    """Store-and-forward time of ``real_bytes`` in packets of ``packet_bytes`` over hops
    of ``hop_gbps`` (real Gbit/s), in ms; 0 for an empty path."""
    if not hop_gbps or real_bytes <= 0:
        return 0.0
    first = min(real_bytes, packet_bytes)
    bits_per_ms = [g * 1e6 for g in hop_gbps]
    return sum(first * 8 / r for r in bits_per_ms) + (real_bytes - first) * 8 / min(bits_per_ms)


def path_gbps(fabric: Fabric, src: str, dst: str) -> tuple[float, ...]:
    """The real rates of the fastest fewest-hop path from ``src`` to ``dst`` (empty:
    unreachable or the same host)."""
    best: tuple[float, ...] = ()
    for path in fabric.shortest_paths(src, dst):
        rates = tuple(fabric.link_between(a, b).real_gbps for a, b in pairwise(path))
        if rates and (not best or sum(1 / g for g in rates) < sum(1 / g for g in best)):
            best = rates
    return best


def burst_ms(real_bytes: float, hop_gbps: Sequence[float], scale: Scale, d: float) -> float:
    """What the shapers' bursts can take off ``real_bytes``' modelled time (on the wire,
    in the emulation's packets) on an idle path of hops at ``hop_gbps`` (real Gbit/s), at
    ``scale`` and time dilation ``d``, in ms: on each hop, the burst's worth of the bytes
    the model serialises there (one packet, and on the slowest hop all the rest)."""
    if not hop_gbps or real_bytes <= 0:
        return 0.0
    first = min(real_bytes, scale.real_bytes_per_packet)
    slowest = hop_gbps.index(min(hop_gbps))
    out = 0.0
    for i, g in enumerate(hop_gbps):
        charged = real_bytes if i == slowest else first
        burst_real = burst_bytes(int(g * 1e9 * scale.bandwidth / d), scale.mtu) / scale.bandwidth
        out += min(charged, burst_real) * 8 / (g * 1e6)
    return out


def on_wire(payload: float, mtu: int, per_byte: float = 1.0) -> float:
    """``payload`` bytes with their frames' headers, in frames of ``mtu`` (an MSS of
    payload each, as ``metrics.flows.ideal_fct_ms`` counts): ``per_byte`` is the real
    bytes one of these bytes stands for (1 on the real fabric; 1 ÷ scale in the
    emulation, whose frames carry ``payload × scale`` bytes)."""
    mss = mtu - TCP_IP_HEADER_BYTES
    frames = math.ceil(payload / per_byte / mss)
    return payload + frames * (mtu + ETHERNET_HEADER_BYTES - mss) * per_byte


def fct_parts(flows: pd.DataFrame, fabric: Fabric, scale: Scale, d: float = 1.0) -> pd.DataFrame:
    """Per completed TCP message of ``flows``: ``fct_ms`` and its ``PARTS`` (see the
    module docstring) at time dilation ``d``; ``connection`` per_flow adds the handshake
    to ``grain_ms``. Empty (those columns) when no such message."""
    cols = ["flow_id", "fct_ms", *PARTS]
    if flows is None or flows.empty:
        return pd.DataFrame(columns=cols)
    done = flows[flows["ok"].astype(bool) & (flows["proto"] == "tcp")]
    done = done[done["fct_ms"].notna()]
    if done.empty:
        return pd.DataFrame(columns=cols)
    frame, packet = float(scale.frame_bytes), scale.real_bytes_per_packet
    grain = 1 / scale.bandwidth  # real bytes per emulated byte
    shake = HANDSHAKE_FRAME_BYTES * grain
    paths: dict[tuple[str, str], tuple[float, ...]] = {}
    rows: list[list[Any]] = []
    per_flow = (
        done["connection"].astype(str).eq("per_flow").to_numpy()
        if "connection" in done
        else np.zeros(len(done), dtype=bool)
    )
    for (fid, src, dst, b, fct), fresh in zip(
        done[["flow_id", "src", "dst", "bytes_real", "fct_ms"]].itertuples(index=False),
        per_flow,
        strict=True,
    ):
        key = (str(src), str(dst))
        if key not in paths:
            paths[key] = path_gbps(fabric, *key)
        hops = paths[key]
        wire = transfer_ms(on_wire(float(b), scale.mtu), hops, frame)
        emulated = on_wire(float(b), scale.mtu, grain)  # in the emulation's frames
        modelled = transfer_ms(emulated, hops, packet)
        if fresh:  # SYN there, SYN-ACK back, before the first byte leaves
            modelled += 2 * transfer_ms(shake, hops, packet)
        burst = burst_ms(emulated, hops, scale, d)
        rows.append([fid, float(fct), wire, modelled - wire, float(fct) - modelled, burst])
    return pd.DataFrame(rows, columns=cols)


def parts_p50(parts: pd.DataFrame) -> dict[str, float | None]:
    """The medians of ``fct_ms`` and each part (None without messages): one run's
    ``fct_p50_ms``, ``wire_p50_ms``, ``grain_p50_ms``, ``excess_p50_ms``,
    ``burst_p50_ms``; and ``excess_p10_ms``, the excess of the least-delayed tenth."""
    names = {"fct_ms": "fct_p50_ms", **{p: p.replace("_ms", "_p50_ms") for p in PARTS}}
    if parts.empty:
        return dict.fromkeys([*names.values(), "excess_p10_ms"])
    out = {out: float(parts[col].median()) for col, out in names.items()}
    return out | {"excess_p10_ms": float(parts["excess_ms"].quantile(0.1))}

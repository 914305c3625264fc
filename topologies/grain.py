"""The grain of a fabric's queues: what one emulated packet and one egress buffer stand
for on the real fabric, so a report can say how far its packets are from real ones.

``queue_grain(fabric, scale)`` groups every egress (both ends of every link, as
``shaping.egress_plan`` shapes them) by (link real Gbit/s, buffer in frames at the
MTU) and returns one ``QueueGrain`` per class, slowest first, with:

- ``real_bytes_per_packet``: the real bytes one full emulated frame stands for
  (``Scale.real_bytes_per_packet``; the same in every class);
- ``buffer_pkts``: the pfifo limit, in frames at the MTU (``shaping.queue_frames``);
  ``buffer_bytes`` the emulated bytes it holds; ``buffer_real_us`` the µs of a real
  port at its real rate that it holds
  (``buffer_pkts × real_bytes_per_packet × 8 ÷ (real_gbps × 1e9)``);
- ``bdp_pkts``: the bandwidth-delay product, in packets, of the fabric's base RTT at
  the class's rate. The model has no propagation or switching delay (no netem), so the
  base RTT is serialisation only: one full frame store-and-forwarded over every hop of
  the host pair's fewest-hop path, both ways, for the pair where that takes longest
  (``base_rtt``). Since a frame's serialisation scales with its grain, ``bdp_pkts``
  does not depend on ``scale.bandwidth``: it is ``2 × Σ_hops real_gbps ÷ hop_gbps``;
- ``wall_mbps``: the rate ``tc`` shapes the class to per wall second (``Scale.link_mbps``;
  ``None`` while ``time_dilation`` is ``auto``). Time dilation changes only this: grain,
  buffer, real µs and BDP are per real-equivalent second.

Every time is real-equivalent. Pure data: no root, no Mininet, nothing refused (the
shaping plan refuses what it cannot honour; this describes any scale, even 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from .fabric import Fabric
from .scale import Scale
from .shaping import queue_frames

# TCP's packet-counted constants (Linux): they count packets whatever a packet stands for.
TCP_INITIAL_WINDOW_PKTS = 10
TCP_DUPACK_THRESHOLD = 3


@dataclass(frozen=True)
class BaseRtt:
    """The fabric's base RTT (real-equivalent): serialisation of one full frame over
    every hop of ``path`` (host to host, fewest hops), both ways."""

    path: tuple[str, ...]
    hop_gbps: tuple[float, ...]  # the real rate of each hop of ``path``
    rtt_us: float

    @property
    def hops(self) -> int:
        return len(self.hop_gbps)


@dataclass(frozen=True)
class QueueGrain:
    """One class of egress queues: every egress with this real rate and buffer."""

    real_gbps: float
    buffer_pkts: int  # the pfifo limit, in full frames at the MTU
    frame_bytes: int
    real_bytes_per_packet: float
    directions: tuple[str, ...]  # "from kind→to kind" of the class's egresses, sorted
    ports: tuple[tuple[str, int], ...]  # (node, port) of every egress, sorted
    bdp_pkts: float | None  # None when the fabric has fewer than two hosts
    wall_mbps: float | None  # None while the time dilation is auto

    @property
    def n_ports(self) -> int:
        return len(self.ports)

    @property
    def buffer_bytes(self) -> int:
        """The emulated bytes the buffer holds."""
        return self.buffer_pkts * self.frame_bytes

    @property
    def buffer_real_us(self) -> float:
        """The µs of a real port at its real rate the buffer holds."""
        return self.buffer_pkts * self.real_bytes_per_packet * 8 / (self.real_gbps * 1e3)

    def to_dict(self) -> dict[str, Any]:
        return {
            "real_gbps": self.real_gbps,
            "directions": list(self.directions),
            "ports": self.n_ports,
            "real_bytes_per_packet": self.real_bytes_per_packet,
            "buffer_pkts": self.buffer_pkts,
            "buffer_bytes": self.buffer_bytes,
            "buffer_real_us": self.buffer_real_us,
            "bdp_pkts": self.bdp_pkts,
            "wall_mbps": self.wall_mbps,
        }


def base_rtt(fabric: Fabric, scale: Scale) -> BaseRtt | None:
    """The longest base RTT between two hosts (real-equivalent), or None with fewer than
    two connected hosts: per host pair, the fewest-hop path (the slowest-serialising of
    equal ones; hosts are never transit), one full frame store-and-forwarded over each
    hop, both ways; the pair where that takes longest."""
    switches = {sw.name: _switch_links(fabric, sw.name) for sw in fabric.switches}
    reach: dict[str, _Reach] = {}
    worst: tuple[float, list[str]] | None = None
    for a, b in _host_pairs(fabric):
        options = []  # (hops, seconds per Gbit, first switch, last switch)
        for sa, ga in _attachments(fabric, a, switches):
            if sa not in reach:
                reach[sa] = _reach(sa, switches)
            dist, cost, _ = reach[sa]
            for sb, gb in _attachments(fabric, b, switches):
                if sb in dist:
                    options.append((dist[sb] + 2, 1 / ga + cost[sb] + 1 / gb, sa, sb))
        if not options:
            continue
        fewest = min(o[0] for o in options)
        _, inverse, sa, sb = max(o for o in options if o[0] == fewest)
        if worst is None or inverse > worst[0]:
            worst = (inverse, [a, *_switch_path(reach[sa][2], sb), b])
    if worst is None:
        return None
    path = worst[1]
    hop_gbps = tuple(fabric.link_between(x, y).real_gbps for x, y in pairwise(path))
    serialise_us = scale.real_bytes_per_packet * 8 / 1e3 * worst[0]  # one way
    return BaseRtt(tuple(path), hop_gbps, 2 * serialise_us)


# From one switch over switches only: hops, the largest sum of 1/Gbit/s over fewest-hop
# paths, and the predecessor on that path.
_Reach = tuple[dict[str, int], dict[str, float], dict[str, str | None]]


def _switch_links(fabric: Fabric, name: str) -> list[tuple[str, float]]:
    return [
        (lk.other(name), lk.real_gbps)
        for lk in fabric.links_of(name)
        if not fabric.node(lk.other(name)).is_host
    ]


def _attachments(
    fabric: Fabric, host: str, switches: dict[str, list[tuple[str, float]]]
) -> list[tuple[str, float]]:
    return [
        (lk.other(host), lk.real_gbps) for lk in fabric.links_of(host) if lk.other(host) in switches
    ]


def _reach(source: str, switches: dict[str, list[tuple[str, float]]]) -> _Reach:
    """Breadth first, a layer at a time: a node's cost is final before it is expanded."""
    dist, cost, pred = {source: 0}, {source: 0.0}, {source: None}
    layer = [source]
    while layer:
        following = []
        for u in layer:
            for v, gbps in switches[u]:
                through = cost[u] + 1 / gbps
                if v not in dist:
                    dist[v], cost[v], pred[v] = dist[u] + 1, through, u
                    following.append(v)
                elif dist[v] == dist[u] + 1 and through > cost[v]:
                    cost[v], pred[v] = through, u
        layer = following
    return dist, cost, pred


def _switch_path(pred: dict[str, str | None], last: str) -> list[str]:
    path = [last]
    while (before := pred[path[-1]]) is not None:
        path.append(before)
    return path[::-1]


def _host_pairs(fabric: Fabric) -> Iterable[tuple[str, str]]:
    """One host pair per pair of attachments (the switches and rates a host links to):
    hosts attached alike are alike for the base RTT, so a large fabric stays quick."""
    alike: dict[tuple[tuple[str, float], ...], list[str]] = {}
    for host in fabric.hosts:
        links = fabric.links_of(host.name)
        key = tuple(sorted((lk.other(host.name), lk.real_gbps) for lk in links))
        alike.setdefault(key, []).append(host.name)
    groups = list(alike.values())
    for i, first in enumerate(groups):
        if len(first) > 1:
            yield first[0], first[1]
        for other in groups[i + 1 :]:
            yield first[0], other[0]


def queue_grain(fabric: Fabric, scale: Scale, rtt: BaseRtt | None = None) -> list[QueueGrain]:
    """Every egress of ``fabric`` grouped by (real Gbit/s, buffer in frames at the MTU),
    slowest then shallowest first; ``rtt`` is ``base_rtt(fabric, scale)`` unless given."""
    if rtt is None:
        rtt = base_rtt(fabric, scale)
    classes: dict[tuple[float, int], list[tuple[str, str, int]]] = {}
    for link in fabric.links:
        buffer = queue_frames(link.buffer_pkts, scale.mtu)
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            kinds = f"{fabric.node(node).kind}→{fabric.node(link.other(node)).kind}"
            classes.setdefault((link.real_gbps, buffer), []).append((kinds, node, port))
    rows = []
    for (gbps, buffer), members in sorted(classes.items()):
        rows.append(
            QueueGrain(
                real_gbps=gbps,
                buffer_pkts=buffer,
                frame_bytes=scale.frame_bytes,
                real_bytes_per_packet=scale.real_bytes_per_packet,
                directions=tuple(sorted({k for k, _, _ in members})),
                ports=tuple(sorted((n, p) for _, n, p in members)),
                bdp_pkts=_bdp_pkts(rtt, gbps, scale),
                wall_mbps=None if scale.auto else scale.link_mbps(gbps),
            )
        )
    return rows


def _bdp_pkts(rtt: BaseRtt | None, gbps: float, scale: Scale) -> float | None:
    if rtt is None:
        return None
    return rtt.rtt_us * gbps * 1e3 / (scale.real_bytes_per_packet * 8)


def rtt_sentence(rtt: BaseRtt | None) -> str:
    """How the BDP column was computed, for a report."""
    if rtt is None:
        return "No BDP: the fabric has fewer than two connected hosts."
    rates = " + ".join(f"{g:g}" for g in rtt.hop_gbps)
    return (
        f"BDP: the model has no propagation or switching delay, so the base RTT is "
        f"serialisation only: one full frame over each of the {rtt.hops} hops of the "
        f"longest fewest-hop path ({'–'.join(rtt.path)}; {rates} Gbit/s), both ways: "
        f"{_us(rtt.rtt_us)} µs real-equivalent."
    )


def dilation_sentence(scale: Scale) -> str:
    """What one wall second means at the scale's time dilation."""
    if scale.auto:
        return "Time dilation auto: the planner picks d, and the wall rates with it."
    d = scale.d
    if d == 1:
        return (
            "Time dilation d = 1: one wall second is one second of the real fabric; "
            "links are shaped to real × scale."
        )
    return (
        f"Time dilation d = {d:g}: one wall second is {1 / d:.3g} s of the real fabric "
        f"(a real-equivalent second lasts {d:g} wall seconds); links are shaped to "
        f"real × scale ÷ {d:g}, and grain, buffers and BDP are unchanged by d."
    )


def limits_sentence(scale: Scale) -> str:
    """What the emulation cannot represent at the scale's grain."""
    grain = scale.real_bytes_per_packet
    return (
        "At this grain the emulation is kernel TCP over drop-tail queues, not RDMA over "
        "lossless Ethernet: no PFC pauses and no ECN marking (this kernel has neither "
        "RED nor DCTCP), so a full buffer drops; and TCP's packet-counted constants "
        f"stay counted in packets of {_bytes(grain)} real: an initial window of "
        f"{TCP_INITIAL_WINDOW_PKTS} packets is {_bytes(TCP_INITIAL_WINDOW_PKTS * grain)}, "
        f"fast retransmit waits for {TCP_DUPACK_THRESHOLD} duplicate ACKs "
        f"({_bytes(TCP_DUPACK_THRESHOLD * grain)} past the loss)."
    )


def _us(us: float) -> str:
    return f"{us:,.0f}" if us >= 100 else f"{us:.3g}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.4g} bytes"

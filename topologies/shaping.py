"""Egress shaping as data: emulated rates (``topologies.scale.Scale`` converts real
to emulated), the limits this emulation honours, and the ``tc`` argument lists that
put an HTB class with a bounded pfifo on every egress. Nothing here runs a command.

Netem is deliberately not used (delay, loss and Mininet's ``max_queue_size``
all need it, and many kernels, this project's CI included, lack it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .fabric import Fabric, FabricError, Link
from .scale import DEFAULT_MTU, ETHERNET_HEADER_BYTES, Scale

MTU_BYTES = DEFAULT_MTU + ETHERNET_HEADER_BYTES  # a full frame at the default MTU
# A link slower than this serialises one full packet in more than 120 ms: TCP's
# timers, not the link, would then decide what is measured.
MIN_RATE_BPS = 100_000
# Above this one emulated link would outrun what one OVS userspace hop on a
# small machine switches (about 1.4 Gbit/s measured), so the rate is not honoured.
# KVFABRIC_MAX_RATE_MBPS overrides it (a faster machine, the kernel datapath).
MAX_RATE_BPS = 1_000_000_000
MAX_BUFFER_PKTS = 100_000


@dataclass(frozen=True)
class Egress:
    """One shaped egress: ``node``'s ``port`` sending over ``link``."""

    node: str
    port: int
    rate_bps: int
    buffer_pkts: int  # the link's buffer, in frames of the default MTU (``MTU_BYTES``)
    link: Link
    mtu: int = DEFAULT_MTU

    @property
    def queue_pkts(self) -> int:
        """The pfifo limit: the link's buffer in frames of this MTU."""
        return queue_frames(self.buffer_pkts, self.mtu)


def frame_bytes(mtu: int = DEFAULT_MTU) -> int:
    """A full frame at ``mtu`` as HTB and pfifo count it (Ethernet header included)."""
    return mtu + ETHERNET_HEADER_BYTES


def queue_frames(buffer_pkts: int, mtu: int = DEFAULT_MTU) -> int:
    """A buffer of ``buffer_pkts`` default-MTU frames in frames of ``mtu``: the bytes a
    buffer holds stay the same when jumbo frames are on (at least one frame)."""
    return max(1, round(buffer_pkts * MTU_BYTES / frame_bytes(mtu)))


def max_rate_bps() -> int:
    """The fastest emulated link this machine honours: ``KVFABRIC_MAX_RATE_MBPS``
    if set, else ``MAX_RATE_BPS``."""
    text = os.environ.get("KVFABRIC_MAX_RATE_MBPS")
    if text is None:
        return MAX_RATE_BPS
    try:
        mbps = float(text)
    except ValueError:
        mbps = math.nan
    if not math.isfinite(mbps) or mbps * 1e6 < MIN_RATE_BPS:
        raise FabricError(
            f"KVFABRIC_MAX_RATE_MBPS={text!r} is not allowed: must be a rate in Mbit/s "
            f">= {MIN_RATE_BPS / 1e6:g} (unset it for the default {MAX_RATE_BPS / 1e6:g})"
        )
    return int(mbps * 1e6)


def egress_plan(fabric: Fabric, scale: Scale) -> list[Egress]:
    """Every egress of the fabric (both ends of every link) at ``scale`` (its bandwidth
    and its MTU; a ``Scale`` is checked when it is made).

    Raises FabricError naming the first link whose emulated rate or buffer
    cannot be honoured, and what to change, before anything is built.
    """
    if not isinstance(scale, Scale):
        raise TypeError(f"egress_plan: scale={scale!r} must be a topologies.scale.Scale")
    max_rate = max_rate_bps()
    plan: list[Egress] = []
    for link in fabric.links:
        rate = scale.link_bps(link.real_gbps)
        where = f"link {link.a}-{link.b} ({link.real_gbps:g} Gbit/s at scale {scale.bandwidth:g})"
        if rate < MIN_RATE_BPS:
            raise FabricError(
                f"{where} would run at {rate / 1e6:.3f} Mbit/s, below the "
                f"{MIN_RATE_BPS / 1e6:g} Mbit/s this emulation can shape faithfully: "
                "raise scale.bandwidth or the link rate"
            )
        if rate > max_rate:
            raise FabricError(
                f"{where} would run at {rate / 1e6:.0f} Mbit/s, above the "
                f"{max_rate / 1e6:g} Mbit/s one emulated hop can carry here: "
                "lower scale.bandwidth (or set KVFABRIC_MAX_RATE_MBPS for a faster machine)"
            )
        if not 1 <= link.buffer_pkts <= MAX_BUFFER_PKTS:
            raise FabricError(
                f"{where}: buffer_pkts={link.buffer_pkts} is not allowed: "
                f"must be from 1 to {MAX_BUFFER_PKTS}"
            )
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            plan.append(Egress(node, port, rate, link.buffer_pkts, link, scale.mtu))
    return plan


def burst_bytes(rate_bps: int, mtu: int = DEFAULT_MTU) -> int:
    """HTB burst: one millisecond at the rate, never below two full frames.

    Smaller bursts undershoot the rate (timer granularity); larger ones let
    line-rate bursts past the queue we mean to measure.
    """
    return max(2 * frame_bytes(mtu), rate_bps // 8 // 1000)


def htb_commands(
    dev: str, rate_bps: int, buffer_pkts: int, mtu: int = DEFAULT_MTU
) -> list[list[str]]:
    """``tc`` argument lists (without the leading ``tc``) for one shaped egress:
    root HTB, class 1:1 at ``rate_bps``, pfifo child bounded at ``buffer_pkts``
    default-MTU frames' worth of ``mtu`` frames."""
    burst = str(burst_bytes(rate_bps, mtu))
    return [
        ["qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
        [
            "class",
            "replace",
            "dev",
            dev,
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            f"{rate_bps}bit",
            "ceil",
            f"{rate_bps}bit",
            "burst",
            burst,
            "cburst",
            burst,
            "quantum",
            str(frame_bytes(mtu)),
        ],
        [
            "qdisc",
            "replace",
            "dev",
            dev,
            "parent",
            "1:1",
            "handle",
            "10:",
            "pfifo",
            "limit",
            str(queue_frames(buffer_pkts, mtu)),
        ],
    ]


def batch_text(commands: list[list[str]]) -> str:
    """Argument lists as the text ``tc -batch`` / ``ip -batch`` reads."""
    return "".join(" ".join(args) + "\n" for args in commands)


# Switch-hop throughput of this machine's OVS datapath (Mbit/s summed over every
# hop of every flow). One TCP stream through one userspace switch moves 0.9-1.3
# Gbit/s on the 2-core VM, but a fabric with 3-switch paths sustained about 720
# Mbit/s of switch-hop work before flows fell short of their rates (the
# `capacity` benchmark, which measures yours); KVFABRIC_SWITCH_CAPACITY_MBPS
# overrides it.
DEFAULT_SWITCH_CAPACITY_MBPS = 700.0


def switch_capacity_mbps() -> float:
    return float(os.environ.get("KVFABRIC_SWITCH_CAPACITY_MBPS", DEFAULT_SWITCH_CAPACITY_MBPS))


def switching_demand_mbps(fabric: Fabric, scale: Scale) -> float:
    """Switch-hop work if every host sent at its emulated line rate: the sum of
    host link rates times the mean number of switches a flow crosses."""
    return scale.link_mbps(fabric.host_capacity_gbps()) * fabric.mean_switch_hops()

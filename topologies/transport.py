"""TCP's wall-clock timers, stretched by the time dilation, as ``ip route`` data.

A spec's ``transport`` section gives TCP times in real-equivalent units; the emulation
runs ``d`` times slower (``Scale.d``), and Linux's TCP timers run in wall time, so they
do not dilate by themselves. What this module turns into commands, per host namespace:

- ``rto_min_ms`` (real-equivalent): every route of the host gets ``rto_min <X>ms`` with
  ``X = round(rto_min_ms × d)`` wall milliseconds (half up), from 1 to ``RTO_MAX_MS``
  (the kernel caps every RTO at 120 s, ``TCP_RTO_MAX``); null leaves the kernel's
  200 ms, which is 200 ÷ d ms real-equivalent.
- ``delayed_ack: false``: every route gets ``quickack 1`` (an ACK for every segment, no
  40–200 ms delayed-ACK timer). The delayed-ACK timer cannot be stretched past 200 ms
  (no sysctl; ``TCP_DELACK_MAX_US`` at most 200,000 µs), so at d > 1 turning it off is
  the faithful choice when ACK timing matters.

- ``tail_loss_probe: false``: ``net.ipv4.tcp_early_retrans=0`` in the host's namespace
  (a per-namespace sysctl: measured, a throwaway namespace took 0 while the machine
  kept 3). The tail-loss probe fires after two smoothed RTTs with wall-time floors (at
  least two timer ticks, 8 ms at HZ 250, and the delayed-ACK allowance with one segment
  in flight), so at d > 1 its probes come sooner in real-equivalent time and resend
  segments that were only queued; the kernels of the classic incast studies had none.

``route_commands`` returns ``ip -batch`` argument lists (``route replace <route>
<options>``) for every route ``hostconfig.host_routes`` lists; an empty list when the
settings change nothing, so a fabric built without them is the one built before.
``dilation_warnings`` says, before a run, which of TCP's times do not dilate.

Measured on this kernel (6.18, iproute2 6.1.0, HZ 250), as root in a throwaway
namespace with a veth pair, address 10.0.0.1/8 on d0:

- ``ip route replace 10.0.0.0/8 dev d0 proto kernel scope link src 10.0.0.1 rto_min
  20ms quickack 1`` replaced the connected route (one route left); ``ip route show``:
  ``10.0.0.0/8 dev d0 proto kernel scope link src 10.0.0.1 rto_min lock 20ms quickack
  1``. iproute2 always locks ``rto_min`` (``lock`` is printed; the kernel uses the
  route's value only when locked) and refuses ``rto_min lock 20ms``.
- ``rto_min`` 0ms, 1ms, 5ms, 6ms, 800ms, 120s and 200s were accepted and shown as
  given; 2.5ms was shown as 3ms (whole milliseconds); ``1000us`` was refused
  ("rto_min value is invalid"); 4294967ms and 4294968ms both showed 4294.97s.
- ``quickack 0`` is accepted and shows nothing (an unset metric).
- ``sysctl net.ipv4.tcp_rto_min_us`` reads 200000 inside a new namespace (a
  per-namespace alternative on kernels that have it; route metrics work on all).

The kernel turns the route's milliseconds into jiffies rounding up: at HZ 250 a wall
``rto_min`` takes effect in 4 ms steps (5 ms acts as 8 ms). The initial SYN RTO (1 s)
is wall time too and is not changed here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .fabric import Fabric
from .hostconfig import host_routes
from .scale import Scale

RTO_MAX_MS = 120_000  # TCP_RTO_MAX: the kernel caps every RTO here
KERNEL_RTO_MIN_MS = 200  # TCP_RTO_MIN, wall time
DELAYED_ACK_MS = (40, 200)  # TCP_DELACK_MIN .. TCP_DELACK_MAX, wall time

# Congestion controls whose behaviour depends on wall-clock constants, and which ones.
# Reno is ACK-clocked: every step waits for an ACK, so it dilates with the RTT exactly.
WALL_TIME_PARTS: dict[str, str] = {
    "cubic": (
        "its window grows with the wall time since the last loss (W = C·(t−K)³, "
        "C = 0.4, t in seconds), so it grows {d:g}× faster per real-equivalent second "
        "than on the real fabric; HyStart's delay thresholds (4–16 ms) are wall times"
    ),
    "bbr": (
        "its min-RTT estimate expires after 10 s of wall time ({r10:g} s real-equivalent) "
        "and each PROBE_RTT lasts at least 200 ms of wall time ({r200:g} ms "
        "real-equivalent); its bandwidth filter counts round trips and dilates"
    ),
    "htcp": (
        "its increase grows with the wall time since the last loss (1 s before it "
        "leaves Reno mode: {r1000:g} ms real-equivalent)"
    ),
}
ACK_CLOCKED = ("reno",)


class TransportSettings(Protocol):
    """What the builder reads of a spec's ``transport`` section (the typed config's
    ``Transport`` has these, as does ``Transport`` below)."""

    @property
    def rto_min_ms(self) -> float | None: ...

    @property
    def delayed_ack(self) -> bool: ...

    @property
    def tail_loss_probe(self) -> bool: ...


@dataclass(frozen=True)
class Transport:
    """Transport settings outside a spec (tests, ``kvfabric cli``): real-equivalent
    ``rto_min_ms`` (None: the kernel's), ``delayed_ack`` (False: quickack),
    ``tail_loss_probe`` (False: none)."""

    rto_min_ms: float | None = None
    delayed_ack: bool = True
    tail_loss_probe: bool = True


def host_sysctls(settings: TransportSettings | None) -> list[str]:
    """``sysctl -w`` arguments for each host's namespace: none unless the tail-loss
    probe is turned off."""
    if settings is None or settings.tail_loss_probe:
        return []
    return ["net.ipv4.tcp_early_retrans=0"]


def wall_rto_min_ms(rto_min_ms: float, scale: Scale) -> int:
    """The wall milliseconds of a real-equivalent minimum RTO at ``scale``'s dilation,
    rounded half up; ValueError when the kernel cannot honour it (below 1 ms, or above
    its 120 s cap on every RTO)."""
    wall = rto_min_ms * scale.d
    ms = int(wall + 0.5)
    if not 1 <= ms <= RTO_MAX_MS:
        raise ValueError(
            f"transport.rto_min_ms={rto_min_ms:g} at time dilation {scale.d:g} is "
            f"{wall:g} ms of wall time; allowed: 1 to {RTO_MAX_MS} ms of wall time "
            f"(the kernel caps every RTO at {RTO_MAX_MS // 1000} s), so rto_min_ms from "
            f"{0.5 / scale.d:g} to {RTO_MAX_MS / scale.d:g} at this dilation"
        )
    return ms


def route_options(settings: TransportSettings | None, scale: Scale) -> list[str]:
    """The ``ip route`` options that carry ``settings`` at ``scale`` (empty: none)."""
    if settings is None:
        return []
    options: list[str] = []
    if settings.rto_min_ms is not None:
        options += ["rto_min", f"{wall_rto_min_ms(settings.rto_min_ms, scale)}ms"]
    if not settings.delayed_ack:
        options += ["quickack", "1"]
    return options


def route_commands(
    fabric: Fabric,
    host: str,
    ifname: Callable[[str, int], str],
    settings: TransportSettings | None,
    scale: Scale,
) -> list[list[str]]:
    """``ip -batch`` argument lists that give every route of ``host`` the options of
    ``settings`` (after its routes exist: ``hostconfig.ip_commands``)."""
    options = route_options(settings, scale)
    if not options:
        return []
    return [["route", "replace", *r, *options] for r in host_routes(fabric, host, ifname)]


def dilation_warnings(
    congestion: str, settings: TransportSettings | None, scale: Scale
) -> list[str]:
    """What of TCP's behaviour does not dilate at ``scale`` (one line each; none at
    d = 1): ``congestion``'s wall-time constants, the kernel's minimum RTO when
    ``rto_min_ms`` is not set, the delayed-ACK timer when it is on."""
    d = scale.d
    if d == 1:
        return []
    out = []
    if congestion not in ACK_CLOCKED:
        part = WALL_TIME_PARTS.get(congestion)
        what = (
            part.format(d=d, r10=10 / d, r200=200 / d, r1000=1000 / d)
            if part
            else "its timers are not known to kvfabric: check which are wall times"
        )
        out.append(
            f"congestion control {congestion} at time dilation {d:g} does not dilate "
            f"exactly: {what}; reno is ACK-clocked and dilates exactly"
        )
    rto_min = None if settings is None else settings.rto_min_ms
    if rto_min is None:
        out.append(
            f"the kernel's {KERNEL_RTO_MIN_MS} ms minimum RTO is wall time: "
            f"{KERNEL_RTO_MIN_MS / d:g} ms real-equivalent at time dilation {d:g} "
            f"(transport.rto_min_ms: {KERNEL_RTO_MIN_MS} keeps the real fabric's)"
        )
    if settings is None or settings.delayed_ack:
        lo, hi = DELAYED_ACK_MS
        out.append(
            f"delayed ACKs wait {lo}–{hi} ms of wall time, {lo / d:g}–{hi / d:g} ms "
            f"real-equivalent at time dilation {d:g}, and the kernel cannot stretch "
            "them past 200 ms (transport.delayed_ack: false acknowledges every segment)"
        )
    if settings is None or settings.tail_loss_probe:
        out.append(
            "the tail-loss probe's timer has wall-time floors (two timer ticks, the "
            f"delayed-ACK allowance): its probes come up to {d:g} times sooner in "
            "real-equivalent time and resend queued segments (transport.tail_loss_probe: "
            "false turns it off)"
        )
    return out

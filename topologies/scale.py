"""The one conversion between the real fabric and its emulation.

A spec's ``scale`` section becomes a ``Scale``: every part of kvfabric that turns a
real-equivalent quantity into what the emulation carries, or an emulated measurement
back into real-equivalent units, asks it, so the rule is written once:

- **bytes**: a transfer of ``real_bytes`` sends ``real_bytes × bandwidth`` bytes;
- **times** (time dilation ``d = time_dilation``): the emulation runs ``d`` times slower
  than the real fabric: a real-equivalent second lasts ``d`` wall seconds, so every
  scheduled instant, compute time and timer is ``× d`` on the wall clock, and every
  measured instant and duration ``÷ d`` when it is reported;
- **rates**: a link of ``real_gbps`` is shaped to ``real_gbps × bandwidth ÷ d`` per wall
  second (``link_bps``), which is ``real_gbps × bandwidth`` per real-equivalent second
  (``emulated_bps``, what the run's tables, read in real-equivalent time, carry); so a
  transfer's real-equivalent time on the emulated link is its time on the real one;
- **grain**: one full emulated frame of ``mtu + 14`` bytes stands for
  ``(mtu + 14) ÷ bandwidth`` real bytes (``d`` changes the machine's load, not the grain:
  ``bandwidth 1e-2, d 100`` loads it like ``1e-4, d 1`` with packets 100× finer).

Pure data: no root, no Mininet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .fabric import FabricError

DEFAULT_BANDWIDTH_SCALE = 1.0e-4  # 400 Gbit/s runs at 40 Mbit/s
DEFAULT_MTU = 1500
MAX_TIME_DILATION = 1024.0  # a 10 s run would take 2.8 h of wall time
DEFAULT_MAX_DILATION = 64.0  # the largest auto picks unless told: 10 s take 11 min
MAX_MTU = 9000  # jumbo frames: veth and the userspace datapath carry 9000
ETHERNET_HEADER_BYTES = 14


def check_bandwidth(value: object, key: str = "scale.bandwidth") -> float:
    """``value`` as a bandwidth scale, in (0, 1]; else FabricError naming ``key``."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 < value <= 1:  # type: ignore[arg-type]
        raise FabricError(f"{key}={value!r} is not allowed: must be in (0, 1]")
    return float(value)  # type: ignore[arg-type]


def check_mtu(value: object, key: str = "scale.mtu") -> int:
    """``value`` as an MTU, an integer from ``DEFAULT_MTU`` to ``MAX_MTU``; else
    FabricError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or not DEFAULT_MTU <= value <= MAX_MTU:
        raise FabricError(
            f"{key}={value!r} is not allowed: must be an integer from "
            f"{DEFAULT_MTU} to {MAX_MTU} bytes"
        )
    return value


def check_time_dilation(value: object, key: str = "scale.time_dilation") -> float | str:
    """``value`` as a time dilation: a number from 1 to ``MAX_TIME_DILATION``, or
    ``"auto"`` (the planner picks it); else FabricError naming ``key``."""
    if value == "auto":
        return "auto"
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 1 <= value <= MAX_TIME_DILATION:  # type: ignore[arg-type,operator]
        raise FabricError(
            f"{key}={value!r} is not allowed: must be a number from 1 to "
            f"{MAX_TIME_DILATION:g}, or auto"
        )
    return value  # type: ignore[return-value]  # an int stays an int in the resolved spec


@dataclass(frozen=True)
class Scale:
    """The emulation's scale (``scale.bandwidth``, ``scale.mtu``,
    ``scale.time_dilation``) and the conversions between real-equivalent and emulated
    rates, bytes and times, both ways. ``time_dilation`` is ``"auto"`` only in a spec
    the planner has not resolved yet (``dilated`` gives the resolved scale); every
    conversion of time or rate refuses it."""

    bandwidth: float = DEFAULT_BANDWIDTH_SCALE
    mtu: int = DEFAULT_MTU
    time_dilation: float | str = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "bandwidth", check_bandwidth(self.bandwidth))
        check_mtu(self.mtu)
        object.__setattr__(self, "time_dilation", check_time_dilation(self.time_dilation))

    @property
    def d(self) -> float:
        """The time dilation as a number: wall seconds per real-equivalent second."""
        if isinstance(self.time_dilation, str):
            raise ValueError(
                "scale.time_dilation is auto: the planner picks it (Scale.dilated) before "
                "anything converts a time or a rate"
            )
        return float(self.time_dilation)

    @property
    def auto(self) -> bool:
        return self.time_dilation == "auto"

    def dilated(self, d: float) -> Scale:
        """This scale at time dilation ``d``."""
        return Scale(self.bandwidth, self.mtu, d)

    # ---- rates -----------------------------------------------------------------------

    def link_bps(self, real_gbps: float) -> int:
        """The rate a real ``real_gbps`` link is shaped to: emulated bit/s of wall time
        (rounded)."""
        return int(round(real_gbps * 1e9 * self.bandwidth / self.d))

    def link_mbps(self, real_gbps: float) -> float:
        """``link_bps`` unrounded, in Mbit/s of wall time: the load on the machine."""
        return real_gbps * 1e3 * self.bandwidth / self.d

    def emulated_bps(self, real_gbps: float) -> float:
        """The emulated bit/s a real ``real_gbps`` link carries per real-equivalent
        second (what the run's tables show: they are in real-equivalent time)."""
        return real_gbps * 1e9 * self.bandwidth

    def emulated_mbps(self, real_gbps: float) -> float:
        return real_gbps * 1e3 * self.bandwidth

    def real_gbps(self, emulated_mbps: float) -> float:
        """What ``emulated_mbps`` (emulated Mbit per real-equivalent second, as the
        tables give it) stands for on the real fabric, Gbit/s (a number or an array)."""
        return emulated_mbps / self.bandwidth / 1e3

    # ---- bytes -----------------------------------------------------------------------

    def emulated_bytes(self, real_bytes: float) -> float:
        """The bytes the emulation sends for ``real_bytes`` of real traffic (unrounded:
        the sender decides how to round, and at least one byte is sent)."""
        return real_bytes * self.bandwidth

    def real_bytes(self, emulated_bytes: float) -> float:
        """The real bytes ``emulated_bytes`` stand for (a number or an array)."""
        return emulated_bytes / self.bandwidth

    # ---- times -----------------------------------------------------------------------

    def wall_s(self, real_s: float) -> float:
        """The wall-clock seconds a real-equivalent interval of ``real_s`` takes (a
        number or an array)."""
        return real_s * self.d

    def real_s(self, wall_s: float) -> float:
        """The real-equivalent seconds of ``wall_s`` of wall-clock time (a number or an
        array; also for ms)."""
        return wall_s / self.d

    def wall_ns(self, real_ns: int, anchor_ns: int = 0) -> int:
        """The wall-clock instant of real-equivalent instant ``real_ns``: both clocks
        agree at ``anchor_ns`` (a run's t0). Rounded up, so ``real_ns(wall_ns(t)) >= t``:
        a timer is never fired before its instant."""
        return anchor_ns + math.ceil((real_ns - anchor_ns) * self.d)

    def real_ns(self, wall_ns: int, anchor_ns: int = 0) -> int:
        """The real-equivalent instant of wall-clock instant ``wall_ns`` (rounded down)."""
        return anchor_ns + math.floor((wall_ns - anchor_ns) / self.d)

    # ---- grain -----------------------------------------------------------------------

    @property
    def frame_bytes(self) -> int:
        """A full frame at this MTU as HTB and pfifo count it (Ethernet header included)."""
        return self.mtu + ETHERNET_HEADER_BYTES

    @property
    def real_bytes_per_packet(self) -> float:
        """The real bytes one full emulated frame stands for: the emulation's grain."""
        return self.frame_bytes / self.bandwidth

    def describe(self) -> str:
        """One line for reports: the scale, the MTU, the grain and the time dilation."""
        grain = self.real_bytes_per_packet
        unit, size = ("MB", grain / 1e6) if grain >= 1e6 else ("kB", grain / 1e3)
        if grain < 1e3:
            unit, size = "bytes", grain
        line = (
            f"bandwidth scale {self.bandwidth:g}, MTU {self.mtu}: one packet stands for "
            f"{size:.3g} {unit} of real traffic"
        )
        if self.auto or self.d != 1:
            line += (
                f"; time dilation {self.time_dilation:g}: a real-equivalent second lasted "
                f"{self.time_dilation:g} s of wall time"
                if not self.auto
                else "; time dilation auto"
            )
        return line


DEFAULT_SCALE = Scale()  # the scale of a spec that does not give one

"""The one conversion between the real fabric and its emulation.

A spec's ``scale`` section becomes a ``Scale``: every part of kvfabric that turns a
real-equivalent quantity into what the emulation carries, or an emulated measurement
back into real-equivalent units, asks it, so the rule is written once:

- **rates**: a link of ``real_gbps`` runs at ``real_gbps × bandwidth``;
- **bytes**: a transfer of ``real_bytes`` sends ``real_bytes × bandwidth`` bytes, so a
  transfer's *time* on the emulated link is its time on the real one;
- **times**: wall-clock time is real-equivalent time (the factor is 1 until time
  dilation stretches it; it then changes here and nowhere else);
- **grain**: one full emulated frame of ``mtu + 14`` bytes stands for
  ``(mtu + 14) ÷ bandwidth`` real bytes.

Pure data: no root, no Mininet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .fabric import FabricError

DEFAULT_BANDWIDTH_SCALE = 1.0e-4  # 400 Gbit/s runs at 40 Mbit/s
DEFAULT_MTU = 1500
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


@dataclass(frozen=True)
class Scale:
    """The emulation's scale (``scale.bandwidth``, ``scale.mtu``) and the conversions
    between real-equivalent and emulated rates, bytes and times, both ways."""

    bandwidth: float = DEFAULT_BANDWIDTH_SCALE
    mtu: int = DEFAULT_MTU

    def __post_init__(self) -> None:
        object.__setattr__(self, "bandwidth", check_bandwidth(self.bandwidth))
        check_mtu(self.mtu)

    # ---- rates -----------------------------------------------------------------------

    def emulated_bps(self, real_gbps: float) -> int:
        """The emulated rate of a real ``real_gbps`` link, bit/s (rounded)."""
        return int(round(real_gbps * 1e9 * self.bandwidth))

    def emulated_mbps(self, real_gbps: float) -> float:
        return real_gbps * 1e3 * self.bandwidth

    def real_gbps(self, emulated_mbps: float) -> float:
        """What an emulated rate of ``emulated_mbps`` stands for on the real fabric, Gbit/s
        (a number or an array)."""
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

    @property
    def time_dilation(self) -> float:
        """Wall seconds per real-equivalent second (1: the emulation runs in real time)."""
        return 1.0

    def wall_s(self, real_s: float) -> float:
        """The wall-clock seconds a real-equivalent interval of ``real_s`` takes."""
        return real_s * self.time_dilation

    def real_s(self, wall_s: float) -> float:
        """The real-equivalent seconds of ``wall_s`` of wall-clock time."""
        return wall_s / self.time_dilation

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
        """One line for reports: the scale, the MTU and the grain."""
        grain = self.real_bytes_per_packet
        unit, size = ("MB", grain / 1e6) if grain >= 1e6 else ("kB", grain / 1e3)
        return (
            f"bandwidth scale {self.bandwidth:g}, MTU {self.mtu}: one packet stands for "
            f"{size:.3g} {unit} of real traffic"
        )


DEFAULT_SCALE = Scale()  # the scale of a spec that does not give one

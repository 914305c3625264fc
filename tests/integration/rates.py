"""A shaped link's rate as a user would measure it: iperf3's goodput turned into the wire
rate it implies. A 4 s iperf3 on this shared VM now and then loses 10-25 % of a core to
the host (steal); a shaper that is wrong is wrong every time. So a measurement below the
floor is taken once more, and every measurement must stay under the ceiling."""

from __future__ import annotations

from typing import Any

from experiments.measurement.iperf import TCP_GOODPUT_FRACTION, iperf3


def wire_rates_mbps(net: Any, src: str, dst: str, floor_mbps: float, tries: int = 2) -> list[float]:
    """Wire rates of up to ``tries`` 4 s iperf3 runs from ``src`` to ``dst``, stopping at
    the first that reaches ``floor_mbps``."""
    rates: list[float] = []
    for _ in range(tries):
        rates.append(iperf3(net, src, dst, seconds=4).goodput_mbps / TCP_GOODPUT_FRACTION)
        if rates[-1] >= floor_mbps:
            break
    return rates

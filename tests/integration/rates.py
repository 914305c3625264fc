"""A shaped link's rate as a user would measure it: iperf3's goodput turned into the wire
rate it implies, over the whole transfer and over its best one-second interval.

A shaper that is wrong is wrong in every second: too fast shows in the whole-transfer
rate, too slow in the best second. A 4 s iperf3 on a shared VM now and then loses a
quarter of a core to the host (steal), which slows some seconds, not the shaper; so a
transfer whose best second falls below the floor is taken again (three tries in all),
and each measurement carries the steal the machine suffered meanwhile. Only when every
try fell short while the host took at least ``BUSY_STEAL_PCT`` of the CPU is the floor
left unjudged (a skip that names the steal); the ceiling is judged always."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from experiments.analysis.fidelity import BUSY_STEAL_PCT
from experiments.measurement.iperf import TCP_GOODPUT_FRACTION, iperf3

# BUSY_STEAL_PCT is the project's one steal rule (fidelity.py): a CI run's failure (26
# and 30 of 40 Mbit/s) came from a VM whose calibration, in the same run, found it too busy.


@dataclass(frozen=True)
class WireRate:
    mean_mbps: float  # the whole transfer, receiver side
    best_second_mbps: float  # the fastest one-second interval after the first (sender side)
    steal_pct: float  # CPU time the host took from this VM during the transfer


def steal_counters() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def wire_rates_mbps(
    net: Any, src: str, dst: str, floor_mbps: float, tries: int = 3
) -> list[WireRate]:
    """Wire rates of up to ``tries`` 4 s iperf3 runs from ``src`` to ``dst``, stopping at
    the first whose best second reaches ``floor_mbps``."""
    rates: list[WireRate] = []
    for _ in range(tries):
        steal0, total0 = steal_counters()
        transfer = iperf3(net, src, dst, seconds=4)
        steal1, total1 = steal_counters()
        seconds = [i["sum"]["bits_per_second"] / 1e6 for i in transfer.raw["intervals"][1:]]
        rates.append(
            WireRate(
                transfer.goodput_mbps / TCP_GOODPUT_FRACTION,
                max(seconds or [0.0]) / TCP_GOODPUT_FRACTION,
                100.0 * (steal1 - steal0) / max(1, total1 - total0),
            )
        )
        if rates[-1].best_second_mbps >= floor_mbps:
            break
    return rates


def assert_shaped(rates: list[WireRate], configured_mbps: float) -> None:
    """Never above 1.05x the configured rate over a transfer, and the last transfer's best
    second at 0.90x or more, unless every try ran while the host stole the CPU."""
    assert max(r.mean_mbps for r in rates) <= 1.05 * configured_mbps, rates
    if rates[-1].best_second_mbps >= 0.90 * configured_mbps:
        return
    if all(r.steal_pct >= BUSY_STEAL_PCT for r in rates):
        pytest.skip(
            f"the host took {min(r.steal_pct for r in rates):.0f}%+ of the CPU (steal) "
            f"during every try: {rates}"
        )
    raise AssertionError(f"below 0.90x of {configured_mbps} Mbit/s: {rates}")

"""sampler: CPU share and achieved rate of the queue sampler (one netlink dump
per tick for every switch port) against polling ``tc -s qdisc show dev X`` per
port, the way one would script it, in the same run on one fabric.

1. ``tc`` polling flat out (no sleep): its sweep rate over every port and its
   CPU share (the loop's thread time + every ``tc`` child's rusage).
2. QueueSampler asked for that same rate: its CPU share (thread time).
3. QueueSampler flat out (10 kHz asked): its sweep rate and CPU share.

Target: the same rate at <= 1/3 the CPU (ratio = sampler CPU ÷ tc CPU at equal
rate), or >= 3x the rate at the same CPU.
"""

from __future__ import annotations

import re
import subprocess
import time

from controller.ofctl import StaticRules
from experiments.measurement.samplers import QueueSampler
from topologies import fat_tree
from topologies.builder import FabricNetwork
from topologies.scale import Scale

from .common import children_cpu_s, result, show, switch_ports

NAME = "sampler"
SCALE = Scale()  # the default: 400 Gbit/s runs at 40 Mbit/s
BACKLOG = re.compile(r"backlog (\d+)b (\d+)p")


def tc_poll(ports: list[str], seconds: float) -> tuple[float, float]:
    """(sweeps per second, CPU share in cores) polling ``tc -s qdisc show`` per port."""
    c0, k0, t0 = time.thread_time(), children_cpu_s(), time.monotonic()
    sweeps = 0
    while time.monotonic() - t0 < seconds:
        for dev in ports:
            out = subprocess.run(
                ["tc", "-s", "qdisc", "show", "dev", dev],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            BACKLOG.findall(out)  # parse as a script would
        sweeps += 1
    wall = time.monotonic() - t0
    cpu = time.thread_time() - c0 + children_cpu_s() - k0
    return sweeps / wall, cpu / wall


def sampler(ports: dict, rate_hz: float, seconds: float) -> tuple[float, float]:
    """(achieved Hz, CPU share in cores) of the QueueSampler asked for ``rate_hz``."""
    with QueueSampler(ports, rate_hz) as q:
        time.sleep(seconds)
    return q.achieved_hz, q.cpu_ms_per_sample * q.samples / 1e3 / q.elapsed_s


def run(quick: bool = False) -> dict:
    seconds = 3.0 if quick else 15.0
    fabric = fat_tree(4)
    with FabricNetwork(fabric, SCALE, rules=StaticRules()) as net:
        ports = switch_ports(net)
        tc_hz, tc_cpu = tc_poll(list(ports), seconds)
        same_hz, same_cpu = sampler(ports, tc_hz, seconds)
        max_hz, max_cpu = sampler(ports, 10_000, seconds)
    cpu_ratio = same_cpu / tc_cpu
    rate_ratio = max_hz / tc_hz
    cpu_met = cpu_ratio <= 1 / 3 and same_hz >= 0.95 * tc_hz
    met = cpu_met or (rate_ratio >= 3 and max_cpu <= tc_cpu * 1.05)
    record = result(
        NAME,
        value=same_cpu,
        baseline=tc_cpu,
        unit="CPU cores at equal rate",
        target="same rate at <= 1/3 the CPU, or >= 3x the rate at the same CPU",
        target_met=met,
        quick=quick,
        ports=len(ports),
        seconds=seconds,
        fabric="fat_tree k=4",
        tc={"hz": tc_hz, "cpu_cores": tc_cpu, "cpu_ms_per_sweep": tc_cpu / tc_hz * 1e3},
        sampler_same_rate={"hz": same_hz, "cpu_cores": same_cpu},
        sampler_flat_out={
            "hz": max_hz,
            "cpu_cores": max_cpu,
            "cpu_ms_per_sweep": max_cpu / max_hz * 1e3,
        },
        rate_ratio_flat_out=rate_ratio,
        limit="" if met else "see the table: neither the CPU nor the rate condition held",
    )
    show(
        record,
        ["how", "sweeps/s (all ports)", "CPU cores", "CPU ms per sweep"],
        [
            [f"tc per port ({len(ports)} ports)", tc_hz, tc_cpu, tc_cpu / tc_hz * 1e3],
            ["QueueSampler at the tc rate", same_hz, same_cpu, same_cpu / max(same_hz, 1e-9) * 1e3],
            ["QueueSampler flat out", max_hz, max_cpu, max_cpu / max_hz * 1e3],
        ],
    )
    return record

"""Controller timing on the largest fabric that fits this machine: time from
the last switch connecting to the last rule acknowledged, and time from a
spine link going down to the last rule sent (and acknowledged).

    sudo kvfabric bench controller-timing         (ecmp, 3 repeats; --quick: 1)

Prints a table and writes benchmarks/results/controller-timing.json.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from controller.process import ControllerProcess
from topologies import fat_tree, rail_optimized, spine_leaf
from topologies.builder import Controller, FabricNetwork
from topologies.shaping import switch_capacity_mbps, switching_demand_mbps

from .common import result

CANDIDATES = [  # largest first; the first that fits this machine is measured
    ("fat_tree k=6", lambda: fat_tree(6)),
    ("rail_optimized 8x8, 4 spines", lambda: rail_optimized(8, 8, 4, nvlink_gbps=900)),
    ("fat_tree k=4", lambda: fat_tree(4)),
    ("spine_leaf 4x8x4", lambda: spine_leaf(4, 8, 4)),
]
SCALE = 1e-4


def largest_fitting():
    for name, make in CANDIDATES:
        fabric = make()
        if switching_demand_mbps(fabric, SCALE) <= switch_capacity_mbps():
            return name, fabric
    return CANDIDATES[-1][0], CANDIDATES[-1][1]()


def measure(fabric, policy: str) -> dict:
    uplink = next(lk for lk in fabric.links if lk.kind == "fabric")
    with (
        tempfile.TemporaryDirectory(prefix="kvfabric-bench-") as run_dir,
        ControllerProcess(fabric, policy, Path(run_dir)) as proc,
        FabricNetwork(fabric, SCALE, controller=Controller(port=proc.port)) as net,
    ):
        proc.wait_ready(timeout_s=60)
        ready = next(e for e in proc.client.events() if e["event"] == "ready")
        net.set_link(uplink.a, uplink.b, up=False)
        deadline = time.monotonic() + 10
        reroute: dict = {}
        while time.monotonic() < deadline and "installed_ms" not in reroute:
            reroutes = [e for e in proc.client.events() if e["event"] == "reroute"]
            reroute = reroutes[-1] if reroutes else {}
            time.sleep(0.05)
        errors = proc.errors()
    if errors:
        raise RuntimeError(f"controller reported: {errors[0][:500]}")
    return {
        "install_ms": ready["install_ms"],
        "reroute_sent_ms": reroute.get("reroute_ms"),
        "reroute_installed_ms": reroute.get("installed_ms"),
        "link": f"{uplink.a}-{uplink.b}",
    }


def timing(policy: str, repeat: int) -> tuple[str, Any, list[dict], dict[str, float]]:
    """Measure ``repeat`` times on the largest fitting fabric; print the table."""
    name, fabric = largest_fitting()
    runs = [measure(fabric, policy) for _ in range(repeat)]
    summary = {
        key: statistics.median(r[key] for r in runs if r[key] is not None)
        for key in ("install_ms", "reroute_sent_ms", "reroute_installed_ms")
    }
    print(f"{name}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, policy {policy}")
    print(f"{'measure':<40}{'median ms':>10}   runs")
    for key, value in summary.items():
        each = ", ".join(f"{r[key]:.1f}" for r in runs if r[key] is not None)
        print(f"{key:<40}{value:>10.1f}   {each}")
    return name, fabric, runs, summary


def run(quick: bool = False) -> dict:
    """The suite's record: install time (median) as the value, reroute times beside it."""
    repeat = 1 if quick else 3
    name, fabric, runs, summary = timing("ecmp", repeat)
    return result("controller-timing", value=summary["install_ms"], baseline=None,
                  unit="ms (last switch connected → last rule acknowledged, median)",
                  target="report", target_met=None, quick=quick, fabric=name,
                  switches=len(fabric.switches), hosts=len(fabric.hosts), policy="ecmp",
                  runs=runs, median=summary)  # fmt: skip

"""fabric-size: what a fabric's size costs Open vSwitch per packet, against the fabric
the machine's envelope is calibrated on, in the same run.

The same load on every fabric: four streams on 3-switch paths (two one-to-one and a
2-to-1 incast, ``calibrate.fabric_pairs``), ``SWITCH_HOP_MBPS`` of switch-hop work in
all, with static shortest-path rules. Per fabric: OVS's main thread (which forwards
every packet of the userspace datapath's system ports) as a share of one core, idle
(the fabric up, no traffic) and under the load, and the run's verdict.

Value: the main thread's share on the largest fabric; baseline: on ``spine_leaf
2x2x4``, the fabric ``kvfabric calibrate`` measures 3-switch paths on. A ratio above 1
is how much more that thread works for the same load on the larger fabric; the load it
carries faithfully falls by more once a core saturates in bursts (on the rail fabric
here: 119 switch-hop Mbit/s against the machine's 211), which ``kvfabric calibrate
--fabric SPEC`` measures. Reported, no target (a property of the machine and OVS's
userspace datapath; with the kernel datapath the main thread forwards nothing, and the
record says which ran).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from controller.ofctl import StaticRules
from experiments.orchestration.calibrate import fabric_pairs, hop_schedule, host_gbps
from experiments.orchestration.trial import failed_checks, trial
from topologies import Fabric, fat_tree, rail_optimized, spine_leaf
from topologies.builder import FabricNetwork
from topologies.machine import ovs_kernel_datapath
from topologies.scale import Scale

from .common import result, show

NAME = "fabric-size"
SWITCH_HOP_MBPS = 150.0  # under the machine's 3-switch figure (211 here), over rail's (119)
HOPS = 3
PIDFILE = Path("/var/run/openvswitch/ovs-vswitchd.pid")


def fabrics() -> list[tuple[str, Fabric]]:
    """The fabrics compared, smallest first (the first is the baseline)."""
    return [
        ("spine_leaf 2x2x4", spine_leaf(2, 2, 4, host_gbps=100, uplink_gbps=400)),
        ("spine_leaf 2x2x8", spine_leaf(2, 2, 8, host_gbps=100, uplink_gbps=400)),
        (
            "rail_optimized 4x4",
            rail_optimized(4, 4, 2, rail_gbps=100, spine_gbps=200, nvlink_gbps=3600),
        ),
        ("fat_tree k=4", fat_tree(4, host_gbps=100, fabric_gbps=400)),
    ]


def switch_ports(fabric: Fabric) -> int:
    return sum(len(fabric.links_of(s.name)) for s in fabric.switches)


def ovs_main_thread_s() -> float:
    """CPU seconds OVS's main thread (its pid's own task) has used."""
    pid = int(PIDFILE.read_text())
    stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(fabric: Fabric, seconds: float) -> dict:
    """Idle and loaded main-thread share (% of a core) and the loaded run's verdict."""
    pairs = fabric_pairs(fabric, HOPS)
    assert pairs is not None, "every compared fabric has 3-switch paths"
    rate = SWITCH_HOP_MBPS / (3 * HOPS)  # three host links' worth over three switches
    scale = rate * 1e6 / (host_gbps(fabric, pairs) * 1e9)
    with FabricNetwork(fabric, Scale(scale), rules=StaticRules()) as net:
        t, c = time.monotonic(), ovs_main_thread_s()
        time.sleep(seconds)
        idle = 100 * (ovs_main_thread_s() - c) / (time.monotonic() - t)
        mark: dict[str, float] = {}

        def read(key: str) -> None:
            mark[f"t{key}"], mark[f"c{key}"] = time.monotonic(), ovs_main_thread_s()

        def start(_t0: int) -> None:  # the traffic's window, not the teardown after it
            read("0")
            threading.Timer(seconds, read, ("1",)).start()

        out = trial(
            net,
            hop_schedule(pairs, rate, seconds, scale),
            net.scale,
            timeout_s=seconds * 3 + 10,
            on_start=start,
        )
        loaded = 100 * (mark["c1"] - mark["c0"]) / (mark["t1"] - mark["t0"])
    v = out["verdict"]
    return {
        "switches": len(fabric.switches),
        "switch_ports": switch_ports(fabric),
        "pairs": pairs,
        "idle_pct": idle,
        "loaded_pct": loaded,
        "faithful": bool(v["ok"]),
        "failed": failed_checks(v),
    }


def run(quick: bool = False) -> dict:
    seconds = 3.0 if quick else 8.0
    got = {name: measure(fabric, seconds) for name, fabric in fabrics()}
    names = list(got)
    base, top = got[names[0]], got[names[-1]]
    record = result(
        NAME,
        value=top["loaded_pct"],
        baseline=base["loaded_pct"],
        unit=f"% of a core, OVS main thread, {SWITCH_HOP_MBPS:g} Mbit/s switch-hop work",
        target="report: the same load costs a larger fabric more",
        target_met=None,
        quick=quick,
        seconds=seconds,
        fabrics=got,
        datapath="kernel" if ovs_kernel_datapath() else "userspace",
        limit="",
    )
    show(
        record,
        ["fabric", "switches", "switch ports", "idle %", "loaded %", "÷ baseline", "faithful"],
        [
            [
                name,
                g["switches"],
                g["switch_ports"],
                g["idle_pct"],
                g["loaded_pct"],
                g["loaded_pct"] / base["loaded_pct"],
                "yes" if g["faithful"] else "NO: " + ", ".join(g["failed"]),
            ]
            for name, g in got.items()
        ],
    )
    return record

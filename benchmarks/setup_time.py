"""setup: build + start + stop of a fabric at 3 sizes, against plain Mininet
building the same topology with its own ``Topo``/``TCLink`` (HTB at the same
rates, same OVS datapath), alternated in the same run.

kvfabric does more per build (offloads, sysctls, static ARP, bounded pfifo,
flow rules, run record for cleanup); the ratio says what that costs.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Any

from controller.ofctl import StaticRules
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.machine import ovs_kernel_datapath
from topologies.scale import Scale
from topologies.shaping import switch_capacity_mbps, switching_demand_mbps

from .common import result, show

NAME = "setup"
SCALE = Scale()  # the default: 400 Gbit/s runs at 40 Mbit/s
SIZES = [(2, 2, 4), (2, 4, 4), (4, 8, 4), (4, 8, 8)]  # spines, leaves, hosts/leaf
QUICK_SIZES = [(1, 2, 2), (2, 2, 4), (2, 4, 4)]


def fitting(sizes: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The three largest sizes whose line-rate demand fits this machine."""
    cap = switch_capacity_mbps()
    ok = [s for s in sizes if switching_demand_mbps(spine_leaf(*s), SCALE) <= cap]
    return ok[-3:]


def _up_down(t0: float, net: Any) -> tuple[float, float]:
    """Seconds from ``t0`` until ``net.start()`` returned, and for ``net.stop()``
    (which runs whatever happens)."""
    try:
        net.start()
        t1 = time.monotonic()
    finally:
        t2 = time.monotonic()
        net.stop()
    return t1 - t0, time.monotonic() - t2


def kvfabric_times(fabric) -> tuple[float, float]:
    t0 = time.monotonic()
    return _up_down(t0, FabricNetwork(fabric, SCALE, rules=StaticRules()))


def mininet_times(fabric) -> tuple[float, float]:
    """Plain Mininet: a Topo with the fabric's nodes, a TCLink (HTB at the emulated
    rate) per link; names prefixed ``bm`` so nothing of kvfabric's is touched."""
    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch
    from mininet.topo import Topo

    setLogLevel("critical")  # its HTB quantum warnings are noise here
    name = {n.name: f"bm{'h' if n.is_host else 's'}{i}" for i, n in enumerate(fabric.nodes)}
    topo = Topo()
    for i, node in enumerate(fabric.nodes):
        if node.is_host:
            topo.addHost(name[node.name], ip=f"{node.ip}/8")
        else:
            topo.addSwitch(name[node.name], dpid=f"{0xB0000 + i:016x}")
    for link in fabric.links:
        mbps = SCALE.link_bps(link.real_gbps) / 1e6
        topo.addLink(name[link.a], name[link.b], bw=mbps)
    datapath = "kernel" if ovs_kernel_datapath() else "user"
    t0 = time.monotonic()
    net = Mininet(
        topo=topo,
        switch=partial(OVSSwitch, datapath=datapath, failMode="secure"),
        link=TCLink,
        controller=None,
        autoSetMacs=False,
    )
    return _up_down(t0, net)


def run(quick: bool = False) -> dict:
    sizes = QUICK_SIZES if quick else fitting(SIZES)
    repeat = 1 if quick else 3
    curve = []
    for size in sizes:
        fabric = spine_leaf(*size)
        ours, theirs = [], []
        for _ in range(repeat):  # alternate, so drift of the machine hits both alike
            ours.append(kvfabric_times(fabric))
            theirs.append(mininet_times(fabric))
        k_total = statistics.median(b + s for b, s in ours)
        m_total = statistics.median(b + s for b, s in theirs)
        curve.append(
            {
                "fabric": f"spine_leaf {size[0]}x{size[1]}x{size[2]}",
                "hosts": len(fabric.hosts),
                "switches": len(fabric.switches),
                "links": len(fabric.links),
                "kvfabric_build_s": statistics.median(b for b, _ in ours),
                "kvfabric_stop_s": statistics.median(s for _, s in ours),
                "kvfabric_s": k_total,
                "mininet_s": m_total,
                "mininet_build_s": statistics.median(b for b, _ in theirs),
                "mininet_stop_s": statistics.median(s for _, s in theirs),
                "kvfabric_ms_per_host": k_total / len(fabric.hosts) * 1e3,
                "mininet_ms_per_host": m_total / len(fabric.hosts) * 1e3,
                "ratio": k_total / m_total,
            }
        )
    big = curve[-1]
    worst = max(c["ratio"] for c in curve)
    met = worst <= 1.15
    record = result(
        NAME,
        value=big["kvfabric_s"],
        baseline=big["mininet_s"],
        unit="s (build+start+stop)",
        target="ratio <= 1.15 at every size",
        target_met=met,
        quick=quick,
        ratio_value=big["ratio"],
        worst_ratio=worst,
        repeat=repeat,
        scale=SCALE.bandwidth,
        sizes=curve,
        limit=""
        if met
        else (
            "a fixed cost per build that plain Mininet does not pay (preflight probes, the "
            "cleanup run record, ethtool offloads and sysctls per host, static ARP, flow rules "
            "with ovs-ofctl per switch: process starts on 2 cores); it weighs most on the "
            "smallest fabric, while the per-host cost is lower (tc -batch instead of one tc "
            "call per link end)"
        ),
    )
    show(
        record,
        ["fabric", "hosts", "kvfabric s", "mininet s", "ratio", "kvf ms/host", "mn ms/host"],
        [
            [
                c["fabric"],
                c["hosts"],
                c["kvfabric_s"],
                c["mininet_s"],
                c["ratio"],
                c["kvfabric_ms_per_host"],
                c["mininet_ms_per_host"],
            ]
            for c in curve
        ],
    )
    return record

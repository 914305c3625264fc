"""The foundation demo: the default rail-optimized fabric comes up, every GPU
reaches every other, and one GPU-to-GPU transfer across the spine runs at the
configured rate. (The flagship serving experiment replaces it.)"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from controller.ofctl import StaticRules
from experiments.measurement.iperf import TCP_GOODPUT_FRACTION, iperf3
from experiments.measurement.reach import all_pairs_ping
from topologies import rail_optimized
from topologies.builder import FabricNetwork
from topologies.shaping import emulated_rate_bps


def run_demo(console: Console, scale: float = 1e-4, seconds: float = 5.0) -> int:
    fabric = rail_optimized()
    src, dst = "gpu0_0", "gpu1_1"  # different rails: rail0 -> spine -> rail1
    path = fabric.shortest_paths(src, dst)[0]
    with (
        console.status("building the rail-optimized fabric"),
        FabricNetwork(fabric, scale, rules=StaticRules()) as net,
    ):
        console.print(
            f"fabric up: {len(fabric.hosts)} GPUs, {len(fabric.switches)} switches, "
            f"{len(fabric.links)} links, run prefix {net.prefix}, {net.datapath} datapath"
        )
        with console.status("all-pairs ping"):
            reach = all_pairs_ping(net)
        ok = sum(reach.values())
        console.print(f"reachability: {ok}/{len(reach)} GPU pairs answer")
        with console.status(f"iperf3 {src} -> {dst} for {seconds:g} s"):
            transfer = iperf3(net, src, dst, seconds)
    configured = emulated_rate_bps(fabric.link_between(src, path[1]).real_gbps, scale) / 1e6
    ceiling = configured * TCP_GOODPUT_FRACTION
    table = Table(title=f"{src} -> {dst} over {' -> '.join(path)} (scale {scale:g})")
    for col in ("configured link", "TCP goodput ceiling", "measured goodput", "of ceiling"):
        table.add_column(col, justify="right")
    table.add_row(
        f"{configured:.1f} Mbit/s",
        f"{ceiling:.1f} Mbit/s",
        f"{transfer.goodput_mbps:.1f} Mbit/s",
        f"{transfer.goodput_mbps / ceiling:.1%}",
    )
    console.print(table)
    console.print(
        f"(real-equivalent: {fabric.link_between(src, path[1]).real_gbps:g} Gbit/s links; "
        f"{transfer.retransmits} TCP retransmits; everything the run created is gone)"
    )
    return 0 if ok == len(reach) else 1

"""``kvfabric topo list`` and ``kvfabric topo show KIND k=v ...``: fabrics as data,
with what a fabric asks of this machine at a bandwidth scale (no root)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.markup import escape
from rich.table import Table

from experiments.cli.common import EXIT_OK, console, say, scale_arg, unhonoured
from experiments.orchestration import envelope
from topologies import Fabric, FabricError, defaults, make_fabric
from topologies.generators import GENERATORS, parse_param
from topologies.shaping import emulated_rate_bps, switching_demand_mbps

TOPO_HINT = "see 'kvfabric topo list' for each fabric's parameters and defaults"


def add_parsers(sub: Any) -> None:
    t = sub.add_parser("topo", help="fabrics as data")
    tsub = t.add_subparsers(dest="topo_command", required=True)
    tsub.add_parser("list", help="fabric kinds and their parameters")
    ts = tsub.add_parser("show", help="one fabric: counts, links, oversubscription, bisection")
    ts.add_argument("kind", help=f"one of {', '.join(GENERATORS)}")
    ts.add_argument("params", nargs="*", metavar="k=v", help="generator parameters")
    ts.add_argument("--scale", default="1e-4", help="bandwidth scale in (0, 1] (default 1e-4)")
    ts.add_argument("--json", action="store_true")
    t.set_defaults(handler=cmd_topo)


def _fabric_from_args(kind: str, params: list[str]) -> Fabric:
    values = {}
    for item in params:
        if "=" not in item:
            raise FabricError(f"{kind}: parameter {item!r} must look like name=value")
        name, text = item.split("=", 1)
        values[name] = parse_param(kind, name, text)
    return make_fabric(kind, **values)


def _topo_list() -> int:
    table = Table(title="fabric kinds (kvfabric topo show KIND k=v ...)")
    table.add_column("kind")
    table.add_column("parameters (defaults)")
    table.add_column("what")
    for kind, gen in GENERATORS.items():
        params = " ".join(
            f"{k}={v}" if isinstance(v, str) else f"{k}={v:g}" for k, v in defaults(kind).items()
        )
        doc = " ".join((gen.__doc__ or "").split())
        table.add_row(kind, params, doc.split(". ")[0].rstrip("."))
    console.print(table)
    say("rates (*_gbps) are real-equivalent Gbit/s, buffers packets; --scale S emulates "
        "a rate R at R x S (kvfabric topo show KIND --scale S)")  # fmt: skip
    return EXIT_OK


def cmd_topo(args: argparse.Namespace) -> int:
    if args.topo_command == "list":
        return _topo_list()
    scale = scale_arg(args.scale)
    try:
        fabric = _fabric_from_args(args.kind, args.params)
    except FabricError as exc:
        raise FabricError(f"{exc} ({TOPO_HINT})") from None
    info = fabric.summary()
    demand = switching_demand_mbps(fabric, scale)
    env, why = envelope.load(envelope.machine_identity())
    capacity = round(env.capacity_mbps(info["mean_switch_hops"]), 1)
    problem = unhonoured(fabric, scale)
    if problem is None and demand > capacity:
        problem = (
            f"{demand:.0f} Mbit/s of switch-hop work at line rate exceeds this machine's "
            f"envelope, {capacity:.0f} at {info['mean_switch_hops']:.2f} switches per path "
            f"(lower --scale; {why if not env.calibrated else env.source})"
        )
    info.update(
        scale=scale,
        emulated_mbps_by_real_gbps={
            f"{g:g}": emulated_rate_bps(g, scale) / 1e6
            for g in sorted({lk.real_gbps for lk in fabric.links})
        },
        switching_demand_mbps=round(demand, 1),
        switch_capacity_mbps=capacity,
        envelope=env.source,
        fits=problem is None,
        problem=problem,
    )
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    table = Table(title=f"{fabric.kind} " + " ".join(f"{k}={v}" for k, v in fabric.params.items()))
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("hosts (GPUs)", str(info["gpus"]))
    if info["storage_nodes"]:
        table.add_row("storage nodes (hosts)", str(info["storage_nodes"]))
    table.add_row("switches", str(info["switches"]))
    for kind, n in info["links_by_kind"].items():
        if n:
            table.add_row(f"{kind} links", str(n))
    table.add_row("max oversubscription", f"{info['max_oversubscription']:.3g}:1")
    table.add_row("bisection (real)", f"{info['bisection_gbps']:g} Gbit/s")
    table.add_row("mean switches per path", f"{info['mean_switch_hops']:.2f}")
    for real, emu in info["emulated_mbps_by_real_gbps"].items():
        table.add_row(f"{real} Gbit/s link at scale {scale:g}", f"{emu:g} Mbit/s")
    fits = "[green]yes[/green]" if info["fits"] else "[red]no[/red]"
    table.add_row(
        "fits this machine", f"{fits} ({demand:.0f} of {capacity:.0f} Mbit/s switch-hop capacity)"
    )
    console.print(table)
    say(f"envelope: {escape(env.source)}")
    if problem:
        say(f"[red]does not fit[/red]: {escape(problem)}")
    return EXIT_OK

"""``kvfabric topo list`` and ``kvfabric topo show KIND k=v ...|SPEC``: fabrics as data,
with what a fabric asks of this machine at a bandwidth scale, and with ``--servers`` its
placement on several machines (a spec's: with its plan's traffic across them; no root)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from experiments.cli.common import EXIT_OK, console, say, scale_arg, unhonoured
from experiments.cli.topo_placement import parse_servers, placement_info, print_placement
from experiments.orchestration import envelope
from topologies import Fabric, FabricError, defaults, make_fabric
from topologies.generators import GENERATORS, parse_param
from topologies.grain import (
    BaseRtt,
    QueueGrain,
    base_rtt,
    dilation_sentence,
    limits_sentence,
    queue_grain,
    rtt_sentence,
)
from topologies.placement import MachineShare, Placement, place
from topologies.scale import Scale
from topologies.shaping import switching_demand_mbps

if TYPE_CHECKING:
    from experiments.orchestration.crossing import CrossTraffic
    from experiments.spec.load import RunSpec

TOPO_HINT = "see 'kvfabric topo list' for each fabric's parameters and defaults"


def add_parsers(sub: Any) -> None:
    t = sub.add_parser("topo", help="fabrics as data")
    tsub = t.add_subparsers(dest="topo_command", required=True)
    tsub.add_parser("list", help="fabric kinds and their parameters")
    ts = tsub.add_parser(
        "show", help="one fabric: counts, links, oversubscription, bisection, diameter"
    )
    ts.add_argument(
        "kind",
        help=f"one of {', '.join(GENERATORS)}, or a spec (SPEC.yaml or "
        "a bundled spec's name: its fabric and, with --servers, its traffic)",
    )
    ts.add_argument("params", nargs="*", metavar="k=v", help="generator parameters")
    ts.add_argument("--scale", help="bandwidth scale in (0, 1] (default 1e-4; a spec's own)")
    ts.add_argument(
        "--servers",
        metavar="N|a,b,...",
        help="place the fabric on N machines (or these names; name=Mbit/s gives "
        "a machine's switch-hop capacity, default this machine's envelope)",
    )
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
        params = " ".join(f"{k}={_shown(v)}" for k, v in defaults(kind).items())
        doc = " ".join((gen.__doc__ or "").split())
        table.add_row(kind, params, doc.split(". ")[0].rstrip("."))
    console.print(table)
    say(
        "rates (*_gbps) are real-equivalent Gbit/s, buffers packets; --scale S emulates "
        "a rate R at R x S (kvfabric topo show KIND --scale S)"
    )
    return EXIT_OK


def _shown(value: object) -> str:
    """A parameter's value as ``topo show`` takes it (``4,4`` for sizes)."""
    if isinstance(value, tuple | list):
        return ",".join(map(str, value))
    return value if isinstance(value, str) else f"{value:g}"


def _is_spec(argument: str) -> bool:
    from experiments.spec.load import bundled_names

    if argument in GENERATORS:
        return False
    return (
        argument.endswith((".yaml", ".yml"))
        or Path(argument).is_file()
        or (argument in bundled_names())
    )


def cmd_topo(args: argparse.Namespace) -> int:
    if args.topo_command == "list":
        return _topo_list()
    run, base_dir = None, None
    if _is_spec(args.kind):
        from experiments.spec.load import expand, load_spec, locate

        if args.params:
            raise FabricError(
                f"topo show {args.kind}: a spec's fabric comes from the spec; "
                f"k=v parameters ({args.params[0]}) are for fabric kinds"
            )
        spec = load_spec(locate(args.kind))
        run, base_dir = expand(spec)[0], spec.base_dir
        fabric = run.fabric()
        scale = scale_arg(args.scale, run.config.scale.mtu) if args.scale else run.config.scale
    else:
        scale = scale_arg(args.scale) if args.scale else Scale()
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
        scale=scale.bandwidth,
        emulated_mbps_by_real_gbps={
            f"{g:g}": scale.link_bps(g) / 1e6 for g in sorted({lk.real_gbps for lk in fabric.links})
        },
        switching_demand_mbps=round(demand, 1),
        switch_capacity_mbps=capacity,
        envelope=env.source,
        fits=problem is None,
        problem=problem,
    )
    rtt = base_rtt(fabric, scale)
    grain = queue_grain(fabric, scale, rtt)
    info["grain"] = {
        "time_dilation": scale.time_dilation,
        "base_rtt_us": rtt.rtt_us if rtt else None,
        "base_rtt_path": list(rtt.path) if rtt else None,
        "queues": [row.to_dict() for row in grain],
    }
    placed = None
    if args.servers is not None:
        machines = parse_servers(args.servers, capacity)
        placed = _placed(machines, run, base_dir, fabric, scale, env)
    if placed is not None:
        info["placement"] = placement_info(fabric, placed[0])
        if placed[1] is not None:
            info["placement"]["cross_traffic"] = placed[1].to_dict()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return EXIT_OK
    title = " ".join(f"{k}={_shown(v)}" for k, v in fabric.params.items())
    table = Table(title=f"{fabric.kind} {title}")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("hosts (GPUs)", str(info["gpus"]))
    if info["storage_nodes"]:
        table.add_row("storage nodes (hosts)", str(info["storage_nodes"]))
    routers = all(sw.kind == "router" for sw in fabric.switches)
    table.add_row("routers" if routers else "switches", str(info["switches"]))
    for kind, n in info["links_by_kind"].items():
        if n:
            table.add_row(f"{kind} links", str(n))
    table.add_row("max oversubscription", f"{info['max_oversubscription']:.3g}:1")
    table.add_row("bisection (real)", f"{info['bisection_gbps']:g} Gbit/s")
    table.add_row("mean switches per path", f"{info['mean_switch_hops']:.2f}")
    table.add_row("diameter (switch-to-switch hops)", str(info["diameter"]))
    for real, emu in info["emulated_mbps_by_real_gbps"].items():
        table.add_row(f"{real} Gbit/s link at scale {scale.bandwidth:g}", f"{emu:g} Mbit/s")
    fits = "[green]yes[/green]" if info["fits"] else "[red]no[/red]"
    table.add_row(
        "fits this machine", f"{fits} ({demand:.0f} of {capacity:.0f} Mbit/s switch-hop capacity)"
    )
    console.print(table)
    if routers:  # no uplinks to divide by: the topologies.dragonfly docstring says why
        say(
            "router oversubscription: hosts ÷ their share of the bisection"
            " (bisection ÷ half the routers with GPUs; 1 is full bisection)"
        )
    _print_grain(grain, rtt, scale)
    say(f"envelope: {escape(env.source)}")
    if problem:
        say(f"[red]does not fit[/red]: {escape(problem)}")
    if placed is not None:
        print_placement(fabric, *placed)
    return EXIT_OK


def _print_grain(grain: list[QueueGrain], rtt: BaseRtt | None, scale: Scale) -> None:
    """The grain of the fabric's queues (``topologies.grain``) as a table and three lines."""
    per_packet = f"{scale.real_bytes_per_packet:,.0f}"
    table = Table(
        title=f"grain of the fabric's queues: a packet is {per_packet} real bytes",
        caption="real-equivalent µs; buffer B are emulated bytes",
    )
    for name in (
        "egress",
        "ports",
        "Gbit/s",
        "buffer pkts",
        "buffer B",
        "buffer µs real",
        "BDP pkts",
        "wall Mbit/s",
    ):
        table.add_column(
            name, justify="left" if name == "egress" else "right", no_wrap=name == "egress"
        )
    for row in grain:
        table.add_row(
            "\n".join(row.directions),
            str(row.n_ports),
            f"{row.real_gbps:g}",
            str(row.buffer_pkts),
            f"{row.buffer_bytes:,}",
            f"{row.buffer_real_us:,.4g}"
            if row.buffer_real_us < 1e4
            else f"{row.buffer_real_us:,.0f}",
            "–" if row.bdp_pkts is None else f"{row.bdp_pkts:.3g}",
            "–" if row.wall_mbps is None else _rate_text(row.wall_mbps),
        )
    console.print(table)
    for line in (rtt_sentence(rtt), dilation_sentence(scale), limits_sentence(scale)):
        say(escape(line))


def _rate_text(mbps: float) -> str:
    return f"{mbps:,.0f}" if mbps >= 100 else f"{mbps:.3g}"


def _placed(
    machines: list[MachineShare],
    run: RunSpec | None,
    base_dir: Path | None,
    fabric: Fabric,
    scale: Scale,
    env: envelope.Envelope,
) -> tuple[Placement, CrossTraffic | None]:
    """The fabric placed on ``machines`` and, for a spec's run, its plan's crossings."""
    placement = place(fabric, machines, scale=scale)
    if run is None:
        return placement, None
    from experiments.orchestration.crossing import plan_cross_traffic
    from experiments.orchestration.plan import traffic_plan

    plan = traffic_plan(run.config, fabric, base_dir, env)
    config = dataclasses.replace(run.config, scale=scale)
    return placement, plan_cross_traffic(placement, fabric, plan, config)

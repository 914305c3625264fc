"""``kvfabric topo show ... --servers N|a,b|a=MBPS,...``: a fabric's placement on
several machines (``topologies.placement``) and, for a spec, the traffic its plan
sends across each machine boundary (``experiments.orchestration.crossing``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from rich.table import Table

from experiments.cli.common import console, say
from experiments.orchestration.crossing import CrossTraffic
from topologies import Fabric, FabricError
from topologies.fabric import HOST_KINDS, SWITCH_KINDS
from topologies.placement import MachineShare, Placement

SHOWN_LINKS = 6  # cut links listed per group; --json lists every one


def parse_servers(text: str, capacity_mbps: float) -> list[MachineShare]:
    """``N`` machines m1..mN, or names ``a,b,c``, each optionally ``name=Mbit/s``; a
    machine without a figure gets ``capacity_mbps`` (this machine's envelope)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return [MachineShare(f"m{i + 1}", capacity_mbps) for i in range(int(text))]
    machines = []
    for item in text.split(","):
        name, sep, figure = item.strip().partition("=")
        try:
            capacity = float(figure) if sep else capacity_mbps
        except ValueError:
            raise FabricError(
                f"--servers {text}: {item!r} must look like name or name=Mbit/s "
                "(its switch-hop capacity)",
                "servers",
            ) from None
        machines.append(MachineShare(name.strip(), capacity))
    return machines


def compact(fabric: Fabric, names: Iterable[str]) -> str:
    """Node names as runs: ``rail0..rail2, spine0, gpu0_0..gpu7_3`` (consecutive numbers
    of one kind become one run)."""
    runs: list[list[str]] = []
    last: tuple[str, int] | None = None
    kinds = SWITCH_KINDS + HOST_KINDS
    nodes = sorted(
        (fabric.node(n) for n in names), key=lambda n: (n.is_host, kinds.index(n.kind), n.number)
    )
    for node in nodes:
        if last is not None and last == (node.kind, node.number - 1):
            runs[-1].append(node.name)
        else:
            runs.append([node.name])
        last = (node.kind, node.number)
    parts = [
        r[0] if len(r) == 1 else ", ".join(r) if len(r) == 2 else f"{r[0]}..{r[-1]}" for r in runs
    ]
    return ", ".join(parts) or "-"


def _servers_of(fabric: Fabric, hosts: Iterable[str]) -> str:
    gpus = [fabric.node(h) for h in hosts if fabric.node(h).kind == "gpu"]
    servers = {g.server for g in gpus}
    storage = sum(fabric.node(h).kind == "storage" for h in hosts)
    text = f"{len(gpus)} GPUs" + (f" in {len(servers)} servers" if len(servers) < len(gpus) else "")
    return text + (f", {storage} storage" if storage else "")


def placement_info(fabric: Fabric, placement: Placement) -> dict[str, Any]:
    return placement.to_dict() | {"basis": "switch-hop demand with every GPU at line rate"}


def print_placement(
    fabric: Fabric,
    placement: Placement,
    crossing: CrossTraffic | None,
    *,
    chosen: str = "balanced by capacity",
    fix: str = "more --servers, or a lower --scale",
) -> None:
    """The placement's machines, its cut links and the traffic crossing them. ``chosen``
    says how the nodes were placed; ``fix`` what to do about a machine that does not fit."""
    scale = placement.scale.bandwidth
    table = Table(
        title=f"placement on {len(placement.machines)} machines (switch-hop demand "
        f"with every GPU at line rate, {chosen})"
    )
    for name, justify in (
        ("machine", "left"),
        ("switches", "left"),
        ("hosts", "left"),
        ("switch-hop Mbit/s", "right"),
        ("share", "right"),
        ("fits", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for m in placement.machines:
        hosts = f"{compact(fabric, m.hosts)} ({_servers_of(fabric, m.hosts)})" if m.hosts else "-"
        of = f" of {m.capacity_mbps:.0f}" if m.capacity_mbps is not None else ""
        fits = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "-"}[m.fits]
        table.add_row(
            m.name,
            compact(fabric, m.switches),
            hosts,
            f"{m.demand_mbps:.0f}{of}",
            f"{m.share:.0%}",
            fits,
        )
    console.print(table)
    for m in placement.machines:
        if m.fits is False:
            say(
                f"[red]{m.name} does not fit[/red]: {m.demand_mbps:.0f} of {m.capacity_mbps:.0f} "
                f"Mbit/s switch-hop capacity ({fix})"
            )
    groups: dict[tuple[str, str, str, float], list[str]] = defaultdict(list)
    for lk in placement.cut:
        ends = sorted((placement.machine_of[lk.a], placement.machine_of[lk.b]))
        groups[(ends[0], ends[1], lk.kind, lk.real_gbps)].append(f"{lk.a}-{lk.b}")
    emulated = placement.scale.link_mbps(placement.cut_gbps)
    cut = Table(
        title=f"cut: {len(placement.cut)} links, {placement.cut_gbps:g} Gbit/s real "
        f"({emulated:g} Mbit/s at scale {scale:g})"
    )
    for name in ("machines", "kind", "Gbit/s each", "links"):
        cut.add_column(name)
    for (a, b, kind, gbps), links in groups.items():
        shown = ", ".join(links[:SHOWN_LINKS])
        more = f" ... (+{len(links) - SHOWN_LINKS} more)" if len(links) > SHOWN_LINKS else ""
        cut.add_row(f"{a}-{b}", kind, f"{gbps:g}", f"{shown}{more} ({len(links)})")
    console.print(cut)
    if crossing is not None:
        _print_crossing(crossing)


def _print_crossing(crossing: CrossTraffic) -> None:
    table = Table(
        title=f"the plan's traffic across machine boundaries: "
        f"{crossing.crossing_bytes / 1e9:.3g} GB (each crossing counted) of "
        f"the {crossing.total_bytes / 1e9:.3g} GB it sends"
    )
    for name in ("from", "to", "over link", "GB (real)", "messages", "peak Mbit/s (emulated)"):
        table.add_column(name)
    for row in crossing.pairs.itertuples(index=False):
        table.add_row(
            row.from_machine,
            row.to_machine,
            "all",
            f"{row.bytes / 1e9:.3g}",
            str(row.messages),
            f"{row.peak_mbps:.3g}",
        )
    for row in crossing.links.head(12).itertuples(index=False):
        link = f"{row.from_node}->{row.to_node}"
        table.add_row(
            row.from_machine,
            row.to_machine,
            link,
            f"{row.bytes / 1e9:.3g}",
            str(row.messages),
            f"{row.peak_mbps:.3g}",
        )
    console.print(table)
    if len(crossing.links) > 12:
        say(f"... and {len(crossing.links) - 12} more cut-link directions (--json lists them)")

"""Placement: which machine of a cluster emulates each node of a fabric (pure data).

``place(fabric, machines)`` partitions the fabric's nodes over the machines so that:

- every GPU server stays whole on one machine: its GPUs (the hosts of one ``server``)
  with the NVLink switch between them; a host or storage node with a single switch
  (a spine-leaf or fat-tree host, a storage node) stays with that switch, since it
  forwards nothing and so only costs a cut link elsewhere;
- the load is balanced by each machine's capacity: no machine takes more than
  ``(1 + imbalance)`` times its share. The load is **switch-hop demand**, computed
  from the fabric alone: what the switches placed on a machine forward when every
  GPU sends at its host-link rate to all others (``topologies.switch_work``; the
  shares add up to the one-machine figure ``kvfabric topo show`` prints), in emulated
  Mbit/s at the bandwidth ``scale``;
- within that bound the cut is smallest: the summed real-equivalent rate of the links
  whose ends are on different machines (``topologies.partition``), so rails and leaves
  go with their servers where the bound lets them, and spines where they cut least.

A machine's capacity (its envelope's switch-hop Mbit/s) weighs its share and says
whether its part ``fits``; without capacities the machines are weighed equally and
nothing is judged. The same input always gives the same placement.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .fabric import Fabric, FabricError, Link
from .partition import partition
from .scale import DEFAULT_SCALE, Scale
from .switch_work import switch_work_gbps


@dataclass(frozen=True)
class MachineShare:
    """One machine of the cluster; ``capacity_mbps``: the switch-hop Mbit/s it emulates
    faithfully (its calibrated envelope), or None to weigh every machine equally."""

    name: str
    capacity_mbps: float | None = None


@dataclass(frozen=True)
class MachineLoad:
    """What one machine emulates: its nodes and its share of the switch-hop demand."""

    name: str
    nodes: tuple[str, ...]
    hosts: tuple[str, ...]
    switches: tuple[str, ...]
    demand_mbps: float  # emulated switch-hop Mbit/s with every GPU at line rate
    share: float  # of the whole fabric's switch-hop demand
    capacity_mbps: float | None

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_mbps is None else self.demand_mbps <= self.capacity_mbps


@dataclass(frozen=True)
class Placement:
    """The machine of every node, the links cut between machines, and each machine's part."""

    machine_of: Mapping[str, str]
    cut: tuple[Link, ...]
    machines: tuple[MachineLoad, ...]
    scale: Scale

    @property
    def cut_gbps(self) -> float:
        """Real-equivalent capacity of the cut links (one direction each)."""
        return sum(link.real_gbps for link in self.cut)

    def machine(self, name: str) -> MachineLoad:
        for m in self.machines:
            if m.name == name:
                return m
        raise FabricError(f"no machine named {name!r} in this placement", "servers")

    def to_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale.bandwidth,
            "cut_gbps": self.cut_gbps,
            "cut": [
                {
                    "a": lk.a,
                    "b": lk.b,
                    "kind": lk.kind,
                    "real_gbps": lk.real_gbps,
                    "machines": [self.machine_of[lk.a], self.machine_of[lk.b]],
                }
                for lk in self.cut
            ],
            "machines": [
                {
                    "name": m.name,
                    "hosts": list(m.hosts),
                    "switches": list(m.switches),
                    "demand_mbps": round(m.demand_mbps, 3),
                    "share": round(m.share, 4),
                    "capacity_mbps": m.capacity_mbps,
                    "fits": m.fits,
                }
                for m in self.machines
            ],
        }


def place(
    fabric: Fabric,
    machines: Sequence[MachineShare],
    *,
    scale: Scale = DEFAULT_SCALE,
    imbalance: float = 0.25,
) -> Placement:
    """The placement of ``fabric`` on ``machines`` (see the module's docstring). Raises
    FabricError naming ``servers`` for no machines, duplicate names, bad capacities, more
    machines than groups to give them, or a GPU server no machine can hold."""
    _check_machines(machines, imbalance)
    groups = units(fabric)
    if len(machines) > len(groups):
        raise FabricError(
            f"--servers {len(machines)}: this {fabric.kind} fabric has {len(groups)} groups of "
            f"nodes to place (GPU servers, switches with their single-homed hosts): at most "
            f"{len(groups)} machines",
            "servers",
        )
    mbps = {k: scale.link_mbps(v) for k, v in switch_work_gbps(fabric).items()}
    loads = [sum(mbps.get(n, 0.0) for n in group) for group in groups]
    _check_servers_fit(fabric, groups, loads, machines)
    index = {name: i for i, group in enumerate(groups) for name in group}
    edges: dict[tuple[int, int], float] = defaultdict(float)
    for link in fabric.links:
        a, b = sorted((index[link.a], index[link.b]))
        if a != b:
            edges[(a, b)] += link.real_gbps
    weights = [float(m.capacity_mbps or 1.0) for m in machines]  # all given, or none
    part = partition(loads, edges, weights, _starts(fabric, groups, loads, weights), imbalance)
    machine_of = {name: machines[part[index[name]]].name for name in index}
    return placement_of(fabric, machine_of, machines, scale=scale)


def placement_of(
    fabric: Fabric,
    machine_of: Mapping[str, str],
    machines: Sequence[MachineShare],
    *,
    scale: Scale = DEFAULT_SCALE,
) -> Placement:
    """The ``Placement`` of a given assignment (every node of ``fabric`` to one of
    ``machines`` by name): its cut and each machine's switch-hop demand, as ``place``
    reports its own. The caller checks the assignment (``server_domains`` kept whole)."""
    mbps = {k: scale.link_mbps(v) for k, v in switch_work_gbps(fabric).items()}
    total = sum(mbps.values())
    out = []
    for m in machines:
        nodes = [n.name for n in fabric.nodes if machine_of[n.name] == m.name]
        demand = sum(mbps.get(n, 0.0) for n in nodes)
        out.append(
            MachineLoad(
                m.name,
                tuple(nodes),
                tuple(n for n in nodes if fabric.node(n).is_host),
                tuple(n for n in nodes if not fabric.node(n).is_host),
                demand,
                demand / total if total > 0 else 0.0,
                m.capacity_mbps,
            )
        )
    cut = tuple(lk for lk in fabric.links if machine_of[lk.a] != machine_of[lk.b])
    return Placement(dict(machine_of), cut, tuple(out), scale)


def _check_machines(machines: Sequence[MachineShare], imbalance: float) -> None:
    if len(machines) < 1:
        raise FabricError(
            f"--servers {len(machines)} is not allowed: at least 1 machine", "servers"
        )
    names = [m.name for m in machines]
    if len(set(names)) != len(names) or not all(names):
        raise FabricError(
            f"--servers {','.join(names)}: machine names must be unique and not empty", "servers"
        )
    given = [m.capacity_mbps is not None for m in machines]
    if any(given) and not all(given):
        raise FabricError("--servers: give a capacity for every machine or for none", "servers")
    for m in machines:
        c = m.capacity_mbps
        if c is not None and not (isinstance(c, int | float) and math.isfinite(c) and c > 0):
            raise FabricError(
                f"--servers: machine {m.name}'s capacity {c!r} is not allowed: "
                "must be switch-hop Mbit/s > 0",
                "servers",
            )
    if not (math.isfinite(imbalance) and imbalance >= 0):
        raise FabricError(f"imbalance={imbalance!r} is not allowed: must be >= 0", "imbalance")


def server_domains(fabric: Fabric) -> dict[int, tuple[str, ...]]:
    """Each GPU server's NVLink domain, which no placement splits: server number -> its
    GPUs and the NVLink switch between them, in fabric order (GPUs without a ``server``,
    as on spine-leaf and fat-tree, are single hosts and have none)."""
    members: dict[int, set[str]] = defaultdict(set)
    for gpu in fabric.gpus:
        if gpu.server is not None:
            members[gpu.server].add(gpu.name)
            nvl = fabric.nvlink_switch_of(gpu.name)
            if nvl is not None:
                members[gpu.server].add(nvl)
    return {
        s: tuple(n.name for n in fabric.nodes if n.name in names)
        for s, names in sorted(members.items())
    }


def units(fabric: Fabric) -> list[tuple[str, ...]]:
    """The units placed whole, in fabric order: GPU servers (with their NVLink switch),
    and each other switch with the hosts that have no other switch."""
    parent = {n.name: n.name for n in fabric.nodes}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def join(a: str, b: str) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb, key=_order(fabric))] = min(ra, rb, key=_order(fabric))

    for domain in server_domains(fabric).values():
        for name in domain:
            join(domain[0], name)
    members: dict[str, list[str]] = defaultdict(list)
    for n in fabric.nodes:
        members[root(n.name)].append(n.name)
    for names in list(members.values()):  # a server without an NVLink switch
        if all(fabric.node(n).is_host for n in names):
            peers = {lk.other(n) for n in names for lk in fabric.links_of(n)} - set(names)
            if len(peers) == 1:
                join(names[0], peers.pop())
    order = _order(fabric)
    found: dict[str, list[str]] = defaultdict(list)
    for n in fabric.nodes:
        found[root(n.name)].append(n.name)
    return sorted((tuple(g) for g in found.values()), key=lambda g: order(g[0]))


def _order(fabric: Fabric) -> Any:
    position = {n.name: i for i, n in enumerate(fabric.nodes)}
    return position.__getitem__


def _server_group(fabric: Fabric, group: tuple[str, ...]) -> bool:
    return any(fabric.node(n).kind == "nvlink" for n in group)


def _check_servers_fit(
    fabric: Fabric,
    groups: list[tuple[str, ...]],
    loads: list[float],
    machines: Sequence[MachineShare],
) -> None:
    largest = max(machines, key=lambda m: m.capacity_mbps or 0.0)
    if largest.capacity_mbps is None:
        return
    for group, load in zip(groups, loads, strict=True):
        if _server_group(fabric, group) and load > largest.capacity_mbps:
            nvl = next(n for n in group if fabric.node(n).kind == "nvlink")
            raise FabricError(
                f"--servers: GPU server {fabric.node(nvl).server} ({len(group) - 1} GPUs on "
                f"{nvl}) needs {load:.0f} Mbit/s of switch-hop work, more than the largest "
                f"machine, {largest.name}, holds ({largest.capacity_mbps:.0f}): a server is "
                "never split; use a smaller scale",
                "servers",
            )


def _starts(
    fabric: Fabric, groups: list[tuple[str, ...]], loads: list[float], weights: list[float]
) -> list[list[int]]:
    """Starting assignments: the groups with hosts in fabric order, as many to each
    machine as its share, each other group then on the machine its links reach most
    (where it has room); and all groups in fabric order, each machine filled to its share."""
    total, parts = sum(loads) or 1.0, len(weights)
    bounds = [sum(weights[: i + 1]) / sum(weights) for i in range(parts)]

    def fill(items: list[int], load: Mapping[int, float]) -> dict[int, int]:
        out, done, p = {}, 0.0, 0
        whole = sum(load.values()) or 1.0
        for i in items:
            out[i] = p
            done += load[i]
            while p < parts - 1 and done >= bounds[p] * whole - 1e-9:
                p += 1
        return out

    by_order = fill(list(range(len(groups))), dict(enumerate(loads)))
    servers = [i for i, g in enumerate(groups) if any(fabric.node(n).is_host for n in g)]
    first = fill(servers, dict.fromkeys(servers, 1.0)) if servers else {}
    index = {name: i for i, group in enumerate(groups) for name in group}
    per_part = [0.0] * parts
    for i, p in first.items():
        per_part[p] += loads[i]
    for i in range(len(groups)):
        if i in first:
            continue
        pull = [0.0] * parts
        for name in groups[i]:
            for link in fabric.links_of(name):
                j = index[link.other(name)]
                if j in first:
                    pull[first[j]] += link.real_gbps
        room = [weights[p] / sum(weights) * total - per_part[p] for p in range(parts)]
        best = max(range(parts), key=lambda p: (room[p] >= loads[i], pull[p], room[p]))
        first[i] = best
        per_part[best] += loads[i]
    return [[first[i] for i in range(len(groups))], [by_order[i] for i in range(len(groups))]]

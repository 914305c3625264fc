"""Routing intents to rules and select groups, and the ECMP routes themselves.

A switch gets one ``select`` group per distinct set of equal-cost ports it
uses; group ids are 1, 2, ... in the sorted order of those port sets, so the
same fabric and state always give the same ids, and a link failure that
shrinks a switch's only set keeps its id (one GroupMod MODIFY, no FlowMod).
OVS hashes each packet's 5-tuple to pick a bucket itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from topologies import Fabric

from .core import PRIORITY_ROUTE, Forward
from .rules import IPV4, Group, Rule, RuleSet
from .ties import DEFAULT_SEED, preferred


def route_match(dst_ip: str) -> tuple[tuple[str, object], ...]:
    return (("eth_type", IPV4), ("ipv4_dst", dst_ip))


def destination_routes(
    fabric: Fabric,
    hops: dict[str, dict[str, list[tuple[str, int]]]],
    spread: bool,
    seed: int = DEFAULT_SEED,
) -> list[Forward]:
    """One route per switch and reachable destination host: to every
    equal-cost port if ``spread`` (ECMP), else to the one the switch prefers under the
    run's ``seed`` (``ties.preferred``: the same port for every destination)."""
    forwards = []
    for sw, per_dst in hops.items():
        for dst, next_hops in per_dst.items():
            ports = tuple(port for _peer, port in next_hops)
            if not spread and len(ports) > 1:
                ports = (preferred(seed, sw, ports),)
            ip = fabric.node(dst).ip or ""
            forwards.append(Forward(sw, PRIORITY_ROUTE, route_match(ip), ports))
    return forwards


def materialise(forwards: Iterable[Forward]) -> RuleSet:
    """Rules (and the select groups they point at) for routing intents."""
    forwards = list(forwards)
    port_sets: dict[str, set[tuple[int, ...]]] = defaultdict(set)
    for fw in forwards:
        if len(fw.ports) > 1:
            port_sets[fw.switch].add(tuple(sorted(fw.ports)))
    group_id: dict[tuple[str, tuple[int, ...]], int] = {}
    groups = []
    for sw in sorted(port_sets):
        for number, ports in enumerate(sorted(port_sets[sw]), start=1):
            group_id[(sw, ports)] = number
            buckets = tuple((("output", p),) for p in ports)
            groups.append(Group(sw, number, "select", buckets))
    rules = []
    for fw in forwards:
        if not fw.ports:
            continue
        if len(fw.ports) == 1:
            action = ("output", fw.ports[0])
        else:
            action = ("group", group_id[(fw.switch, tuple(sorted(fw.ports)))])
        rules.append(Rule(fw.switch, fw.priority, fw.match, (action,), table=fw.table))
    return RuleSet(rules=rules, groups=groups)

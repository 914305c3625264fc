"""Walk packets through rules as data (a fake flow table, Faucet-style), so
policies can be checked for reachability and loops without any switch.

Each switch runs its pipeline from table 0: the highest-priority matching
rule applies its actions in order (``set_field`` rewrites the packet,
``output``/``group`` emit copies, ``output:CONTROLLER`` is noted) and
``goto_table`` continues in a later table. Every bucket of a select group is
explored, so a trace returns every path the hashing could choose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from topologies import Fabric

from .core import ingress
from .rules import CONTROLLER, IPV4, Group, Rule, RuleSet

MAX_HOPS = 32


class ForwardingError(AssertionError):
    """A packet would loop, be dropped or arrive at the wrong host."""


@dataclass
class Delivery:
    """One way a packet reached its destination: the nodes it crossed, the
    packet as delivered, and the switches that copied it to the controller."""

    path: list[str]
    packet: dict[str, Any]
    to_controller: list[str] = field(default_factory=list)


def _matches(match: tuple[tuple[str, Any], ...], packet: dict) -> bool:
    return all(packet.get(k) == v for k, v in match)


def _pipeline(
    node: str, flows: list[Rule], groups: dict[int, Group], packet: dict
) -> tuple[list[tuple[int, dict]], bool]:
    """(port, packet) copies this switch emits, and whether it packet-ins."""
    emitted: list[tuple[int, dict]] = []
    controller = False
    table = 0
    while True:
        hits = [r for r in flows if r.table == table and _matches(r.match, packet)]
        if not hits:
            return emitted, controller
        top = max(r.priority for r in hits)
        best = {r.actions for r in hits if r.priority == top}
        if len(best) > 1:
            raise ForwardingError(f"{node}: overlapping rules at priority {top} in table {table}")
        actions = best.pop()
        next_table = None
        for name, value in actions:
            if name == "set_field":
                packet = dict(packet, **{value[0]: value[1]})
            elif name == "output" and value == CONTROLLER:
                controller = True
            elif name == "output":
                emitted.append((value, packet))
            elif name == "group":
                if value not in groups:
                    raise ForwardingError(f"{node}: rule points at missing group {value}")
                emitted += [(port, packet) for port in groups[value].outputs()]
            elif name == "goto_table":
                if value <= table:
                    raise ForwardingError(f"{node}: goto_table {value} from table {table}")
                next_table = value
        if next_table is None:
            return emitted, controller
        table = next_table


def deliveries(
    fabric: Fabric, rules: RuleSet, src: str, dst: str, **fields: object
) -> list[Delivery]:
    """Every way a packet from host ``src`` to host ``dst`` (with extra header
    ``fields`` such as ``ip_proto=6, tcp_src=..``) is delivered. Raises
    ForwardingError on a loop, a drop or a wrong destination."""
    packet: dict[str, Any] = {
        "eth_type": IPV4,
        "ipv4_src": fabric.node(src).ip,
        "ipv4_dst": fabric.node(dst).ip,
        "ip_dscp": 0,
    }
    packet.update(fields)
    by_switch: dict[str, tuple[list[Rule], dict[int, Group]]] = {
        sw.name: ([], {}) for sw in fabric.switches
    }
    for rule in rules.rules:  # one pass: Valiant's source+destination rules are many
        if rule.switch in by_switch:
            by_switch[rule.switch][0].append(rule)
    for group in rules.groups:
        if group.switch in by_switch:
            by_switch[group.switch][1][group.group_id] = group
    done: list[Delivery] = []
    first, in_port = ingress(fabric, src, dst)
    stack = [([src, first], in_port, packet, [])]
    while stack:
        path, in_port, packet, ctrl = stack.pop()
        node = path[-1]
        if fabric.node(node).is_host:
            if node != dst:
                raise ForwardingError(f"{src}->{dst} delivered to {node} via {path}")
            done.append(Delivery(path, packet, ctrl))
            continue
        if len(path) > MAX_HOPS or node in path[:-1]:
            raise ForwardingError(f"{src}->{dst} loops: {path}")
        flows, groups = by_switch[node]
        emitted, controller = _pipeline(node, flows, groups, dict(packet, in_port=in_port))
        ctrl = ctrl + [node] if controller else ctrl
        if not emitted:
            raise ForwardingError(f"{src}->{dst} dropped at {node} (no rule) via {path}")
        for port, out in emitted:
            link = next((lk for lk in fabric.links_of(node) if lk.port_of(node) == port), None)
            if link is None:
                raise ForwardingError(f"{node} outputs to port {port}, which has no link")
            peer = link.other(node)
            out = {k: v for k, v in out.items() if k != "in_port"}
            stack.append((path + [peer], link.port_of(peer), out, ctrl))
    return sorted(done, key=lambda d: d.path)


def trace(fabric: Fabric, rules: RuleSet, src: str, dst: str, **fields: object) -> list[list[str]]:
    """Every path a packet from host ``src`` to host ``dst`` can take (all
    buckets of select groups are explored). Raises ForwardingError on a loop,
    a drop or a wrong destination."""
    return [d.path for d in deliveries(fabric, rules, src, dst, **fields)]

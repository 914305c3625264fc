"""Walk packets through rules as data (a fake flow table, Faucet-style), so
policies can be checked for reachability and loops without any switch."""

from __future__ import annotations

from topologies import Fabric
from topologies.hostconfig import network_port

from .rules import IPV4, RuleSet

MAX_HOPS = 32


class ForwardingError(AssertionError):
    """A packet would loop, be dropped or arrive at the wrong host."""


def _first_switch(fabric: Fabric, src: str, dst: str) -> tuple[str, int]:
    """Where ``src``'s routing table sends a packet for ``dst``: (switch, in_port)."""
    nvl = fabric.nvlink_switch_of(src)
    port = fabric.port(src, nvl) if nvl and fabric.same_server(src, dst) else None
    port = network_port(fabric, src) if port is None else port
    link = next(lk for lk in fabric.links_of(src) if lk.port_of(src) == port)
    peer = link.other(src)
    return peer, link.port_of(peer)


def _matches(match: dict, packet: dict) -> bool:
    return all(packet.get(k) == v for k, v in match.items())


def trace(fabric: Fabric, rules: RuleSet, src: str, dst: str, **fields: object) -> list[list[str]]:
    """Every path a packet from host ``src`` to host ``dst`` can take (all
    buckets of select groups are explored). Raises ForwardingError on a loop,
    a drop or a wrong destination."""
    packet = {"eth_type": IPV4, "ipv4_src": fabric.node(src).ip, "ipv4_dst": fabric.node(dst).ip}
    packet.update(fields)
    by_switch = {sw.name: rules.for_switch(sw.name) for sw in fabric.switches}
    paths: list[list[str]] = []
    first, in_port = _first_switch(fabric, src, dst)
    stack = [([src, first], in_port)]
    while stack:
        path, in_port = stack.pop()
        node = path[-1]
        if fabric.node(node).is_host:
            if node != dst:
                raise ForwardingError(f"{src}->{dst} delivered to {node} via {path}")
            paths.append(path)
            continue
        if len(path) > MAX_HOPS or node in path[:-1]:
            raise ForwardingError(f"{src}->{dst} loops: {path}")
        flows, groups = by_switch[node]
        here = dict(packet, in_port=in_port)
        hits = [r for r in flows if _matches(r.match_dict(), here)]
        if not hits:
            raise ForwardingError(f"{src}->{dst} dropped at {node} (no rule) via {path}")
        best = max(hits, key=lambda r: r.priority)
        ports = list(best.outputs())
        gid = best.group()
        if gid is not None:
            group = next((g for g in groups if g.group_id == gid), None)
            if group is None:
                raise ForwardingError(f"{node}: rule points at missing group {gid}")
            ports += group.outputs()
        if not ports:
            raise ForwardingError(f"{src}->{dst} dropped at {node} (no output) via {path}")
        for port in ports:
            link = next((lk for lk in fabric.links_of(node) if lk.port_of(node) == port), None)
            if link is None:
                raise ForwardingError(f"{node} outputs to port {port}, which has no link")
            peer = link.other(node)
            stack.append((path + [peer], link.port_of(peer)))
    return sorted(paths)

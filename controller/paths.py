"""Equal-cost next hops towards every host: the one computation every policy shares."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from topologies import Fabric


def next_hops(
    fabric: Fabric, down: Iterable[tuple[str, str]] = ()
) -> dict[str, dict[str, list[tuple[str, int]]]]:
    """For every switch and destination host: the neighbours (with the switch's
    port towards each) that lie on a fewest-hop path, sorted by port.

    Hosts are endpoints only, never transit; links in ``down`` are ignored.
    A switch with no entry for a host cannot reach it.
    """
    dead = {frozenset(p) for p in down}
    adj: dict[str, list[tuple[str, int]]] = {n.name: [] for n in fabric.nodes}
    for link in fabric.links:
        if frozenset(link.ends()) in dead:
            continue
        adj[link.a].append((link.b, link.a_port))
        adj[link.b].append((link.a, link.b_port))
    is_host = {n.name: n.is_host for n in fabric.nodes}
    table: dict[str, dict[str, list[tuple[str, int]]]] = {s.name: {} for s in fabric.switches}
    for dst in (h.name for h in fabric.hosts):
        dist = _distances_to(dst, adj, is_host)
        for sw in table:
            d = dist.get(sw)
            if d is None:
                continue
            hops = [(n, port) for n, port in adj[sw] if dist.get(n) == d - 1]
            table[sw][dst] = sorted(hops, key=lambda hop: hop[1])
    return table


def _distances_to(
    dst: str, adj: dict[str, list[tuple[str, int]]], is_host: dict[str, bool]
) -> dict[str, int]:
    dist = {dst: 0}
    queue = deque([dst])
    while queue:
        node = queue.popleft()
        for peer, _port in adj[node]:
            if peer in dist or is_host[peer]:
                continue
            dist[peer] = dist[node] + 1
            queue.append(peer)
    return dist

"""Minimal routes of low-diameter fabrics, and the routes a hop table lets a packet take.

On a dragonfly, minimal means one global link at most: local to a router of the
source group that has a global link to the destination group (or that link from the
router itself), the global link, then local to the destination's router. That is not
always the fewest-hop route (a detour through a third group can tie or win), so the
table is built from the groups, not by breadth-first search. A destination whose
minimal routes failures have broken (a group left no live link to its group) is routed
by the fewest-hop table at every switch, so that no two tables mix on one packet's way.
Every other fabric (a HyperX among them: its fewest-hop routes are its minimal ones,
one hop per dimension that differs) uses ``paths.next_hops``.

``Hops`` is ``paths.next_hops``'s table: switch -> destination host -> [(neighbour,
port)], sorted by port.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import cache

from topologies import Fabric
from topologies.hostconfig import network_port

from .paths import next_hops

Hops = dict[str, dict[str, list[tuple[str, int]]]]
MAX_ROUTES = 1024  # routes listed per (switch, destination); a HyperX of 4 dimensions has 24


def minimal_hops(fabric: Fabric, down: Iterable[tuple[str, str]] = ()) -> Hops:
    """The minimal next hops of every switch towards every host (links in ``down`` unused)."""
    down = list(down)
    fewest = next_hops(fabric, down)
    if fabric.kind != "dragonfly":
        return fewest
    table = _dragonfly_hops(fabric, {frozenset(p) for p in down})
    for dst in (h.name for h in fabric.hosts):
        if any(dst in fewest[sw] and not table[sw].get(dst) for sw in table):
            for sw in table:
                table[sw].pop(dst, None)
                if dst in fewest[sw]:
                    table[sw][dst] = fewest[sw][dst]
    return table


def _dragonfly_hops(fabric: Fabric, dead: set[frozenset[str]]) -> Hops:
    group = {sw.name: sw.pod for sw in fabric.switches}
    local: dict[str, dict[str, int]] = {sw: {} for sw in group}
    out: dict[str, dict[int, list[tuple[str, int]]]] = {sw: {} for sw in group}
    attached: dict[str, tuple[str, int]] = {}  # host -> (its router, the router's port)
    for link in fabric.links:
        if frozenset(link.ends()) in dead:
            continue
        for end in link.ends():
            peer = link.other(end)
            if end not in group:
                attached[end] = (peer, link.port_of(peer))
            elif peer in group and group[peer] == group[end]:
                local[end][peer] = link.port_of(end)
            elif peer in group:
                out[end].setdefault(group[peer], []).append((peer, link.port_of(end)))
    table: Hops = {sw: {} for sw in group}
    for dst, (router, port) in attached.items():
        for sw in group:
            if sw == router:
                hops = [(dst, port)]
            elif group[sw] == group[router]:
                hops = [(router, local[sw][router])] if router in local[sw] else []
            elif group[router] in out[sw]:
                hops = out[sw][group[router]]
            else:
                hops = [(gw, p) for gw, p in local[sw].items() if group[router] in out[gw]]
            if hops:
                table[sw][dst] = sorted(hops, key=lambda hop: hop[1])
    return table


def routes(hops: Hops, switch: str, dst: str) -> list[list[str]]:
    """Every route from ``switch`` to host ``dst`` the table allows: the nodes crossed,
    ``switch`` first and ``dst`` last (empty if it cannot reach ``dst``)."""
    if dst not in hops.get(switch, {}):
        return []
    found: list[list[str]] = []
    stack = [[switch]]
    while stack and len(found) < MAX_ROUTES:
        path = stack.pop()
        for peer, _port in reversed(hops[path[-1]][dst]):
            if peer == dst:
                found.append(path + [dst])
            elif dst in hops.get(peer, {}) and peer not in path:
                stack.append(path + [peer])
    return found


def longest_route_hops(fabric: Fabric, hops: Hops) -> Counter[int]:
    """Over ordered pairs of hosts: how many have at most n switch-to-switch hops on
    any route the table allows them (n -> pairs), each pair by its network route (two
    GPUs of one server talk over NVLink, which this does not count)."""
    hosts = {h.name: attached_switch(fabric, h.name) for h in fabric.hosts}
    per_switch = Counter(sw for sw in hosts.values())
    found: Counter[int] = Counter()
    for dst, last in hosts.items():

        @cache
        def longest(sw: str, dst: str = dst, last: str = last) -> int:
            if sw == last:
                return 0
            return 1 + max(longest(peer) for peer, _p in hops[sw][dst])

        for sw, count in per_switch.items():
            if dst in hops.get(sw, {}):
                found[longest(sw)] += count - (sw == last)
    return found


def attached_switch(fabric: Fabric, host: str) -> str:
    """The switch at the other end of ``host``'s network link."""
    port = network_port(fabric, host)
    link = next(lk for lk in fabric.links_of(host) if lk.port_of(host) == port)
    return link.other(host)

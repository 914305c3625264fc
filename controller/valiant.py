"""Valiant routing: every packet goes minimally to a random intermediate, then
minimally to its destination, which spreads any traffic pattern evenly at the cost
of up to twice the hops (Valiant and Brebner, 1981).

The intermediate is a group on a dragonfly (the packet crosses a global link into a
group neither its source's nor its destination's, then goes minimally on from the
router it lands on), and a switch with hosts on every other fabric (a HyperX router,
a leaf, a rail switch), never the source's or the destination's. It is drawn once
per ordered pair of hosts from ``seed`` (``random.Random(f"{seed}:{src}:{dst}")``),
so a run's seed fixes every route. Of the candidates, in the drawn order, the first
whose whole route is live and crosses no switch twice is taken; a pair with none
(hosts of one group or one switch, two GPUs of one server) keeps its minimal routes.

The routes are source+destination rules (``ipv4_src`` and ``ipv4_dst``, priority
``PRIORITY_VALIANT`` in the routing table) at every switch of the route but the last,
which delivers by its destination route: about hosts² × hops rules.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

from topologies import Fabric

from .core import PRIORITY_VALIANT, FabricState, Forward, PolicyError, ingress
from .minimal import Hops, attached_switch, routes
from .rules import IPV4


def check_seed(params: dict) -> int:
    """``params["seed"]`` checked: the run's seed, which draws every intermediate."""
    seed = params.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise PolicyError(f"seed={seed!r} is not allowed: must be an integer >= 0")
    return seed


def pair_random(seed: int, *key: object) -> random.Random:
    return random.Random(":".join(map(str, (seed, *key))))


def fabric_problem(fabric: Fabric) -> str | None:
    """Why Valiant cannot route ``fabric`` (fewer than three intermediates to choose
    among), or None."""
    if fabric.kind == "dragonfly":
        count, what = len({sw.pod for sw in fabric.switches}), "groups"
    else:
        count, what = len(set(_edge_switches(fabric).values())), "switches with hosts"
    if count >= 3:
        return None
    return f"Valiant routes through a third of its {what}; this {fabric.kind} fabric has {count}"


def check_fabric(fabric: Fabric, policy: str) -> None:
    """Refuse a fabric Valiant cannot route, naming the policy key."""
    problem = fabric_problem(fabric)
    if problem is not None:
        raise PolicyError(f"controller.policy {policy}: not allowed: {problem}")


def route(
    fabric: Fabric, state: FabricState, hops: Hops, src: str, dst: str, rng: random.Random
) -> list[str] | None:
    """A Valiant route from host ``src`` to host ``dst`` (the nodes crossed, hosts
    included), or None where the pair has none."""
    if src == dst or fabric.same_server(src, dst):
        return None
    first, _ = ingress(fabric, src, dst)
    for leg in _first_legs(fabric, state, hops, first, dst, rng):
        onward = routes(hops, leg[-1], dst)
        rng.shuffle(onward)
        for rest in onward:
            whole = leg + rest[1:]
            if len(set(whole)) == len(whole):
                return [src] + whole
    return None


def _first_legs(
    fabric: Fabric, state: FabricState, hops: Hops, first: str, dst: str, rng: random.Random
) -> Iterator[list[str]]:
    """Routes from ``first`` to each candidate intermediate, in a drawn order."""
    if fabric.kind == "dragonfly":
        yield from _group_legs(fabric, state, first, dst, rng)
        return
    edge = _edge_switches(fabric)
    towards = {sw: host for host, sw in edge.items()}  # a host of each switch
    candidates = sorted(set(edge.values()) - {first, attached_switch(fabric, dst)})
    rng.shuffle(candidates)
    for mid in candidates:
        legs = routes(hops, first, towards[mid])
        rng.shuffle(legs)
        yield from (leg[:-1] for leg in legs)


def _group_legs(
    fabric: Fabric, state: FabricState, first: str, dst: str, rng: random.Random
) -> Iterator[list[str]]:
    """Dragonfly: from ``first`` over a live global link into another group."""
    group = {sw.name: sw.pod for sw in fabric.switches}
    home, away = group[first], group[attached_switch(fabric, dst)]
    groups = sorted(set(group.values()) - {home, away})
    rng.shuffle(groups)
    for mid in groups:
        links = [
            lk
            for lk in fabric.links
            if {group.get(lk.a), group.get(lk.b)} == {home, mid} and not state.is_down(*lk.ends())
        ]
        rng.shuffle(links)
        for lk in links:
            gate, land = (lk.a, lk.b) if group[lk.a] == home else (lk.b, lk.a)
            if gate == first:
                yield [first, land]
            elif not state.is_down(first, gate):
                yield [first, gate, land]


def _edge_switches(fabric: Fabric) -> dict[str, str]:
    """Host -> the switch its host link reaches (GPUs only; storage nodes are hosts of
    the spines on some fabrics and draw no traffic through)."""
    found = {}
    for host in fabric.hosts:
        for link in fabric.links_of(host.name):
            if link.kind == "host":
                found[host.name] = link.other(host.name)
    return found


def valiant_routes(fabric: Fabric, state: FabricState, hops: Hops, seed: int) -> list[Forward]:
    """Source+destination rules along every pair's Valiant route."""
    forwards = []
    for src in fabric.hosts:
        for dst in fabric.hosts:
            rng = pair_random(seed, src.name, dst.name)
            path = route(fabric, state, hops, src.name, dst.name, rng)
            if path is None:
                continue
            match = (("eth_type", IPV4), ("ipv4_src", src.ip), ("ipv4_dst", dst.ip))
            for here, there in zip(path[1:-2], path[2:-1], strict=True):
                port = fabric.port(here, there)
                forwards.append(Forward(here, PRIORITY_VALIANT, match, (port,)))
    return forwards


def route_hops(fabric: Fabric, state: FabricState, hops: Hops, seed: int) -> Counter[int]:
    """Over ordered pairs of hosts: n -> pairs whose Valiant route (or, without one,
    longest minimal route) crosses n switch-to-switch hops."""
    found: Counter[int] = Counter()
    for src in fabric.hosts:
        for dst in fabric.hosts:
            if src == dst:
                continue
            rng = pair_random(seed, src.name, dst.name)
            path = route(fabric, state, hops, src.name, dst.name, rng)
            if path is not None:
                found[len(path) - 3] += 1
                continue
            minimal = routes(hops, ingress(fabric, src.name, dst.name)[0], dst.name)
            if minimal:
                found[max(len(r) for r in minimal) - 2] += 1
    return found

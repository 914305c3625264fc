"""UGAL: each new flow takes its minimal route or a Valiant one, whichever the port
counters say is cheaper (Singh's Universal Globally-Adaptive Load-balanced routing).

A flow's first packet reaches the controller as under ``adaptive`` (the same
packet-in rules and placed 5-tuple rules, ``adaptive`` module docstring), while the
minimal routes of the routing table carry it. The controller weighs each candidate by
the load of its busiest switch egress (``loads``: the polled port counters, bit/s)
times the egresses it crosses (its queues), as UGAL weighs queue depth times hops:
the least loaded minimal route (ties broken by a CRC of the 5-tuple) against one
Valiant route drawn from the seed and the 5-tuple. Minimal wins ties, so an idle
fabric routes every flow minimally.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from topologies import Fabric, FabricError

from . import valiant
from .adaptive import DEFAULT_IDLE_TIMEOUT_S, flow_match, idle_timeout
from .core import PRIORITY_PLACED, TABLE_PLACE, FabricState, PolicyError, ingress
from .minimal import Hops, routes
from .rules import Rule


@dataclass(frozen=True)
class Placement:
    """A placed flow: its rules (egress switch first), which route it took
    (``minimal`` or ``valiant``) and its switch-to-switch hops."""

    rules: list[Rule]
    route: str
    hops: int


def place_flow(
    fabric: Fabric,
    state: FabricState,
    hops: Hops,
    flow: tuple[str, str, int, int, int],
    loads: dict[tuple[str, int], float],
    seed: int = 0,
    idle_timeout_s: int = DEFAULT_IDLE_TIMEOUT_S,
) -> Placement | None:
    """The placement of ``flow`` (src_ip, dst_ip, proto, sport, dport) over ``hops``
    (``minimal.minimal_hops`` in ``state``); None if the destination is unreachable
    or is the source."""
    match = flow_match(*flow)
    idle_timeout({"idle_timeout_s": idle_timeout_s})
    try:
        src, dst = fabric.host_by_ip(flow[0]).name, fabric.host_by_ip(flow[1]).name
    except FabricError as exc:
        raise PolicyError(str(exc)) from None
    if src == dst:
        return None
    first, _ = ingress(fabric, src, dst)
    minimal = [[src] + r for r in routes(hops, first, dst)]
    if not minimal:
        return None

    def egresses(path: list[str]) -> list[tuple[str, int]]:
        return [(path[i], fabric.port(path[i], path[i + 1])) for i in range(1, len(path) - 1)]

    def bottleneck(path: list[str]) -> float:
        return max(loads.get(e, 0.0) for e in egresses(path))

    least = min(bottleneck(p) for p in minimal)
    tied = [p for p in minimal if bottleneck(p) == least]
    chosen, kind = tied[zlib.crc32(repr(match).encode()) % len(tied)], "minimal"
    detour = valiant.route(fabric, state, hops, src, dst, valiant.pair_random(seed, *flow))
    if detour is not None:
        cost = bottleneck(detour) * len(egresses(detour))
        if cost < least * len(egresses(chosen)):
            chosen, kind = detour, "valiant"
    rules = [
        Rule(sw, PRIORITY_PLACED, match, (("output", port),), idle_timeout_s, TABLE_PLACE)
        for sw, port in reversed(egresses(chosen))
    ]
    return Placement(rules, kind, len(chosen) - 3)

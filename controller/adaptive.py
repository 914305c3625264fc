"""Load-aware placement of new TCP/UDP flows (the ``adaptive`` policy).

How a new flow's first packet reaches the controller: in table 1, at the
switch port facing each host's network interface, a rule matching
``in_port`` + ``ip_proto`` (TCP, UDP) has actions ``output:CONTROLLER``
(first ``PACKET_IN_BYTES`` bytes) and ``goto_table:2``. So the packet is
copied to the controller AND still forwarded by the ECMP routes of table 2:
the shim must not send a packet-out for it. Every packet of the flow is
copied until the controller installs the flow's exact-match rules (priority
``PRIORITY_PLACED`` in table 1, above the packet-in rule), so the shim should
ignore packet-ins for a 5-tuple it is already placing. When the rules idle
out, the next packet is placed afresh. Packets of the flow that were
forwarded by ECMP before placement may take another path (brief reordering).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from topologies import Fabric, FabricError
from topologies.hostconfig import network_port

from .core import (
    PRIORITY_PACKET_IN,
    PRIORITY_PLACED,
    TABLE_PLACE,
    TABLE_ROUTE,
    FabricState,
    PolicyError,
    ingress,
)
from .rules import CONTROLLER, IPV4, TCP, UDP, Rule
from .ties import DEFAULT_SEED, pick

DEFAULT_IDLE_TIMEOUT_S = 5
# Port counters (the loads placement reads) are polled at least this often.
MAX_POLL_S = 0.2
MIN_POLL_S = 0.01
L4 = {TCP: ("tcp_src", "tcp_dst"), UDP: ("udp_src", "udp_dst")}


def idle_timeout(params: dict[str, Any]) -> int:
    """``params["idle_timeout_s"]`` checked (whole seconds, as OpenFlow has them)."""
    value = params.get("idle_timeout_s", DEFAULT_IDLE_TIMEOUT_S)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise PolicyError(
            f"idle_timeout_s={value!r} is not allowed: must be an integer from 1 to 65535"
        )
    return value


def wall_params(policy: str, params: dict[str, Any], dilation: float) -> dict[str, Any]:
    """``params`` with the rules' idle timeout in wall seconds at time dilation
    ``dilation``: the adaptive policy's ``idle_timeout_s`` (real-equivalent, checked)
    × d, rounded up to OpenFlow's whole seconds and at most 65535; every other policy's
    params as given."""
    if policy != "adaptive" or dilation == 1:
        return params
    wall = min(65535, math.ceil(idle_timeout(params) * dilation))
    return params | {"idle_timeout_s": wall}


def poll_interval(params: dict[str, Any]) -> float:
    """``params["poll_s"]`` checked: the port-counter polling period, seconds."""
    value = params.get("poll_s", MAX_POLL_S)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not MIN_POLL_S <= value <= MAX_POLL_S:
        raise PolicyError(
            f"poll_s={value!r} is not allowed: port counters are polled at least every "
            f"{MAX_POLL_S * 1000:g} ms: a number of seconds from {MIN_POLL_S:g} to {MAX_POLL_S:g}"
        )
    return float(value)


def packet_in_rules(fabric: Fabric) -> list[Rule]:
    """At each host's network port: new TCP/UDP packets to the controller and on to routing."""
    rules = []
    for host in fabric.hosts:
        port = network_port(fabric, host.name)
        link = next(lk for lk in fabric.links_of(host.name) if lk.port_of(host.name) == port)
        sw = link.other(host.name)
        for proto in (TCP, UDP):
            match = (("in_port", link.port_of(sw)), ("eth_type", IPV4), ("ip_proto", proto))
            actions = (("output", CONTROLLER), ("goto_table", TABLE_ROUTE))
            rules.append(Rule(sw, PRIORITY_PACKET_IN, match, actions, table=TABLE_PLACE))
    return rules


def flow_match(
    src_ip: str, dst_ip: str, proto: int, sport: int, dport: int
) -> tuple[tuple[str, Any], ...]:
    if proto not in L4:
        raise PolicyError(f"ip_proto={proto!r} is not allowed: must be {TCP} (TCP) or {UDP} (UDP)")
    for name, port in (("sport", sport), ("dport", dport)):
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise PolicyError(f"{name}={port!r} is not allowed: must be a port from 0 to 65535")
    src_field, dst_field = L4[proto]
    return (
        ("eth_type", IPV4),
        ("ip_proto", proto),
        ("ipv4_src", src_ip),
        ("ipv4_dst", dst_ip),
        (src_field, sport),
        (dst_field, dport),
    )


def place_flow(
    fabric: Fabric,
    state: FabricState,
    src_ip: str,
    dst_ip: str,
    proto: int,
    sport: int,
    dport: int,
    loads: dict[tuple[str, int], float],
    idle_timeout_s: int = DEFAULT_IDLE_TIMEOUT_S,
    seed: int = DEFAULT_SEED,
) -> list[Rule]:
    """Exact-match rules for one new flow along the fewest-hop path (avoiding
    down links) whose most loaded switch egress has the lowest load in
    ``loads`` ({(switch, port): bit/s}; missing ports count as idle).

    Paths with equal bottlenecks are chosen among at random for the 5-tuple under
    the run's ``seed`` (``ties.pick``: the same flow and seed give the same path,
    and idle fabrics still spread new flows). Rules are
    ordered egress switch first, so installing them in order never sends a
    placed packet to a switch that has no rule for it yet. Empty if the
    destination is unreachable.
    """
    match = flow_match(src_ip, dst_ip, proto, sport, dport)
    idle_timeout({"idle_timeout_s": idle_timeout_s})
    try:
        src, dst = fabric.host_by_ip(src_ip).name, fabric.host_by_ip(dst_ip).name
    except FabricError as exc:
        raise PolicyError(str(exc)) from None
    if src == dst:
        return []
    first, _ = ingress(fabric, src, dst)
    paths = [p for p in fabric.shortest_paths(src, dst, state.down_pairs()) if p[1] == first]
    if not paths:
        return []

    def egresses(path: list[str]) -> list[tuple[str, int]]:
        return [(path[i], fabric.port(path[i], path[i + 1])) for i in range(1, len(path) - 1)]

    bottleneck = {tuple(p): max(loads.get(e, 0.0) for e in egresses(p)) for p in paths}
    least = min(bottleneck.values())
    tied = [p for p in paths if bottleneck[tuple(p)] == least]
    chosen = pick(seed, match, tied)
    return [
        Rule(sw, PRIORITY_PLACED, match, (("output", port),), idle_timeout_s, TABLE_PLACE)
        for sw, port in reversed(egresses(chosen))
    ]


def stale_placements(fabric: Fabric, state: FabricState, placed: Iterable[Rule]) -> list[Rule]:
    """Of the placed rules ``placed``, every rule of each flow that outputs to
    a down link: the shim deletes them (strict) after a link failure, and the
    flow's next packet is placed afresh."""
    placed = list(placed)
    dead_matches = set()
    for rule in placed:
        for port in rule.outputs():
            link = next(
                (lk for lk in fabric.links_of(rule.switch) if lk.port_of(rule.switch) == port), None
            )
            if link is not None and state.is_down(link.a, link.b):
                dead_matches.add(rule.match)
    return [r for r in placed if r.match in dead_matches]

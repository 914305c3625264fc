"""Shared vocabulary of the policy core: the state it reads, the error it
raises, and the pipeline layout every policy's rules live in.

Pipeline (the same on every switch, whatever the policy):

- table 0 ``TABLE_CLASSIFY``: QoS marking at host-facing ports (the trust
  boundary: rewrite ``ip_dscp``), then ``goto_table`` 1; default: goto 1.
- table 1 ``TABLE_PLACE``: ``adaptive`` and ``ugal`` only: exact 5-tuple rules
  placed by ``adaptive.place_flow`` or ``ugal.place_flow`` and, at each host's
  network port, the rule that copies a new TCP/UDP flow's packets to the
  controller; default: goto 2.
- table 2 ``TABLE_ROUTE``: routing by every policy (destination routes, tenant
  and Valiant source+destination routes). No match: drop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topologies import Fabric
from topologies.hostconfig import network_port

TABLE_CLASSIFY = 0
TABLE_PLACE = 1
TABLE_ROUTE = 2

PRIORITY_DEFAULT = 0  # table-miss "goto next table" entries
PRIORITY_MARK = 100  # table 0: host port -> set ip_dscp
PRIORITY_KEEP = 110  # table 0: host port + a DSCP its tenant may use -> keep it
PRIORITY_ROUTE = 100  # table 2: ipv4_dst
PRIORITY_VALIANT = 150  # table 2: ipv4_src + ipv4_dst along a pair's Valiant route
PRIORITY_TENANT = 200  # table 2: ipv4_src + ipv4_dst of one tenant
PRIORITY_PACKET_IN = 100  # table 1: host port + ip_proto -> controller + route
PRIORITY_PLACED = 300  # table 1: exact 5-tuple of a placed flow


class PolicyError(ValueError):
    """A policy name or parameter that cannot be honoured."""


@dataclass(frozen=True)
class FabricState:
    """What the controller knows at an instant: links that are down."""

    down: frozenset[frozenset[str]] = field(default_factory=frozenset)

    def with_link(self, a: str, b: str, up: bool) -> FabricState:
        pair = frozenset((a, b))
        return FabricState(self.down - {pair} if up else self.down | {pair})

    def down_pairs(self) -> list[tuple[str, str]]:
        return sorted(tuple(sorted(p)) for p in self.down)  # type: ignore[misc]

    def is_down(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self.down


@dataclass(frozen=True)
class Forward:
    """A routing intent before groups exist: forward ``match`` to ``ports``
    (one port: plain output; several: an ECMP select group)."""

    switch: str
    priority: int
    match: tuple[tuple[str, Any], ...]
    ports: tuple[int, ...]
    table: int = TABLE_ROUTE


def plain_params(value: Any) -> Any:
    """Policy parameters as plain JSON data, the controller's own format: a section of
    the run's configuration (a frozen dataclass such as ``Qos`` or ``QosClass``), a
    read-only mapping or a tuple becomes the dict or list it was resolved from. What the
    policies read and what crosses to the controller process (JSON) is this."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_params(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: plain_params(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_params(v) for v in value]
    return value


def check_keys(where: str, given: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise PolicyError(
            f"{where}: unknown parameter {', '.join(map(repr, unknown))}: "
            f"allowed {', '.join(allowed) or 'none'}"
        )


def ingress(fabric: Fabric, src: str, dst: str) -> tuple[str, int]:
    """Where host ``src``'s routing table sends a packet for ``dst``: (switch,
    in_port). Same-server peers go over NVLink, everything else over the network port."""
    nvl = fabric.nvlink_switch_of(src)
    port = fabric.port(src, nvl) if nvl and fabric.same_server(src, dst) else None
    port = network_port(fabric, src) if port is None else port
    link = next(lk for lk in fabric.links_of(src) if lk.port_of(src) == port)
    peer = link.other(src)
    return peer, link.port_of(peer)


def host_ports(fabric: Fabric) -> list[tuple[str, int, str]]:
    """Every switch port that faces a host: (switch, port, host), the trust boundary."""
    found = []
    for host in fabric.hosts:
        for link in fabric.links_of(host.name):
            sw = link.other(host.name)
            found.append((sw, link.port_of(sw), host.name))
    return sorted(found)

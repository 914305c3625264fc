"""A fabric as pure data: nodes, links, addressing and the queries engineers ask.

Nothing here needs root or imports Mininet. Port numbers are part of the data:
a host's ports start at 0 (``eth0``), a switch's at 1, in the order its links
were added, and they are the OpenFlow port numbers the builder requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import networkx as nx

HOST_KINDS = ("gpu", "storage")  # storage: a flash-tier node on the fabric
# router: a switch of a direct (low-diameter) fabric, hosts and peers alike (dragonfly, hyperx)
SWITCH_KINDS = ("leaf", "rail", "spine", "core", "nvlink", "router")
NODE_KINDS = HOST_KINDS + SWITCH_KINDS
LINK_KINDS = ("host", "fabric", "nvlink", "storage")
# Tier of each node kind: a link from a lower to a higher tier is an uplink.
TIER = {
    "gpu": 0,
    "storage": 0,
    "leaf": 1,
    "rail": 1,
    "nvlink": 1,
    "router": 1,
    "spine": 2,
    "core": 3,
}


class FabricError(ValueError):
    """A fabric parameter or description that cannot be honoured. ``param`` names the
    generator parameter at fault when there is one (a spec reports it as its key)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Node:
    """A host (a GPU, or a storage node of the flash KV tier) or a switch. ``number``
    is the node's index among its class (hosts or switches) and fixes its addresses;
    ``server``/``index``/``rail`` say where a GPU sits; ``pod`` groups fat-tree
    switches and hosts, and is a dragonfly's group (``index``: a router's place in it)."""

    name: str
    kind: str
    number: int
    server: int | None = None
    index: int | None = None
    rail: int | None = None
    pod: int | None = None

    @property
    def is_host(self) -> bool:
        return self.kind in HOST_KINDS

    @property
    def ip(self) -> str | None:
        return host_ip(self.number) if self.is_host else None

    @property
    def dpid(self) -> int | None:
        return None if self.is_host else self.number + 1


@dataclass(frozen=True)
class Link:
    """A full-duplex link. ``real_gbps`` is the real-equivalent rate of each
    direction; ``buffer_pkts`` bounds the egress queue at both ends."""

    a: str
    a_port: int
    b: str
    b_port: int
    real_gbps: float
    buffer_pkts: int
    kind: str

    def other(self, name: str) -> str:
        return self.b if name == self.a else self.a

    def port_of(self, name: str) -> int:
        return self.a_port if name == self.a else self.b_port

    def ends(self) -> tuple[str, str]:
        return (self.a, self.b)


def host_ip(number: int) -> str:
    """Deterministic address of host ``number``: 10.0.0.1, 10.0.0.2, ... (/8)."""
    n = number + 1
    if n >= 1 << 24:
        raise FabricError(f"host number {number} does not fit in 10.0.0.0/8")
    return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def port_mac(number: int, port: int) -> str:
    """Deterministic, locally administered MAC of host ``number``'s ``port``."""
    n = number + 1
    return f"02:00:{port:02x}:{(n >> 16) & 255:02x}:{(n >> 8) & 255:02x}:{n & 255:02x}"


@dataclass(frozen=True)
class Fabric:
    """Nodes and links of one fabric, plus the generator and parameters that made it."""

    kind: str
    params: dict[str, Any]
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise FabricError("node names must be unique")
        known = set(names)
        seen_pairs: set[frozenset[str]] = set()
        seen_ports: set[tuple[str, int]] = set()
        for link in self.links:
            for end, port in ((link.a, link.a_port), (link.b, link.b_port)):
                if end not in known:
                    raise FabricError(f"link {link.a}-{link.b} names unknown node {end!r}")
                if (end, port) in seen_ports:
                    raise FabricError(f"port {port} of {end} is used by two links")
                seen_ports.add((end, port))
            pair = frozenset(link.ends())
            if pair in seen_pairs or len(pair) != 2:
                raise FabricError(f"duplicate or self link {link.a}-{link.b}")
            seen_pairs.add(pair)
            if link.kind not in LINK_KINDS:
                raise FabricError(f"link kind {link.kind!r}: allowed {LINK_KINDS}")

    # ----- lookups -------------------------------------------------------
    @cached_property
    def by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @property
    def hosts(self) -> list[Node]:
        return [n for n in self.nodes if n.is_host]

    @property
    def gpus(self) -> list[Node]:
        """The GPU hosts (every host but the storage nodes)."""
        return [n for n in self.nodes if n.kind == "gpu"]

    @property
    def storage_nodes(self) -> list[Node]:
        """The storage nodes (hosts of the flash KV tier), in number order."""
        return [n for n in self.nodes if n.kind == "storage"]

    @property
    def switches(self) -> list[Node]:
        return [n for n in self.nodes if not n.is_host]

    def node(self, name: str) -> Node:
        try:
            return self.by_name[name]
        except KeyError:
            raise FabricError(f"no node named {name!r} in this {self.kind} fabric") from None

    def links_of(self, name: str) -> list[Link]:
        return self._adjacency.get(name, [])

    @cached_property
    def _adjacency(self) -> dict[str, list[Link]]:
        adj: dict[str, list[Link]] = {n.name: [] for n in self.nodes}
        for link in self.links:
            adj[link.a].append(link)
            adj[link.b].append(link)
        for name, links in adj.items():
            links.sort(key=lambda lk, name=name: lk.port_of(name))
        return adj

    def link_between(self, a: str, b: str) -> Link:
        for link in self.links_of(a):
            if link.other(a) == b:
                return link
        raise FabricError(f"no link between {a!r} and {b!r}")

    def port(self, node: str, neighbour: str) -> int:
        """The port of ``node`` that faces ``neighbour``."""
        return self.link_between(node, neighbour).port_of(node)

    @cached_property
    def _by_ip(self) -> dict[str, Node]:
        return {h.ip: h for h in self.hosts if h.ip}

    def host_by_ip(self, ip: str) -> Node:
        try:
            return self._by_ip[ip]
        except KeyError:
            raise FabricError(f"no host has address {ip}") from None

    def same_server(self, a: str, b: str) -> bool:
        """Do two GPUs share a server with an NVLink switch between them?"""
        na, nb = self.node(a), self.node(b)
        if na.server is None or na.server != nb.server or a == b:
            return False
        return self.nvlink_switch_of(a) is not None

    def nvlink_switch_of(self, host: str) -> str | None:
        for link in self.links_of(host):
            if link.kind == "nvlink":
                return link.other(host)
        return None

    # ----- graph queries -------------------------------------------------
    def graph(self, *, nvlink: bool = True, down: Iterable[tuple[str, str]] = ()) -> nx.Graph:
        """The fabric as an undirected graph (edge attribute ``link``), without
        the links listed in ``down`` and, if ``nvlink`` is false, without NVLink."""
        dead = {frozenset(p) for p in down}
        g = nx.Graph()
        g.add_nodes_from(n.name for n in self.nodes)
        for link in self.links:
            if (nvlink or link.kind != "nvlink") and frozenset(link.ends()) not in dead:
                g.add_edge(link.a, link.b, link=link)
        return g

    def shortest_paths(
        self, src: str, dst: str, down: Iterable[tuple[str, str]] = ()
    ) -> list[list[str]]:
        """All equal-cost (fewest-hop) paths from host ``src`` to host ``dst``,
        sorted; hosts are endpoints only, never transit. Empty if unreachable."""
        for h in (src, dst):
            if not self.node(h).is_host:
                raise FabricError(f"{h!r} is a switch; paths are between hosts")
        if src == dst:
            return [[src]]
        g = self.graph(down=down)
        transit_hosts = [h.name for h in self.hosts if h.name not in (src, dst)]
        g.remove_nodes_from(transit_hosts)
        try:
            return sorted(nx.all_shortest_paths(g, src, dst))
        except nx.NetworkXNoPath:
            return []

    def oversubscription(self) -> dict[str, float]:
        """Per switch with uplinks: downlink capacity ÷ uplink capacity. A router of a
        direct fabric has no uplinks: its hosts' capacity ÷ its share of the bisection
        (``bisection_gbps`` over half the routers with GPUs), so a full-bisection
        fabric reads 1 as a fat-tree does."""
        ratios: dict[str, float] = {}
        for sw in self.switches:
            up = down = 0.0
            for link in self.links_of(sw.name):
                peer = self.node(link.other(sw.name))
                if TIER[peer.kind] > TIER[sw.kind]:
                    up += link.real_gbps
                elif TIER[peer.kind] < TIER[sw.kind]:
                    down += link.real_gbps
            if up > 0:
                ratios[sw.name] = down / up
        return ratios | self._router_oversubscription()

    def _router_oversubscription(self) -> dict[str, float]:
        injection = {
            sw.name: sum(lk.real_gbps for lk in self.links_of(sw.name) if lk.kind == "host")
            for sw in self.switches
            if sw.kind == "router"
        }
        edge = [name for name, gbps in injection.items() if gbps > 0]
        bisection = self.bisection_gbps()
        if len(edge) < 2 or bisection <= 0:
            return {}
        share = bisection / (len(edge) / 2)
        return {name: injection[name] / share for name in edge}

    def bisection_gbps(self) -> float:
        """Real-equivalent bandwidth across the cut between the first and the
        second half of the servers (GPUs in server order: by leaf, pod, group or
        server), over the scale-out network (NVLink excluded): a max-flow."""
        return self._bisection_gbps

    @cached_property
    def _bisection_gbps(self) -> float:
        hosts = self.gpus
        if len(hosts) < 2:
            return 0.0
        servers = sorted({_server_key(h) for h in hosts})
        first = set(servers[: len(servers) // 2])
        g = self.graph(nvlink=False)
        flow = nx.DiGraph()
        for a, b, data in g.edges(data=True):
            flow.add_edge(a, b, capacity=data["link"].real_gbps)
            flow.add_edge(b, a, capacity=data["link"].real_gbps)
        for h in hosts:
            if _server_key(h) in first:
                flow.add_edge("__src", h.name, capacity=float("inf"))
            else:
                flow.add_edge(h.name, "__dst", capacity=float("inf"))
        return float(nx.maximum_flow_value(flow, "__src", "__dst"))

    def mean_switch_hops(self) -> float:
        """Mean number of switches on a shortest path, over ordered GPU pairs."""
        lengths = self._gpu_path_lengths
        return sum(n - 1 for n in lengths) / len(lengths) if lengths else 0.0

    def diameter(self) -> int:
        """The most switch-to-switch links on a fewest-hop path between two GPUs
        (0: every GPU on one switch): 2 on a spine-leaf, 4 on a fat-tree, 3 on a
        balanced dragonfly, L on an L-dimensional HyperX."""
        return max((n - 2 for n in self._gpu_path_lengths), default=0)

    @cached_property
    def _gpu_path_lengths(self) -> list[int]:
        """Links on a fewest-hop path, for every ordered pair of GPUs that connect."""
        hosts = [h.name for h in self.gpus]
        g = self.graph()
        found = []
        for src in hosts:
            lengths = nx.single_source_shortest_path_length(g, src)
            found += [lengths[dst] for dst in hosts if dst != src and dst in lengths]
        return found

    def host_capacity_gbps(self) -> float:
        """Sum of the host links' real-equivalent rates (one direction)."""
        return sum(lk.real_gbps for lk in self.links if lk.kind == "host")

    def summary(self) -> dict[str, Any]:
        over = self.oversubscription()
        return {
            "kind": self.kind,
            "params": dict(self.params),
            "hosts": len(self.hosts),
            "gpus": len(self.gpus),
            "storage_nodes": len(self.storage_nodes),
            "switches": len(self.switches),
            "links": len(self.links),
            "links_by_kind": {k: sum(lk.kind == k for lk in self.links) for k in LINK_KINDS},
            "oversubscription": over,
            "max_oversubscription": max(over.values(), default=1.0),
            "bisection_gbps": self.bisection_gbps(),
            "mean_switch_hops": round(self.mean_switch_hops(), 3),
            "diameter": self.diameter(),
        }

    # ----- serialisation -------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "params": dict(self.params),
            "nodes": [asdict(n) for n in self.nodes],
            "links": [asdict(lk) for lk in self.links],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fabric:
        return cls(
            kind=data["kind"],
            params=dict(data.get("params", {})),
            nodes=tuple(Node(**n) for n in data["nodes"]),
            links=tuple(Link(**lk) for lk in data["links"]),
        )

    @classmethod
    def from_json(cls, text: str) -> Fabric:
        return cls.from_dict(json.loads(text))


def _server_key(host: Node) -> int:
    return host.server if host.server is not None else host.number


class FabricBuilder:
    """Adds nodes and links with deterministic numbering and port assignment."""

    def __init__(self, kind: str, params: dict[str, Any]) -> None:
        self.kind = kind
        self.params = params
        self.nodes: list[Node] = []
        self.links: list[Link] = []
        self._next_port: dict[str, int] = {}
        self._hosts = 0
        self._switches = 0

    def host(self, name: str, kind: str = "gpu", **where: int | None) -> str:
        if kind not in HOST_KINDS:
            raise FabricError(f"host kind {kind!r}: allowed {HOST_KINDS}")
        self.nodes.append(Node(name, kind, self._hosts, **where))
        self._hosts += 1
        self._next_port[name] = 0
        return name

    def switch(self, name: str, kind: str, **where: int | None) -> str:
        if kind not in SWITCH_KINDS:
            raise FabricError(f"switch kind {kind!r}: allowed {SWITCH_KINDS}")
        self.nodes.append(Node(name, kind, self._switches, **where))
        self._switches += 1
        self._next_port[name] = 1
        return name

    def link(self, a: str, b: str, gbps: float, buffer_pkts: int, kind: str) -> None:
        pa, pb = self._next_port[a], self._next_port[b]
        self._next_port[a], self._next_port[b] = pa + 1, pb + 1
        self.links.append(Link(a, pa, b, pb, float(gbps), int(buffer_pkts), kind))

    def build(self) -> Fabric:
        return Fabric(self.kind, dict(self.params), tuple(self.nodes), tuple(self.links))

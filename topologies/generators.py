"""Fabric generators: spine-leaf, k-ary fat-tree and rail-optimized GPU fabrics, and
the low-diameter direct fabrics Dragonfly (``dragonfly``) and HyperX (``hyperx``).

Every parameter is checked before anything is made; an error names the
generator, the parameter, its value and what is allowed. Each generator also takes
``storage_nodes``, ``storage_attach`` and ``storage_gbps``: the flash KV tier's hosts
(``topologies.storage``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .checks import check_gbps, check_int, params_of
from .dragonfly import dragonfly
from .fabric import Fabric, FabricBuilder, FabricError
from .hyperx import hyperx
from .shaping import MAX_BUFFER_PKTS
from .storage import DEFAULT_ATTACH, attach_storage_nodes


def spine_leaf(
    spines: int = 2,
    leaves: int = 2,
    hosts_per_leaf: int = 4,
    host_gbps: float = 100.0,
    uplink_gbps: float = 400.0,
    buffer_pkts: int = 64,
    storage_nodes: int = 0,
    storage_attach: str = DEFAULT_ATTACH,
    storage_gbps: float = 400.0,
) -> Fabric:
    """Two-tier Clos: every leaf connects to every spine."""
    g = "spine_leaf"
    check_int(g, "spines", spines, 1, 64)
    check_int(g, "leaves", leaves, 1, 256)
    check_int(g, "hosts_per_leaf", hosts_per_leaf, 1, 256)
    check_gbps(g, "host_gbps", host_gbps)
    check_gbps(g, "uplink_gbps", uplink_gbps)
    check_int(g, "buffer_pkts", buffer_pkts, 1, MAX_BUFFER_PKTS)
    check_int(g, "storage_nodes", storage_nodes, 0, 64)
    check_gbps(g, "storage_gbps", storage_gbps)
    fb = FabricBuilder(g, params_of(spine_leaf, locals()))
    leaf_names = [fb.switch(f"leaf{i}", "leaf") for i in range(leaves)]
    spine_names = [fb.switch(f"spine{j}", "spine") for j in range(spines)]
    number = 0
    for leaf in leaf_names:
        for _ in range(hosts_per_leaf):
            h = fb.host(f"h{number}", server=number)
            fb.link(h, leaf, host_gbps, buffer_pkts, "host")
            number += 1
    for leaf in leaf_names:
        for spine in spine_names:
            fb.link(leaf, spine, uplink_gbps, buffer_pkts, "fabric")
    attach_storage_nodes(fb, g, storage_nodes, storage_attach, storage_gbps, buffer_pkts)
    return fb.build()


def fat_tree(
    k: int = 4,
    host_gbps: float = 100.0,
    fabric_gbps: float = 100.0,
    buffer_pkts: int = 64,
    storage_nodes: int = 0,
    storage_attach: str = DEFAULT_ATTACH,
    storage_gbps: float = 400.0,
) -> Fabric:
    """The k-ary fat-tree: k pods of k/2 edge (leaf) and k/2 aggregation
    (spine) switches, (k/2)² core switches, k³/4 hosts, 5k²/4 switches."""
    g = "fat_tree"
    if not (isinstance(k, int) and not isinstance(k, bool) and 2 <= k <= 16 and k % 2 == 0):
        raise FabricError(f"{g}: k={k!r} is not allowed: must be an even integer from 2 to 16", "k")
    check_gbps(g, "host_gbps", host_gbps)
    check_gbps(g, "fabric_gbps", fabric_gbps)
    check_int(g, "buffer_pkts", buffer_pkts, 1, MAX_BUFFER_PKTS)
    check_int(g, "storage_nodes", storage_nodes, 0, 64)
    check_gbps(g, "storage_gbps", storage_gbps)
    fb = FabricBuilder(g, params_of(fat_tree, locals()))
    half = k // 2
    edges = [[fb.switch(f"leaf{p}_{i}", "leaf", pod=p) for i in range(half)] for p in range(k)]
    aggs = [[fb.switch(f"spine{p}_{i}", "spine", pod=p) for i in range(half)] for p in range(k)]
    cores = [fb.switch(f"core{j}", "core") for j in range(half * half)]
    number = 0
    for p in range(k):
        for edge in edges[p]:
            for _ in range(half):
                h = fb.host(f"h{number}", server=number, pod=p)
                fb.link(h, edge, host_gbps, buffer_pkts, "host")
                number += 1
    for p in range(k):
        for edge in edges[p]:
            for agg in aggs[p]:
                fb.link(edge, agg, fabric_gbps, buffer_pkts, "fabric")
    for p in range(k):
        for i, agg in enumerate(aggs[p]):
            for j in range(half):
                fb.link(agg, cores[i * half + j], fabric_gbps, buffer_pkts, "fabric")
    attach_storage_nodes(fb, g, storage_nodes, storage_attach, storage_gbps, buffer_pkts)
    return fb.build()


def rail_optimized(
    servers: int = 4,
    gpus_per_server: int = 4,
    spines: int = 2,
    rail_gbps: float = 400.0,
    spine_gbps: float = 400.0,
    nvlink_gbps: float = 3600.0,
    buffer_pkts: int = 64,
    storage_nodes: int = 0,
    storage_attach: str = DEFAULT_ATTACH,
    storage_gbps: float = 400.0,
) -> Fabric:
    """GPU i of every server connects to rail switch i; every rail switch
    connects to every spine; a server's GPUs share its NVLink switch, so
    traffic between two GPUs of one server never touches the network."""
    g = "rail_optimized"
    check_int(g, "servers", servers, 1, 256)
    check_int(g, "gpus_per_server", gpus_per_server, 1, 16)
    check_int(g, "spines", spines, 1, 64)
    check_gbps(g, "rail_gbps", rail_gbps)
    check_gbps(g, "spine_gbps", spine_gbps)
    check_gbps(g, "nvlink_gbps", nvlink_gbps)
    check_int(g, "buffer_pkts", buffer_pkts, 1, MAX_BUFFER_PKTS)
    check_int(g, "storage_nodes", storage_nodes, 0, 64)
    check_gbps(g, "storage_gbps", storage_gbps)
    fb = FabricBuilder(g, params_of(rail_optimized, locals()))
    rails = [fb.switch(f"rail{i}", "rail", rail=i) for i in range(gpus_per_server)]
    spine_names = [fb.switch(f"spine{j}", "spine") for j in range(spines)]
    nvl = [
        fb.switch(f"nvl{s}", "nvlink", server=s) if gpus_per_server > 1 else None
        for s in range(servers)
    ]
    for s in range(servers):
        for i in range(gpus_per_server):
            h = fb.host(f"gpu{s}_{i}", server=s, index=i, rail=i)
            fb.link(h, rails[i], rail_gbps, buffer_pkts, "host")
            if nvl[s] is not None:
                fb.link(h, nvl[s], nvlink_gbps, buffer_pkts, "nvlink")
    for rail in rails:
        for spine in spine_names:
            fb.link(rail, spine, spine_gbps, buffer_pkts, "fabric")
    attach_storage_nodes(fb, g, storage_nodes, storage_attach, storage_gbps, buffer_pkts)
    return fb.build()


GENERATORS: dict[str, Callable[..., Fabric]] = {
    "spine_leaf": spine_leaf,
    "fat_tree": fat_tree,
    "rail_optimized": rail_optimized,
    "dragonfly": dragonfly,
    "hyperx": hyperx,
}

# One line per generator parameter (rates are real-equivalent, before the bandwidth scale).
PARAM_DOCS = {
    "spines": "spine switches",
    "leaves": "leaf switches",
    "hosts_per_leaf": "hosts (GPUs) under each leaf",
    "host_gbps": "host-to-leaf (or -router) link rate, Gbit/s",
    "uplink_gbps": "leaf-to-spine link rate, Gbit/s",
    "k": "switch radix: k pods, k³/4 hosts (even, 2 to 16)",
    "fabric_gbps": "switch-to-switch link rate, Gbit/s",
    "servers": "GPU servers",
    "gpus_per_server": "GPUs per server, one rail switch per GPU index",
    "rail_gbps": "GPU-to-rail link rate, Gbit/s",
    "spine_gbps": "rail-to-spine link rate, Gbit/s",
    "nvlink_gbps": "GPU-to-NVLink-switch rate inside a server, Gbit/s",
    "buffer_pkts": "egress buffer of every link, packets",
    "storage_nodes": "storage nodes (hosts of the flash KV tier), numbered after the GPUs",
    "storage_attach": "where storage nodes attach: a switch kind (spine, leaf, rail, core,"
    " router; round robin over its switches) or one switch's name",
    "storage_gbps": "each storage node's link rate, Gbit/s",
    "p": "hosts (GPUs) per router",
    "a": "routers per group, joined all-to-all by local links",
    "h": "global links per router",
    "groups": "groups; 0: the largest, a·h + 1 (one global link between every two groups);"
    " a·h must divide equally among the other groups",
    "arrangement": "which group each global port leads to: consecutive or palmtree",
    "local_gbps": "router-to-router link rate inside a group, Gbit/s",
    "global_gbps": "router-to-router link rate between groups, Gbit/s",
    "shape": "routers per dimension: [S1, ..., SL], 1 to 4 dimensions of 2 to 64",
    "router_gbps": "router-to-router link rate, Gbit/s",
}
# Where one name means something else in one generator (kind -> name -> doc).
KIND_PARAM_DOCS = {"hyperx": {"k": "hosts (GPUs) per router"}}


def param_doc(kind: str, name: str) -> str:
    """The one line that says what ``kind``'s parameter ``name`` is."""
    return KIND_PARAM_DOCS.get(kind, {}).get(name, PARAM_DOCS[name])


def defaults(kind: str) -> dict[str, Any]:
    """The generator's parameters and their defaults."""
    gen = generator(kind)
    return {n: p.default for n, p in inspect.signature(gen).parameters.items()}


def generator(kind: str) -> Callable[..., Fabric]:
    try:
        return GENERATORS[kind]
    except KeyError:
        raise FabricError(
            f"fabric kind {kind!r} is not known: allowed {', '.join(GENERATORS)}"
        ) from None


def make_fabric(kind: str, **params: Any) -> Fabric:
    """Build a fabric by kind name; unknown parameters are errors."""
    gen = generator(kind)
    allowed = defaults(kind)
    for name in params:
        if name not in allowed:
            raise FabricError(f"{kind}: unknown parameter {name!r}: allowed {', '.join(allowed)}")
    return gen(**params)


def parse_param(kind: str, name: str, text: str) -> Any:
    """Parse ``text`` as the type of ``kind``'s parameter ``name`` (for k=v on a CLI)."""
    allowed = defaults(kind)
    if name not in allowed:
        raise FabricError(f"{kind}: unknown parameter {name!r}: allowed {', '.join(allowed)}")
    if isinstance(allowed[name], str):
        return text
    if isinstance(allowed[name], tuple):
        return _parse_sizes(kind, name, text)
    try:
        return int(text) if isinstance(allowed[name], int) else float(text)
    except ValueError:
        kind_word = "an integer" if isinstance(allowed[name], int) else "a number"
        raise FabricError(
            f"{kind}: {name}={text!r} is not allowed: must be {kind_word}", name
        ) from None


def _parse_sizes(kind: str, name: str, text: str) -> tuple[int, ...]:
    """``4,4`` or ``[4,4]`` as (4, 4)."""
    try:
        return tuple(int(part) for part in text.strip().strip("[]").split(","))
    except ValueError:
        raise FabricError(
            f"{kind}: {name}={text!r} is not allowed: must be integers separated by commas (4,4)",
            name,
        ) from None

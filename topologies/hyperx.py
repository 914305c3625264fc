"""HyperX (Ahn, Binkert, Davis, McLaren and Schreiber, 2009), a generalised flattened
butterfly: routers on an L-dimensional lattice of ``shape`` [S1, ..., SL], each joined
to every router that differs from it in one coordinate only (all-to-all along each
dimension), with ``k`` hosts per router. The diameter is L router-to-router hops.

Router n sits at ``coordinates(shape, n)`` (the last dimension varies fastest) and is
named ``r`` + its coordinates joined by ``_`` (``r1_3``); hosts ``h{n}``, each its own
server, numbered router by router. A router's ports: its hosts, then its links
dimension by dimension.

Oversubscription, as for ``dragonfly`` (its docstring says why): a router's hosts'
capacity ÷ its share of the bisection, so k = S/2 hosts per router on an S-wide
dimension reads 1 (full bisection) and k = S reads 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .checks import check_gbps, check_int, params_of, refuse
from .fabric import Fabric, FabricBuilder
from .shaping import MAX_BUFFER_PKTS
from .storage import attach_storage_nodes

MAX_DIMENSIONS = 4
MAX_ROUTERS = 4096


def coordinates(shape: Sequence[int], number: int) -> tuple[int, ...]:
    """The lattice coordinates of router ``number`` (row-major: the last varies fastest)."""
    coords = []
    for size in reversed(shape):
        number, c = divmod(number, size)
        coords.append(c)
    return tuple(reversed(coords))


def router_number(shape: Sequence[int], coords: Sequence[int]) -> int:
    number = 0
    for size, c in zip(shape, coords, strict=True):
        number = number * size + c
    return number


def check_shape(gen: str, shape: Any) -> tuple[int, ...]:
    allowed = (
        f"a list of 1 to {MAX_DIMENSIONS} dimension sizes, each an integer from 2 to 64,"
        f" with at most {MAX_ROUTERS} routers in all"
    )
    ok = isinstance(shape, list | tuple) and 1 <= len(shape) <= MAX_DIMENSIONS
    ok = ok and all(isinstance(s, int) and not isinstance(s, bool) and 2 <= s <= 64 for s in shape)
    if not ok or math.prod(shape) > MAX_ROUTERS:
        raise refuse(gen, "shape", shape, allowed)
    return tuple(shape)


def hyperx(
    shape: tuple[int, ...] = (4, 4),
    k: int = 1,
    host_gbps: float = 100.0,
    router_gbps: float = 100.0,
    buffer_pkts: int = 64,
    storage_nodes: int = 0,
    storage_attach: str = "router",
    storage_gbps: float = 400.0,
) -> Fabric:
    """HyperX: routers on a lattice of the given shape, all-to-all along each
    dimension, k hosts per router (diameter: one hop per dimension)."""
    g = "hyperx"
    dims = check_shape(g, shape)
    check_int(g, "k", k, 1, 64)
    check_gbps(g, "host_gbps", host_gbps)
    check_gbps(g, "router_gbps", router_gbps)
    check_int(g, "buffer_pkts", buffer_pkts, 1, MAX_BUFFER_PKTS)
    check_int(g, "storage_nodes", storage_nodes, 0, 64)
    check_gbps(g, "storage_gbps", storage_gbps)
    params = params_of(hyperx, locals()) | {"shape": list(dims)}
    fb = FabricBuilder(g, params)
    count = math.prod(dims)
    names = [
        fb.switch("r" + "_".join(map(str, coordinates(dims, n))), "router") for n in range(count)
    ]
    number = 0
    for router in names:
        for _ in range(k):
            host = fb.host(f"h{number}", server=number)
            fb.link(host, router, host_gbps, buffer_pkts, "host")
            number += 1
    for d, size in enumerate(dims):
        for n in range(count):
            here = coordinates(dims, n)
            for c in range(here[d] + 1, size):
                there = router_number(dims, here[:d] + (c,) + here[d + 1 :])
                fb.link(names[n], names[there], router_gbps, buffer_pkts, "fabric")
    attach_storage_nodes(fb, g, storage_nodes, storage_attach, storage_gbps, buffer_pkts)
    return fb.build()

"""Serving instances on a fabric and the network tiers between them.

A *pool* is the GPUs ``gpus`` (indices within a server, in GPU order; default
all) of each of its ``servers``, or of each server its own (``gpus`` a mapping
server → indices). An *instance* is ``tp`` consecutive GPUs of its
pool (in server then GPU order) that run one model replica in tensor parallel;
rank r is its r-th GPU. An instance lies within one server (tp divides the
pool's GPUs per server) or spans whole servers' shares (tp a multiple of them),
never part of one server and part of the next. Its *home server* is the server
of rank 0; the prefix-cache pool is kept per home server. Two pools may share a
server if they share no GPU: KV between them then crosses that server's NVLink.

A *tier* says how fast two GPUs reach each other: 0 = the same NVLink domain
(same server), 1 = one switch between them (same rail / leaf), 2 = across the
spine (two or more switches). The tier of a prefill → decode instance pair is
the slowest tier any of its KV-transferring rank pairs uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from topologies import Fabric, Node

TIERS = ("nvlink", "rail", "spine")


class ServingError(ValueError):
    """A serving workload that cannot be built; the message says which key and why."""


@dataclass(frozen=True)
class Instance:
    """``tp`` GPUs serving one replica: ``role`` is ``prefill`` or ``decode``."""

    name: str
    role: str
    index: int
    hosts: tuple[str, ...]
    server: int  # home server: rank 0's server

    @property
    def tp(self) -> int:
        return len(self.hosts)


def server_of(node: Node) -> int:
    """A host's server number (spine-leaf/fat-tree: every host is its own server)."""
    return node.server if node.server is not None else node.number


def servers_of(fabric: Fabric) -> dict[int, list[Node]]:
    """Server number → its GPUs in GPU order (storage nodes are no server)."""
    out: dict[int, list[Node]] = {}
    for node in fabric.gpus:
        out.setdefault(server_of(node), []).append(node)
    for nodes in out.values():
        nodes.sort(key=lambda n: (n.index if n.index is not None else 0, n.number))
    return out


GpuChoice = Sequence[int] | Mapping[int, Sequence[int]] | None


def make_instances(
    fabric: Fabric,
    role: str,
    servers: Sequence[int],
    tp: int,
    kv_heads: int,
    gpus: GpuChoice = None,
) -> list[Instance]:
    """The ``role`` instances on GPUs ``gpus`` of ``servers`` (a list: the same GPU indices
    of each server; a mapping: server → its GPU indices; None: all): the pool's GPUs in
    server then GPU order, split into groups of ``tp``."""
    known = servers_of(fabric)
    unknown = [s for s in servers if s not in known]
    if unknown:
        raise ServingError(
            f"{role}.servers names servers {unknown} the fabric lacks; servers: {sorted(known)}"
        )
    if len(set(servers)) != len(servers):
        raise ServingError(f"{role}.servers lists a server twice: {list(servers)}")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ServingError(f"{role}.tp must be a positive integer, got {tp!r}")
    if kv_heads % tp:
        raise ServingError(f"{role}.tp={tp} does not divide the model's {kv_heads} KV heads")
    if isinstance(gpus, Mapping) and set(gpus) != set(servers):
        raise ServingError(
            f"{role}.gpus maps servers {sorted(gpus)}; a mapping needs exactly"
            f" {role}.servers {sorted(servers)} as its keys"
        )
    shares = [pool_share(known, role, s, gpus) for s in servers]
    if not tp_fits([len(share) for share in shares], tp):
        sizes = {s: len(share) for s, share in zip(servers, shares, strict=True)}
        counts = set(sizes.values())
        each = str(counts.pop()) if len(counts) == 1 else str(sizes)
        raise ServingError(
            f"{role}.tp={tp} does not divide the {each} GPUs {role}.gpus takes of each server"
            " nor spans whole servers' shares: an instance would straddle two servers"
        )
    chosen = [n for share in shares for n in share]
    return [
        Instance(
            name=f"{role}{k}",
            role=role,
            index=k,
            hosts=tuple(n.name for n in chosen[i : i + tp]),
            server=server_of(chosen[i]),
        )
        for k, i in enumerate(range(0, len(chosen), tp))
    ]


def gpu_indices(gpus: GpuChoice, server: int) -> Sequence[int] | None:
    """The GPU indices ``gpus`` takes of ``server`` (None: all of them)."""
    return gpus[server] if isinstance(gpus, Mapping) else gpus


def pool_share(known: dict[int, list[Node]], role: str, server: int, gpus: GpuChoice) -> list[Node]:
    """The GPUs a pool takes of one server, in GPU order."""
    indices = gpu_indices(gpus, server)
    if indices is None:
        return list(known[server])
    where = f"{role}.gpus" + (f".{server}" if isinstance(gpus, Mapping) else "")
    if not indices or len(set(indices)) != len(indices):
        raise ServingError(f"{where} must list distinct GPU indices, got {list(indices)}")
    lacking = [g for g in indices if not 0 <= g < len(known[server])]
    if lacking:
        raise ServingError(
            f"{where} names GPUs {lacking} that server {server} lacks;"
            f" its GPUs: 0..{len(known[server]) - 1}"
        )
    return [known[server][g] for g in sorted(indices)]


def tp_fits(shares: Sequence[int], tp: int) -> bool:
    """Can consecutive groups of ``tp`` GPUs, over servers that contribute ``shares`` GPUs
    each (in order), each lie within one server or span whole shares, never part of one?"""
    spanned = 0
    for share in shares:
        if spanned == 0 and share % tp == 0:
            continue
        spanned += share
        if spanned == tp:
            spanned = 0
        elif spanned > tp:
            return False
    return spanned == 0


def check_disjoint(prefill: Sequence[Instance], decode: Sequence[Instance]) -> None:
    """Refuse a GPU in both pools (pools may share a server, never a GPU)."""
    shared = sorted({h for i in prefill for h in i.hosts} & {h for i in decode for h in i.hosts})
    if shared:
        raise ServingError(
            f"decode.gpus: GPUs {shared} are in a prefill and a decode instance (overlap):"
            " pools on a shared server need disjoint gpus"
        )


class TierMap:
    """Tiers and bottleneck link rates between hosts of one fabric (cached per pair)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.host_tier = cache(self._host_tier)
        self.path_gbps = cache(self._path_gbps)

    def _host_tier(self, a: str, b: str) -> int:
        if self.fabric.same_server(a, b):
            return 0
        paths = self.fabric.shortest_paths(a, b)
        if not paths:
            raise ServingError(f"no path between {a} and {b}")
        return 1 if len(paths[0]) <= 3 else 2

    def _path_gbps(self, a: str, b: str) -> float:
        """Real rate of the slowest link on the first fewest-hop path."""
        path = self.fabric.shortest_paths(a, b)[0]
        return min(
            self.fabric.link_between(x, y).real_gbps for x, y in zip(path, path[1:], strict=False)
        )

    @staticmethod
    def _kv_pairs(src: Instance, dst: Instance, overlap: np.ndarray) -> list[tuple[str, str]]:
        """The (prefill host, decode host) rank pairs that exchange KV (``overlap > 0``)."""
        return [(src.hosts[i], dst.hosts[j]) for i, j in zip(*np.nonzero(overlap), strict=True)]

    def instance_tier(self, src: Instance, dst: Instance, overlap: np.ndarray) -> int:
        """Slowest tier among the rank pairs that exchange KV (``overlap[i, j] > 0``)."""
        return max(self.host_tier(a, b) for a, b in self._kv_pairs(src, dst, overlap))

    def instance_gbps(self, src: Instance, dst: Instance, overlap: np.ndarray) -> float:
        return min(self.path_gbps(a, b) for a, b in self._kv_pairs(src, dst, overlap))

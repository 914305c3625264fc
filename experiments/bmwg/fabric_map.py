"""A procedure's hosts and switches on the user's fabric (``kvfabric bmwg run --fabric``).

A procedure is written on its reference fabric (``bases.spine_leaf``: GPU ``h0`` …
``h7``, one GPU per server, ``h0``–``h3`` on ``leaf0`` and ``h4``–``h7`` on ``leaf1``;
a few on a rail-optimized one). On another fabric a switch keeps its tier and its
index in that tier (the reference's ``leaf1`` is the user's second edge switch,
``spine0`` its first upper one), and a GPU keeps its edge switch: a pair that shares
a leaf in the reference shares an edge switch on the user's fabric, and a pair on two
leaves crosses the upper tier there too (``HostMap.hosts`` says how). A serving pool's
server numbers become those GPUs' servers and GPU indices, and a link between
switches is the mapped edge switch's link to its n-th upper neighbour. Pure: raw
spec mappings in and out.
A reference that has no counterpart (more GPUs than the user's fabric has) raises
``DoesNotFit`` naming it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from topologies import Fabric
from traffic.serving.instances import server_of

EDGE_KINDS = ("leaf", "rail", "edge", "tor")  # switches GPUs attach to
UPPER_KINDS = ("spine", "core", "agg")


class DoesNotFit(ValueError):
    """The procedure's trial needs something the user's fabric does not have."""


def _tiers(fabric: Fabric) -> tuple[list[str], list[str]]:
    edge = [n.name for n in fabric.switches if n.kind in EDGE_KINDS]
    upper = [n.name for n in fabric.switches if n.kind in UPPER_KINDS]
    return edge, upper


@dataclass(frozen=True)
class HostMap:
    """Reference GPU → user GPU (by position), reference switch → user switch (by tier
    and position), and both fabrics for the links and servers between them."""

    reference: Fabric
    fabric: Fabric

    @cached_property
    def hosts(self) -> dict[str, str]:
        """Reference GPU → user GPU. Each reference GPU, in order, takes a free GPU under
        its edge switch's counterpart (``switch``), preferring one on the server that
        holds its reference server's other GPUs, then one on a server that holds none
        yet; when every server holds some (the fabric has fewer servers than the
        reference), the e-th edge switch's GPUs are taken from its e-th on, so GPU k of
        two leaves does not land in one server of a rail-optimized fabric and take its
        NVLink instead of the spine. GPUs left over (an edge switch with more GPUs than
        its counterpart, a fabric whose GPUs hang off no edge switch) take the remaining
        GPUs in fabric order."""
        ref_edges, _ = _tiers(self.reference)
        under: dict[str, list[str]] = {}
        for gpu in self.fabric.gpus:
            under.setdefault(edge_of(self.fabric, gpu.name) or "", []).append(gpu.name)
        server = {g.name: server_of(g) for g in self.fabric.gpus}
        out: dict[str, str] = {}
        taken: set[str] = set()
        image: dict[int, int] = {}  # reference server → the user server it went to
        for gpu in self.reference.gpus:
            edge = edge_of(self.reference, gpu.name)
            below = under.get(self.switch(edge), []) if edge else []
            free = [g for g in below if g not in taken]
            if not free:
                continue
            e, home, used = ref_edges.index(edge), image.get(server_of(gpu)), set(image.values())
            rank = {
                g: _rank(below.index(g), len(below), e, server[g] == home, server[g] in used)
                for g in free
            }
            out[gpu.name] = min(free, key=rank.__getitem__)
            taken.add(out[gpu.name])
            image.setdefault(server_of(gpu), server[out[gpu.name]])
        rest = iter(g.name for g in self.fabric.gpus if g.name not in taken)
        for gpu in self.reference.gpus:
            if gpu.name not in out and (free := next(rest, None)) is not None:
                out[gpu.name] = free
        return out

    def host(self, name: str) -> str:
        mapped = self.hosts.get(name)
        if mapped is None:
            need = [n.name for n in self.reference.gpus].index(name) + 1
            raise DoesNotFit(
                f"needs GPU {name} (its {need}th), the fabric has {len(self.fabric.gpus)} GPUs"
            )
        return mapped

    def switch(self, name: str) -> str:
        ref_edge, ref_upper = _tiers(self.reference)
        my_edge, my_upper = _tiers(self.fabric)
        for ref, mine in ((ref_edge, my_edge), (ref_upper, my_upper)):
            if name in ref:
                if not mine:
                    raise DoesNotFit(f"needs a switch of {name}'s tier; the fabric has none")
                return mine[ref.index(name) % len(mine)]
        raise DoesNotFit(f"switch {name} has no tier a fabric of another kind shares")

    def node(self, name: str) -> str:
        if name in self.reference.by_name and self.reference.by_name[name].is_host:
            return self.host(name)
        return self.switch(name)

    def link(self, ends: list[str]) -> list[str]:
        """A reference link's counterpart: a host's link to its edge switch, or an edge
        switch's n-th upward link (n: the reference upper switch's position)."""
        a, b = ends
        ref = self.reference.by_name
        if ref[b].is_host:
            a, b = b, a
        if ref[a].is_host:
            host = self.host(a)
            up = [lk.other(host) for lk in self.fabric.links_of(host) if lk.kind != "nvlink"]
            if not up:
                raise DoesNotFit(f"GPU {host} has no fabric link to stand for {a}-{b}")
            return [host, up[0]]
        edge = self.switch(a if ref[a].kind in EDGE_KINDS else b)
        upper_ref = b if ref[a].kind in EDGE_KINDS else a
        _, ref_upper = _tiers(self.reference)
        ups = [
            lk.other(edge)
            for lk in self.fabric.links_of(edge)
            if self.fabric.by_name[lk.other(edge)].kind in UPPER_KINDS
        ]
        if not ups:
            raise DoesNotFit(f"edge switch {edge} has no upward link to stand for {a}-{b}")
        return [edge, ups[ref_upper_index(ref_upper, upper_ref) % len(ups)]]

    def pool(self, servers: list[int]) -> dict[str, Any]:
        """A serving pool's reference servers as the user's ``servers`` and ``gpus``."""
        by_server: dict[int, list[str]] = {}
        for gpu in self.reference.gpus:
            by_server.setdefault(server_of(gpu), []).append(gpu.name)
        picked: dict[int, list[int]] = {}
        for s in servers:
            for name in by_server.get(int(s), []):
                node = self.fabric.by_name[self.host(name)]
                picked.setdefault(server_of(node), []).append(node.index or 0)
        return {"servers": sorted(picked), "gpus": {s: sorted(ix) for s, ix in picked.items()}}


def _rank(at: int, n: int, e: int, home: bool, used: bool) -> tuple[int, int]:
    """How ``HostMap.hosts`` prefers the ``at``-th of the ``n`` GPUs under an edge
    switch for a GPU of the reference's ``e``-th one (smaller first)."""
    if home:
        return (0, at)
    if not used:
        return (1, at)
    return (2, (at - e) % n)


def edge_of(fabric: Fabric, gpu: str) -> str | None:
    """The edge switch (``EDGE_KINDS``) a GPU's fabric link reaches, if any."""
    for lk in fabric.links_of(gpu):
        other = fabric.by_name[lk.other(gpu)]
        if lk.kind != "nvlink" and other.kind in EDGE_KINDS:
            return other.name
    return None


def ref_upper_index(upper: list[str], name: str) -> int:
    return upper.index(name) if name in upper else 0


def _hosts_in(value: Any, hosts: HostMap, names: set[str]) -> Any:
    """Every string of ``value`` that names a reference GPU, mapped."""
    if isinstance(value, str) and value in names:
        return hosts.host(value)
    if isinstance(value, list):
        return [_hosts_in(v, hosts, names) for v in value]
    if isinstance(value, dict):
        return {k: _hosts_in(v, hosts, names) for k, v in value.items()}
    return value


def map_workloads(workloads: list[Any], hosts: HostMap, own_pools: bool) -> list[Any]:
    """The workloads with reference hosts mapped; serving pools' servers mapped unless
    ``own_pools`` (the pools were taken from the user's spec, already its numbering)."""
    names = {n.name for n in hosts.reference.gpus}
    out = []
    for entry in workloads:
        entry = _hosts_in(copy.deepcopy(entry), hosts, names)
        if isinstance(entry, dict) and entry.get("kind") == "serving" and not own_pools:
            for role in ("prefill", "decode"):
                pool = entry.get(role)
                if isinstance(pool, dict) and "gpus" not in pool:
                    entry[role] = pool | hosts.pool(pool.get("servers") or [])
        out.append(entry)
    return out


def map_faults(faults: list[Any], hosts: HostMap) -> list[Any]:
    """Fault timelines with their links (link_down, link_up, link_flap) mapped."""
    out = []
    for fault in copy.deepcopy(faults):
        if isinstance(fault, dict):
            for key in ("link_down", "link_up", "link_degrade"):
                if isinstance(fault.get(key), list):
                    fault[key] = hosts.link(fault[key])
            flap = fault.get("link_flap")
            if isinstance(flap, dict) and isinstance(flap.get("link"), list):
                flap["link"] = hosts.link(flap["link"])
        out.append(fault)
    return out


def onto_fabric(
    raw: Mapping[str, Any],
    hosts: HostMap,
    user: Mapping[str, Any],
    kept_fabric_keys: Mapping[str, Any],
    pools: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The trial's raw spec on the user's fabric: its ``fabric`` (plus the procedure's
    own ``kept_fabric_keys``, e.g. a swept queue limit), ``scale`` and ``controller``
    where given, the serving pools of ``pools`` (``{"prefill": …, "decode": …}``) when
    the procedure does not vary them, and every host and link mapped."""
    out = copy.deepcopy(dict(raw))
    out["fabric"] = copy.deepcopy(dict(user["fabric"])) | dict(kept_fabric_keys)
    for key in ("scale", "controller"):
        if key in user:
            out[key] = copy.deepcopy(user[key])
    workloads = list(out.get("workloads") or [])
    if pools:
        for entry in workloads:
            if isinstance(entry, dict) and entry.get("kind") == "serving":
                entry.update(copy.deepcopy(dict(pools)))
    out["workloads"] = map_workloads(workloads, hosts, own_pools=bool(pools))
    if out.get("faults"):
        out["faults"] = map_faults(out["faults"], hosts)
    return out

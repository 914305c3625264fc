"""Tenants as sets of hosts, and routes that confine each tenant to its spines.

A tenant's "spines" are the fabric's top-tier switches: ``spine`` switches in
spine_leaf and rail_optimized, ``core`` switches in fat_tree (a fat-tree's
aggregation switches, kind ``spine`` inside each pod, stay shared: traffic
between two edges of one pod never reaches the core).

At every switch where the tenant's allowed next hops towards a destination
differ from the fabric's (the switches that choose an uplink), a rule matching
``ipv4_src`` and ``ipv4_dst`` of the two tenant hosts sends the packet to an
ECMP group over the allowed ones only. If failures leave a tenant no path over
its own spines, that pair falls back to the ordinary ECMP routes:
reachability wins over isolation (the rule set then has no tenant rule for
the pair, which a caller can check).
"""

from __future__ import annotations

from typing import Any

from topologies import Fabric
from topologies.fabric import TIER

from .core import PRIORITY_TENANT, FabricState, Forward, PolicyError, ingress
from .paths import next_hops
from .rules import IPV4

Hops = dict[str, dict[str, list[tuple[str, int]]]]


def top_switches(fabric: Fabric) -> list[str]:
    """The switches tenants are confined to: the highest tier present."""
    top = max(TIER[s.kind] for s in fabric.switches)
    return [s.name for s in fabric.switches if TIER[s.kind] == top]


def parse_tenants(fabric: Fabric, tenants: Any) -> dict[str, tuple[str, ...]]:
    """``{tenant: [host, ...]}`` checked: hosts exist, no host in two tenants."""
    if not isinstance(tenants, dict) or not tenants:
        raise PolicyError(f"tenants={tenants!r} is not allowed: must be {{tenant: [host, ...]}}")
    owner: dict[str, str] = {}
    parsed = {}
    for name, hosts in tenants.items():
        if not isinstance(hosts, list | tuple) or not hosts:
            raise PolicyError(f"tenant {name!r}: hosts={hosts!r} must be a non-empty list")
        for host in hosts:
            node = fabric.by_name.get(host) if isinstance(host, str) else None
            if node is None or not node.is_host:
                what = "is a switch" if node else "does not exist"
                raise PolicyError(
                    f"tenant {name!r} names host {host!r}, which {what} "
                    f"in this {fabric.kind} fabric"
                )
            if owner.get(host, name) != name:
                raise PolicyError(f"host {host!r} is in two tenants: {owner[host]!r}, {name!r}")
            owner[host] = name
        parsed[str(name)] = tuple(dict.fromkeys(hosts))
    return parsed


def assign_spines(
    fabric: Fabric, tenants: dict[str, tuple[str, ...]], spines: Any = None
) -> dict[str, tuple[str, ...]]:
    """Each tenant's spines: as given, or an even split of the top-tier
    switches in fabric order among the tenants in name order (the first
    tenants get one more when it does not divide)."""
    top = top_switches(fabric)
    if spines is None:
        names = sorted(tenants)
        if len(names) > len(top):
            raise PolicyError(
                f"{len(names)} tenants but only {len(top)} spines ({', '.join(top)}): "
                "give params['spines'] to share them"
            )
        q, r = divmod(len(top), len(names))
        split, start = {}, 0
        for i, name in enumerate(names):
            size = q + (i < r)
            split[name] = tuple(top[start : start + size])
            start += size
        return split
    if not isinstance(spines, dict):
        raise PolicyError(f"spines={spines!r} is not allowed: must be {{tenant: [spine, ...]}}")
    for name in spines:
        if name not in tenants:
            raise PolicyError(f"spines names tenant {name!r}, which is not in tenants")
    given = {}
    for name in tenants:
        chosen = spines.get(name)
        if not isinstance(chosen, list | tuple) or not chosen:
            raise PolicyError(f"tenant {name!r} has no spines in params['spines']")
        for sw in chosen:
            if sw not in top:
                raise PolicyError(
                    f"tenant {name!r} names spine {sw!r}, which is not a top-tier switch "
                    f"of this {fabric.kind} fabric: allowed {', '.join(top)}"
                )
        given[name] = tuple(dict.fromkeys(chosen))
    return given


def tenant_routes(
    fabric: Fabric,
    state: FabricState,
    hops: Hops,
    tenants: dict[str, tuple[str, ...]],
    spines: dict[str, tuple[str, ...]],
) -> list[Forward]:
    """Source+destination routes that keep each tenant on its own spines."""
    top = top_switches(fabric)
    forwards: dict[tuple, Forward] = {}
    for name, hosts in sorted(tenants.items()):
        banned = [sw for sw in top if sw not in spines[name]]
        cut = {(lk.a, lk.b) for sw in banned for lk in fabric.links_of(sw)}
        allowed = next_hops(fabric, state.down_pairs() + sorted(cut))
        for src in hosts:
            for dst in hosts:
                if src == dst:
                    continue
                for fw in _pair_routes(fabric, src, dst, hops, allowed):
                    forwards[(fw.switch, fw.match)] = fw
    return list(forwards.values())


def _pair_routes(fabric: Fabric, src: str, dst: str, hops: Hops, allowed: Hops) -> list[Forward]:
    """Walk from ``src``'s ingress switch along the allowed next hops; a rule
    wherever they differ from the fabric-wide ones."""
    match = (
        ("eth_type", IPV4),
        ("ipv4_src", fabric.node(src).ip),
        ("ipv4_dst", fabric.node(dst).ip),
    )
    first, _ = ingress(fabric, src, dst)
    if dst not in allowed[first]:
        return []  # no path over the tenant's spines: ordinary ECMP carries it
    found, stack, seen = [], [first], set()
    while stack:
        sw = stack.pop()
        if sw in seen:
            continue
        seen.add(sw)
        mine = allowed[sw][dst]
        if mine != hops[sw][dst]:
            found.append(Forward(sw, PRIORITY_TENANT, match, tuple(p for _n, p in mine)))
        stack.extend(peer for peer, _p in mine if not fabric.node(peer).is_host)
    return found

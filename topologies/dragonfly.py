"""The Dragonfly (Kim, Dally, Scott and Abts, 2008): ``groups`` groups of ``a`` routers,
each router with ``p`` hosts and ``h`` global links; the routers of a group are joined
all-to-all by local links, and every group reaches every other over global links.

A group's global ports are numbered 0 .. a·h - 1, router i holding ports i·h ..
i·h + h - 1. With g groups each group has m = a·h ÷ (g - 1) links to every other (the
largest dragonfly, g = a·h + 1, has exactly one); port k is copy k ÷ (g - 1) of the
link at offset o = k mod (g - 1), and the *arrangement* says where offset o leads (g is
at least h + 1, so a router's global links lead to h different groups):

- ``consecutive``: group i's offset o goes to group o if o < i, else to group o + 1;
- ``palmtree``: group i's offset o goes to group (i - o - 1) mod g.

Routers are ``r{group}_{index}`` (node kind ``router``, ``pod`` the group, ``index``
its place in it), hosts ``h{n}``, each its own server, numbered group by group. A
router's ports: its hosts, then its local links, then its global links. Local and
global links are both of link kind ``fabric`` (a global link joins two pods).

Oversubscription (``Fabric.oversubscription``, ``topo show``): a router has no uplinks,
since every router-to-router port also carries other routers' transit (Valiant's detours,
a minimal route's local hops), so down ÷ up would read a router with p hosts and
a − 1 + h router ports as undersubscribed whatever its bisection. kvfabric reads a
router's hosts' capacity ÷ its share of the bisection (``bisection_gbps`` over half the
routers with GPUs): 1 at full bisection, as a fat-tree reads, and close to 2 for the
balanced Dragonfly, the textbook's "half the injection crosses the global links", so
the figure answers the question a fat-tree's answers (what uniform traffic across the
cut gets) on every kind. The same holds for ``hyperx``.
"""

from __future__ import annotations

from .checks import check_choice, check_gbps, check_int, params_of, refuse
from .fabric import Fabric, FabricBuilder
from .shaping import MAX_BUFFER_PKTS
from .storage import attach_storage_nodes

ARRANGEMENTS = ("consecutive", "palmtree")
MAX_ROUTERS = 4096


def global_peer(arrangement: str, groups: int, group: int, port: int) -> tuple[int, int]:
    """Where global port ``port`` of ``group`` leads: (the other group, its port there)."""
    others = groups - 1
    copy, offset = divmod(port, others)
    if arrangement == "consecutive":
        peer = offset if offset < group else offset + 1
        back = group if group < peer else group - 1
    else:  # palmtree
        peer = (group - offset - 1) % groups
        back = (peer - group - 1) % groups
    return peer, copy * others + back


def dragonfly(
    p: int = 2,
    a: int = 4,
    h: int = 2,
    groups: int = 0,
    arrangement: str = "consecutive",
    host_gbps: float = 100.0,
    local_gbps: float = 100.0,
    global_gbps: float = 100.0,
    buffer_pkts: int = 64,
    storage_nodes: int = 0,
    storage_attach: str = "router",
    storage_gbps: float = 400.0,
) -> Fabric:
    """Dragonfly: groups of a routers joined all-to-all, p hosts and h global links per
    router (balanced a = 2p = 2h); groups 0 means the largest, a·h + 1."""
    g = "dragonfly"
    check_int(g, "p", p, 1, 64)
    check_int(g, "a", a, 1, 64)
    check_int(g, "h", h, 1, 64)
    check_int(g, "groups", groups, 0, 4097)
    check_choice(g, "arrangement", arrangement, ARRANGEMENTS)
    check_gbps(g, "host_gbps", host_gbps)
    check_gbps(g, "local_gbps", local_gbps)
    check_gbps(g, "global_gbps", global_gbps)
    check_int(g, "buffer_pkts", buffer_pkts, 1, MAX_BUFFER_PKTS)
    check_int(g, "storage_nodes", storage_nodes, 0, 64)
    check_gbps(g, "storage_gbps", storage_gbps)
    ports = a * h  # global ports of a group
    count = groups or ports + 1
    if not h + 1 <= count <= ports + 1:
        raise refuse(
            g,
            "groups",
            groups,
            f"0 or from h + 1 = {h + 1} to a·h + 1 = {ports + 1}",
            "a router's h global links lead to h different groups",
        )
    if ports % (count - 1):
        divisors = [n + 1 for n in range(h, ports + 1) if ports % n == 0]
        raise refuse(
            g,
            "groups",
            groups,
            f"one of {', '.join(map(str, divisors))} (0: {ports + 1})",
            f"each group's a·h = {ports} global links are shared equally by the others",
        )
    if count * a > MAX_ROUTERS:
        raise refuse(g, "groups", groups, f"at most {MAX_ROUTERS // a} at a={a}", "routers")
    fb = FabricBuilder(g, params_of(dragonfly, locals()))
    routers = [
        [fb.switch(f"r{grp}_{i}", "router", pod=grp, index=i) for i in range(a)]
        for grp in range(count)
    ]
    number = 0
    for grp in range(count):
        for router in routers[grp]:
            for _ in range(p):
                host = fb.host(f"h{number}", server=number, pod=grp)
                fb.link(host, router, host_gbps, buffer_pkts, "host")
                number += 1
    for members in routers:
        for i, one in enumerate(members):
            for other in members[i + 1 :]:
                fb.link(one, other, local_gbps, buffer_pkts, "fabric")
    for grp in range(count):
        for port in range(ports):
            peer, back = global_peer(arrangement, count, grp, port)
            if (grp, port) < (peer, back):
                ends = routers[grp][port // h], routers[peer][back // h]
                fb.link(*ends, global_gbps, buffer_pkts, "fabric")
    attach_storage_nodes(fb, g, storage_nodes, storage_attach, storage_gbps, buffer_pkts)
    return fb.build()

"""Fabrics as data: counts, degrees, addressing, queries, errors, JSON."""

import ipaddress
import re
from collections import Counter

import pytest

from topologies import (
    GENERATORS,
    Fabric,
    FabricError,
    defaults,
    fat_tree,
    make_fabric,
    port_mac,
    rail_optimized,
    spine_leaf,
)
from topologies.shaping import MAX_BUFFER_PKTS


def degrees(fabric: Fabric) -> Counter:
    return Counter(end for link in fabric.links for end in link.ends())


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fat_tree_counts_and_degrees(k):
    f = fat_tree(k)
    assert len(f.hosts) == k**3 // 4
    assert len(f.switches) == 5 * k * k // 4
    deg = degrees(f)
    # every switch of a k-ary fat-tree has exactly k ports in use
    assert all(deg[s.name] == k for s in f.switches)
    assert all(deg[h.name] == 1 for h in f.hosts)


def test_fat_tree_k4_is_16_hosts_20_switches():
    f = fat_tree(4)
    assert (len(f.hosts), len(f.switches)) == (16, 20)
    assert Counter(s.kind for s in f.switches) == {"leaf": 8, "spine": 8, "core": 4}


@pytest.mark.parametrize("spines,leaves,hpl", [(1, 1, 1), (2, 2, 4), (4, 3, 5)])
def test_spine_leaf_counts_and_degrees(spines, leaves, hpl):
    f = spine_leaf(spines, leaves, hpl)
    assert len(f.hosts) == leaves * hpl
    assert len(f.switches) == spines + leaves
    assert len(f.links) == leaves * hpl + spines * leaves
    deg = degrees(f)
    assert all(deg[f"leaf{i}"] == hpl + spines for i in range(leaves))
    assert all(deg[f"spine{j}"] == leaves for j in range(spines))


@pytest.mark.parametrize("servers,gpus,spines", [(2, 2, 1), (4, 4, 2), (3, 8, 4)])
def test_rail_optimized_mapping(servers, gpus, spines):
    f = rail_optimized(servers, gpus, spines)
    assert len(f.hosts) == servers * gpus
    for h in f.hosts:
        rail_links = [lk for lk in f.links_of(h.name) if lk.kind == "host"]
        assert [lk.other(h.name) for lk in rail_links] == [f"rail{h.index}"]
        assert h.rail == h.index
        assert f.nvlink_switch_of(h.name) == f"nvl{h.server}"
    deg = degrees(f)
    assert all(deg[f"rail{i}"] == servers + spines for i in range(gpus))
    assert all(deg[f"nvl{s}"] == gpus for s in range(servers))


def test_same_server_gpus_never_touch_the_network():
    f = rail_optimized(servers=2, gpus_per_server=4)
    assert f.shortest_paths("gpu0_0", "gpu0_3") == [["gpu0_0", "nvl0", "gpu0_3"]]
    same_rail = f.shortest_paths("gpu0_2", "gpu1_2")
    assert same_rail == [["gpu0_2", "rail2", "gpu1_2"]]
    cross = f.shortest_paths("gpu0_0", "gpu1_1")
    assert cross == [["gpu0_0", "rail0", f"spine{j}", "rail1", "gpu1_1"] for j in range(2)]


@pytest.mark.parametrize("fabric", [fat_tree(4), spine_leaf(3, 4, 2), rail_optimized(4, 4, 2)])
def test_addresses_are_unique_and_deterministic(fabric):
    ips = [h.ip for h in fabric.hosts]
    assert len(set(ips)) == len(ips)
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("10.0.0.0/8") for ip in ips)
    dpids = [s.dpid for s in fabric.switches]
    assert len(set(dpids)) == len(dpids) and min(dpids) >= 1
    again = make_fabric(fabric.kind, **fabric.params)
    assert again == fabric


def test_fat_tree_equal_cost_paths():
    f = fat_tree(4)
    # same edge switch: one path; same pod: k/2; other pod: (k/2)^2
    assert len(f.shortest_paths("h0", "h1")) == 1
    assert len(f.shortest_paths("h0", "h2")) == 2
    assert len(f.shortest_paths("h0", "h15")) == 4
    for path in f.shortest_paths("h0", "h15"):
        assert len(path) == 7 and all(not f.node(n).is_host for n in path[1:-1])


def test_oversubscription_arithmetic():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=8, host_gbps=100, uplink_gbps=200)
    # 8 x 100 down over 2 x 200 up
    assert f.oversubscription() == {"leaf0": 2.0, "leaf1": 2.0}
    r = rail_optimized(servers=4, gpus_per_server=4, spines=2, rail_gbps=400, spine_gbps=400)
    assert r.oversubscription() == {f"rail{i}": 2.0 for i in range(4)}
    assert set(fat_tree(4).oversubscription().values()) == {1.0}


def test_bisection_arithmetic():
    # k=4 fat tree at 100G: k^3/8 hosts x 100G cross the cut
    assert fat_tree(4, host_gbps=100, fabric_gbps=100).bisection_gbps() == pytest.approx(800)
    # 4 leaves x 8 hosts x 100G, each leaf 2 x 100G up: cut limited by 2 leaves' uplinks
    f = spine_leaf(spines=2, leaves=4, hosts_per_leaf=8, host_gbps=100, uplink_gbps=100)
    assert f.bisection_gbps() == pytest.approx(2 * 2 * 100)
    # rail-optimized, 4 servers: servers 0,1 vs 2,3 meet directly on each rail
    r = rail_optimized(servers=4, gpus_per_server=4, spines=1, rail_gbps=400, spine_gbps=100)
    assert r.bisection_gbps() == pytest.approx(8 * 400)


def test_json_round_trip():
    for f in (fat_tree(4), spine_leaf(), rail_optimized()):
        assert Fabric.from_json(f.to_json()) == f


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: spine_leaf(spines=0), ["spine_leaf", "spines=0", "from 1"]),
        (lambda: spine_leaf(host_gbps=-1), ["host_gbps=-1", "> 0"]),
        (lambda: spine_leaf(buffer_pkts=0), ["buffer_pkts=0", "from 1"]),
        (lambda: spine_leaf(leaves=2.5), ["leaves=2.5", "integer"]),
        (lambda: fat_tree(3), ["k=3", "even"]),
        (lambda: fat_tree(0), ["k=0", "even"]),
        (lambda: rail_optimized(gpus_per_server=0), ["gpus_per_server=0"]),
        (lambda: rail_optimized(nvlink_gbps=float("nan")), ["nvlink_gbps=nan"]),
        (lambda: make_fabric("torus"), ["torus", "spine_leaf"]),
        (lambda: make_fabric("fat_tree", pods=4), ["pods", "allowed", "k"]),
    ],
)
def test_bad_parameters_name_themselves(call, words):
    with pytest.raises(FabricError) as info:
        call()
    for word in words:
        assert word in str(info.value)


def test_unknown_node_is_a_clear_error():
    with pytest.raises(FabricError, match="no node named 'gpu9_9'"):
        rail_optimized().node("gpu9_9")


MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")
SIZES = [
    fat_tree(2),
    fat_tree(4),
    fat_tree(8),
    fat_tree(16),  # 1,024 hosts: host numbers past one octet
    spine_leaf(1, 1, 1),
    spine_leaf(3, 4, 2),
    spine_leaf(2, 20, 30),  # 600 hosts
    rail_optimized(1, 1, 1),
    rail_optimized(4, 4, 2),
    rail_optimized(64, 8, 2),  # 512 GPUs, two ports each (rail and NVLink)
]


@pytest.mark.parametrize("fabric", SIZES, ids=lambda f: f"{f.kind}-{len(f.hosts)}")
def test_macs_are_unique_and_locally_administered(fabric):
    macs = [
        port_mac(fabric.node(end).number, link.port_of(end))
        for link in fabric.links
        for end in link.ends()
        if fabric.node(end).is_host
    ]
    assert len(macs) == sum(lk.kind in ("host", "nvlink") for lk in fabric.links)
    assert len(set(macs)) == len(macs)
    assert all(MAC.match(m) for m in macs), [m for m in macs if not MAC.match(m)][:3]
    # locally administered (bit 1), unicast (bit 0) in the first octet
    assert all(int(m[:2], 16) & 0b11 == 0b10 for m in macs)
    ips = [h.ip for h in fabric.hosts]
    assert len(set(ips)) == len(ips)


# Every generator parameter with its allowed range: (kind, name, low, high or None).
# An integer parameter's bounds are inclusive; a rate has no upper bound.
PARAM_RANGES = {
    ("spine_leaf", "spines"): (1, 64),
    ("spine_leaf", "leaves"): (1, 256),
    ("spine_leaf", "hosts_per_leaf"): (1, 256),
    ("spine_leaf", "buffer_pkts"): (1, MAX_BUFFER_PKTS),
    ("fat_tree", "k"): (2, 16),
    ("fat_tree", "buffer_pkts"): (1, MAX_BUFFER_PKTS),
    ("rail_optimized", "servers"): (1, 256),
    ("rail_optimized", "gpus_per_server"): (1, 16),
    ("rail_optimized", "spines"): (1, 64),
    ("rail_optimized", "buffer_pkts"): (1, MAX_BUFFER_PKTS),
    ("dragonfly", "p"): (1, 64),
    ("dragonfly", "a"): (1, 64),
    ("dragonfly", "h"): (1, 64),
    ("dragonfly", "groups"): (0, 4097),  # 0: a·h + 1; a·h + 1 bounds it too (test_dragonfly)
    ("dragonfly", "buffer_pkts"): (1, MAX_BUFFER_PKTS),
    ("hyperx", "k"): (1, 64),
    ("hyperx", "buffer_pkts"): (1, MAX_BUFFER_PKTS),
    **{(kind, "storage_nodes"): (0, 64) for kind in GENERATORS},
}


def _bad_values():
    for kind in GENERATORS:
        for name, default in defaults(kind).items():
            bad = [0, -1, "3", True, None]
            if isinstance(default, str):  # a name: of a switch or a switch kind
                bad = [0, True, None, "nowhere", "nvlink"]
            elif isinstance(default, tuple):  # sizes
                bad = [0, None, "4,4", [], [1], [65], [2] * 5, [2.5], [True, 2], [64, 64, 2]]
            elif isinstance(default, int):
                low, high = PARAM_RANGES[(kind, name)]
                bad = [v for v in bad if not (type(v) is int and v == low)]  # 0 may be allowed
                bad += [low - 1, high + 1, 2.5]
            else:
                bad += [-0.5, float("nan"), float("inf")]
            for value in bad:
                yield pytest.param(kind, name, value, id=f"{kind}.{name}={value!r}")


def test_every_integer_parameter_has_a_known_range():
    ints = {(k, n) for k in GENERATORS for n, d in defaults(k).items() if isinstance(d, int)}
    assert ints == set(PARAM_RANGES)


@pytest.mark.parametrize("kind,name,value", list(_bad_values()))
def test_every_bad_value_of_every_parameter_names_itself(kind, name, value):
    with pytest.raises(FabricError) as info:
        make_fabric(kind, **{name: value})
    message = str(info.value)
    assert message.startswith(f"{kind}: {name}={value!r} is not allowed: must be"), message


@pytest.mark.parametrize("kind", list(GENERATORS))
def test_every_parameter_at_its_bounds_is_allowed(kind):
    for name, default in defaults(kind).items():
        if isinstance(default, int):
            low, high = PARAM_RANGES[(kind, name)]
            special = {"k": (2, 4), "groups": (0, 3)}  # k: even; groups: h + 1 at least
            for value in special.get(name, (low, min(high, low + 2))):
                assert make_fabric(kind, **{name: value}).params[name] == value

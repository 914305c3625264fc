"""Dragonfly and HyperX fabrics as data: counts, degrees, the global-link arrangement,
diameter, bisection, oversubscription, refusals that name the key, and topo show."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import yaml

from experiments.cli.common import EXIT_OK
from experiments.cli.main import main
from experiments.spec.load import SpecError, expand, load_spec
from topologies import Fabric, FabricError, make_fabric
from topologies.dragonfly import global_peer
from topologies.generators import parse_param
from topologies.hyperx import coordinates, router_number

# (p, a, h, groups): balanced a = 2p = 2h at the largest size, smaller group counts,
# an unbalanced one and a one-router group
DRAGONFLIES = [(1, 2, 1, 3), (2, 4, 2, 9), (2, 4, 2, 5), (2, 4, 2, 3), (1, 3, 1, 4), (3, 1, 2, 3)]
SHAPES = [(4,), (3, 3), (4, 4), (2, 3, 4), (2, 2, 2, 2)]


def group_of(fabric: Fabric, name: str) -> int:
    return fabric.node(name).pod


def router_links(fabric: Fabric) -> list:
    return [lk for lk in fabric.links if lk.kind == "fabric"]


@pytest.mark.parametrize("arrangement", ["consecutive", "palmtree"])
@pytest.mark.parametrize(("p", "a", "h", "groups"), DRAGONFLIES)
def test_dragonfly_counts_degrees_and_global_links(p, a, h, groups, arrangement):
    f = make_fabric("dragonfly", p=p, a=a, h=h, groups=groups, arrangement=arrangement)
    assert len(f.gpus) == p * a * groups
    assert len(f.switches) == a * groups and {s.kind for s in f.switches} == {"router"}
    local = [lk for lk in router_links(f) if group_of(f, lk.a) == group_of(f, lk.b)]
    glob = [lk for lk in router_links(f) if group_of(f, lk.a) != group_of(f, lk.b)]
    assert len(local) == groups * a * (a - 1) // 2
    assert len(glob) == groups * a * h // 2
    assert len(f.links) == p * a * groups + len(local) + len(glob)
    degree = Counter(end for lk in f.links for end in lk.ends())
    assert {degree[s.name] for s in f.switches} == {p + (a - 1) + h}
    # every two groups are joined by the same number of global links ...
    per_pair = Counter(frozenset((group_of(f, lk.a), group_of(f, lk.b))) for lk in glob)
    assert set(per_pair.values()) == {a * h // (groups - 1)}
    assert len(per_pair) == groups * (groups - 1) // 2
    # ... and a router's global links lead to different groups
    for sw in f.switches:
        peers = [group_of(f, lk.other(sw.name)) for lk in f.links_of(sw.name) if lk in glob]
        assert len(peers) == len(set(peers)) == h


@pytest.mark.parametrize("arrangement", ["consecutive", "palmtree"])
@pytest.mark.parametrize("groups", [3, 5, 9])
def test_global_ports_pair_up(arrangement, groups):
    """Following a global port and back from its peer returns to it."""
    ports = 8
    for grp in range(groups):
        for port in range(ports):
            peer, back = global_peer(arrangement, groups, grp, port)
            assert peer != grp
            assert global_peer(arrangement, groups, peer, back) == (grp, port)


def test_arrangements_differ():
    one = make_fabric("dragonfly", arrangement="consecutive")
    other = make_fabric("dragonfly", arrangement="palmtree")
    assert {lk.ends() for lk in one.links} != {lk.ends() for lk in other.links}


@pytest.mark.parametrize("arrangement", ["consecutive", "palmtree"])
@pytest.mark.parametrize(("p", "a", "h"), [(1, 2, 1), (2, 4, 2), (3, 6, 3)])
def test_a_balanced_dragonfly_has_diameter_three(p, a, h, arrangement):
    """Local, global, local: three router-to-router hops at most, one of them global."""
    f = make_fabric("dragonfly", p=p, a=a, h=h, arrangement=arrangement)
    assert f.summary()["diameter"] == 3


def test_dragonfly_diameter_with_one_router_per_group_is_one():
    assert make_fabric("dragonfly", p=2, a=1, h=3).diameter() == 1


def test_dragonfly_bisection_is_its_global_links_across_the_cut():
    """Four groups of three routers, one global link between every two groups: the
    first two groups reach the last two over four global links."""
    f = make_fabric("dragonfly", p=1, a=3, h=1, groups=4, global_gbps=50.0)
    assert f.bisection_gbps() == pytest.approx(4 * 50.0)
    # each router: its host's 100 Gbit/s over its share of the bisection, 200 / 6
    assert list(f.oversubscription().values()) == pytest.approx([100 / (200 / 6)] * 12)


def test_the_balanced_dragonfly_has_about_half_bisection():
    """The largest balanced dragonfly: about g²/4 global links across a cut of
    g·a·p/2 hosts, so oversubscription near 2 : 1 (1.8 at g = 9, whose cut splits a group)."""
    info = make_fabric("dragonfly", p=2, a=4, h=2).summary()
    assert info["gpus"] == 72 and info["switches"] == 36
    assert 1.5 <= info["max_oversubscription"] <= 2.0


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("k", [1, 2])
def test_hyperx_counts_degrees_and_diameter(shape, k):
    f = make_fabric("hyperx", shape=shape, k=k)
    routers = math.prod(shape)
    assert len(f.switches) == routers and len(f.gpus) == k * routers
    assert len(router_links(f)) == routers * sum(s - 1 for s in shape) // 2
    degree = Counter(end for lk in f.links for end in lk.ends())
    assert {degree[s.name] for s in f.switches} == {k + sum(s - 1 for s in shape)}
    for lk in router_links(f):  # a link joins routers that differ in one coordinate
        ca = coordinates(shape, f.node(lk.a).number)
        cb = coordinates(shape, f.node(lk.b).number)
        assert sum(x != y for x, y in zip(ca, cb, strict=True)) == 1
    assert f.diameter() == len(shape)
    assert f.params["shape"] == list(shape)


def test_hyperx_router_names_and_numbers_follow_the_lattice():
    shape = (2, 3, 4)
    f = make_fabric("hyperx", shape=shape)
    for sw in f.switches:
        coords = coordinates(shape, sw.number)
        assert router_number(shape, coords) == sw.number
        assert sw.name == "r" + "_".join(map(str, coords))


def test_hyperx_bisection_and_oversubscription():
    """A 4 × 4 HyperX cut between its first two rows and its last two: 4 links in each
    of 4 columns."""
    wide = make_fabric("hyperx", shape=[4, 4], k=1, host_gbps=1000.0, router_gbps=100.0)
    assert wide.bisection_gbps() == pytest.approx(16 * 100.0)
    full = make_fabric("hyperx", shape=[4, 4], k=2)  # k = S/2: full bisection
    assert list(full.oversubscription().values()) == pytest.approx([1.0] * 16)
    thin = make_fabric("hyperx", shape=[4, 4], k=4)
    assert list(thin.oversubscription().values()) == pytest.approx([2.0] * 16)


def test_the_other_kinds_keep_their_diameters():
    assert make_fabric("spine_leaf").diameter() == 2
    assert make_fabric("fat_tree", k=4).diameter() == 4
    assert make_fabric("rail_optimized").diameter() == 2


@pytest.mark.parametrize(
    ("kind", "params", "key", "fragment"),
    [
        ("dragonfly", {"arrangement": "random"}, "arrangement", "consecutive, palmtree"),
        ("dragonfly", {"groups": 4}, "groups", "one of 3, 5, 9"),
        ("dragonfly", {"a": 4, "h": 2, "groups": 2}, "groups", "from h + 1 = 3 to"),
        ("dragonfly", {"groups": 10}, "groups", "a·h + 1 = 9"),
        ("dragonfly", {"a": 0}, "a", "from 1 to 64"),
        ("dragonfly", {"p": 65}, "p", "from 1 to 64"),
        ("dragonfly", {"h": 1.5}, "h", "an integer"),
        ("dragonfly", {"global_gbps": 0}, "global_gbps", "Gbit/s > 0"),
        ("dragonfly", {"storage_attach": "spine"}, "storage_attach", "router"),
        ("hyperx", {"shape": []}, "shape", "1 to 4 dimension sizes"),
        ("hyperx", {"shape": [4, 1]}, "shape", "from 2 to 64"),
        ("hyperx", {"shape": [16, 16, 32]}, "shape", "at most 4096 routers"),
        ("hyperx", {"k": 0}, "k", "from 1 to 64"),
        ("hyperx", {"router_gbps": -1}, "router_gbps", "Gbit/s > 0"),
    ],
)
def test_refusals_name_the_parameter(kind, params, key, fragment):
    with pytest.raises(FabricError) as info:
        make_fabric(kind, **params)
    assert info.value.param == key
    assert str(info.value).startswith(f"{kind}: {key}=")
    assert fragment in str(info.value)


def _spec(fabric: dict) -> str:
    return yaml.safe_dump(
        {
            "name": "lowdiam",
            "duration_s": 5,
            "fabric": fabric,
            "workloads": [{"kind": "incast", "senders": 3, "sru_bytes": 1.0e6, "rounds": 1}],
        }
    )


def test_a_spec_builds_either_fabric():
    run = expand(load_spec(_spec({"kind": "hyperx", "shape": [3, 3], "k": 2})))[0]
    assert run.config.fabric.shape == (3, 3)
    assert len(run.fabric().gpus) == 18
    run = expand(load_spec(_spec({"kind": "dragonfly", "p": 1, "a": 2, "h": 1})))[0]
    assert len(run.fabric().switches) == 6


@pytest.mark.parametrize(
    ("fabric", "key"),
    [
        ({"kind": "dragonfly", "a": 0}, "fabric.a"),
        ({"kind": "dragonfly", "groups": 7}, "fabric.groups"),
        ({"kind": "dragonfly", "arrangement": "spiral"}, "fabric.arrangement"),
        ({"kind": "hyperx", "shape": 4}, "fabric.shape"),
        ({"kind": "hyperx", "shape": [4, 100]}, "fabric.shape"),
        ({"kind": "hyperx", "hosts_per_leaf": 2}, "fabric.hosts_per_leaf"),
    ],
)
def test_a_spec_refusal_names_the_key(fabric, key):
    with pytest.raises(SpecError) as info:
        load_spec(_spec(fabric))
    assert str(info.value).startswith(f"{key}: "), str(info.value)


def test_shape_is_parsed_from_the_command_line():
    assert parse_param("hyperx", "shape", "4,4") == (4, 4)
    assert parse_param("hyperx", "shape", "[2,3,4]") == (2, 3, 4)
    with pytest.raises(FabricError, match="shape"):
        parse_param("hyperx", "shape", "four")


def test_a_hyperx_survives_json():
    f = make_fabric("hyperx", shape=(2, 3), k=2)
    assert Fabric.from_json(f.to_json()) == f


@pytest.mark.parametrize(
    ("argv", "hosts", "routers", "diameter"),
    [
        (["dragonfly", "p=1", "a=2", "h=1"], 6, 6, 3),
        (["dragonfly", "p=2", "a=4", "h=2", "groups=5", "arrangement=palmtree"], 40, 20, 3),
        (["hyperx", "shape=2,3,4", "k=2"], 48, 24, 3),
        (["hyperx", "shape=4,4"], 16, 16, 2),
    ],
)
def test_topo_show_prints_counts_diameter_and_bisection(capsys, argv, hosts, routers, diameter):
    assert main(["topo", "show", *argv, "--json"]) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert (info["gpus"], info["switches"], info["diameter"]) == (hosts, routers, diameter)
    assert info["bisection_gbps"] > 0 and info["max_oversubscription"] > 0
    assert main(["topo", "show", *argv]) == EXIT_OK
    out = capsys.readouterr().out
    assert "routers" in out and "diameter" in out and "bisection" in out
    assert "router oversubscription: hosts ÷ their share of the bisection" in out

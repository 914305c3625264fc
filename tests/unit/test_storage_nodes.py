"""Storage nodes on the fabric generators: where they attach, how they are named and
numbered, that the controller's routes reach them and hosts can address them, and the
attachment points that are refused (with the key named)."""

from __future__ import annotations

import pytest
import yaml

from controller.policy import compute
from controller.walk import trace
from experiments.spec.load import SpecError, load_spec
from topologies import fat_tree, make_fabric, rail_optimized, spine_leaf
from topologies.fabric import FabricError
from topologies.generators import parse_param
from topologies.hostconfig import ip_commands
from topologies.naming import RunNames
from traffic.serving.instances import servers_of


def test_storage_nodes_come_after_every_gpu_and_change_no_gpu():
    plain = rail_optimized(servers=2, gpus_per_server=4)
    f = rail_optimized(servers=2, gpus_per_server=4, storage_nodes=2, storage_gbps=100)
    assert [n.name for n in f.storage_nodes] == ["storage0", "storage1"]
    assert [n.number for n in f.storage_nodes] == [8, 9]
    assert [n.ip for n in f.storage_nodes] == ["10.0.0.9", "10.0.0.10"]
    assert [(g.name, g.number, g.ip) for g in f.gpus] == [
        (g.name, g.number, g.ip) for g in plain.hosts
    ]
    # spine round robin: storage0 on spine0, storage1 on spine1, each at its own rate
    links = {s.name: f.links_of(s.name) for s in f.storage_nodes}
    assert {s: [lk.other(s) for lk in ls] for s, ls in links.items()} == {
        "storage0": ["spine0"],
        "storage1": ["spine1"],
    }
    assert {lk.kind for ls in links.values() for lk in ls} == {"storage"}
    assert {lk.real_gbps for ls in links.values() for lk in ls} == {100.0}
    assert sorted(servers_of(f)) == [0, 1]  # a storage node is no GPU server
    assert f.bisection_gbps() == plain.bisection_gbps()
    info = f.summary()
    assert (info["hosts"], info["gpus"], info["storage_nodes"]) == (10, 8, 2)
    assert info["links_by_kind"]["storage"] == 2


@pytest.mark.parametrize(
    "fabric, attach, switch",
    [
        (spine_leaf, "leaf", "leaf0"),
        (spine_leaf, "spine1", "spine1"),
        (rail_optimized, "rail", "rail0"),
        (rail_optimized, "rail2", "rail2"),
        (fat_tree, "core", "core0"),
        (fat_tree, "leaf1_0", "leaf1_0"),
    ],
)
def test_storage_attaches_to_a_switch_kind_or_a_named_switch(fabric, attach, switch):
    f = fabric(storage_nodes=1, storage_attach=attach)
    (link,) = f.links_of("storage0")
    assert link.other("storage0") == switch


@pytest.mark.parametrize(
    "fabric, attach",
    [(spine_leaf, "rail"), (rail_optimized, "leaf"), (rail_optimized, "nvl0"), (spine_leaf, "x")],
)
def test_an_attachment_point_the_fabric_lacks_is_refused(fabric, attach):
    with pytest.raises(FabricError, match=f"storage_attach={attach!r} is not allowed") as info:
        fabric(storage_nodes=1, storage_attach=attach)
    assert info.value.param == "storage_attach"


def test_the_spec_names_the_attachment_key():
    spec = {
        "name": "s",
        "duration_s": 1,
        "fabric": {"kind": "spine_leaf", "storage_nodes": 1, "storage_attach": "rail"},
        "workloads": [],
    }
    with pytest.raises(SpecError, match=r"fabric\.storage_attach: .*an attachment point this"):
        load_spec(yaml.safe_dump(spec))
    spec["fabric"]["storage_attach"] = 3
    with pytest.raises(SpecError, match=r"fabric\.storage_attach: 3 is not allowed"):
        load_spec(yaml.safe_dump(spec))


def test_topo_show_parameters_parse_a_name():
    assert parse_param("rail_optimized", "storage_attach", "rail1") == "rail1"
    assert (
        make_fabric("rail_optimized", storage_nodes=1, storage_attach="rail1")
        .links_of("storage0")[0]
        .other("storage0")
        == "rail1"
    )


@pytest.mark.parametrize("policy", ["shortest_path", "ecmp", "adaptive", "tenant_paths"])
@pytest.mark.parametrize("attach", ["spine", "rail1"])
def test_every_gpu_reaches_every_storage_node_and_back(policy, attach):
    f = rail_optimized(servers=3, gpus_per_server=4, storage_nodes=2, storage_attach=attach)
    gpus = [g.name for g in f.gpus]
    # tenant a: the first half of the GPUs and storage0; tenant b: the rest, storage1 in none
    tenants = {"a": [*gpus[:6], "storage0"], "b": gpus[6:]}
    rules = compute(f, policy, params={"tenants": tenants} if policy == "tenant_paths" else None)
    for storage in f.storage_nodes:
        for gpu in f.gpus:
            for src, dst in ((gpu.name, storage.name), (storage.name, gpu.name)):
                paths = trace(f, rules, src, dst)
                assert paths and all(p[-1] == dst for p in paths)
                assert {len(p) for p in paths} == {len(f.shortest_paths(src, dst)[0])}
                # a storage node is never transit, and a GPU's traffic never crosses NVLink
                assert all(not n.startswith("nvl") for p in paths for n in p)


def test_flash_traffic_from_a_rail_crosses_the_storage_nodes_own_link():
    f = rail_optimized(servers=2, gpus_per_server=2, storage_nodes=1, storage_attach="rail0")
    rules = compute(f, "shortest_path")
    assert trace(f, rules, "gpu1_0", "storage0") == [["gpu1_0", "rail0", "storage0"]]
    (path,) = trace(f, rules, "gpu1_1", "storage0")
    assert path[0] == "gpu1_1" and path[1] == "rail1" and path[-2:] == ["rail0", "storage0"]


def test_hosts_address_storage_nodes_and_storage_nodes_address_hosts():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2, storage_nodes=1)
    cmds = ip_commands(f, "h0", lambda h, p: f"{h}-eth{p}")
    storage_ip = f.node("storage0").ip
    assert ["neigh", "replace", storage_ip] == cmds[-1][:3]
    back = ip_commands(f, "storage0", lambda h, p: f"{h}-eth{p}")
    assert {c[2] for c in back} == {h.ip for h in f.gpus}
    names = RunNames("kfab")
    assert names.node(f.node("storage0")) == "kfabh4"

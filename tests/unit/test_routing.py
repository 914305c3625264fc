"""Shortest-path rules as data: every host reaches every other, no loops."""

import pytest

from controller.policy import FabricState, PolicyError, compute
from controller.walk import ForwardingError, trace
from topologies import fat_tree, rail_optimized, spine_leaf
from topologies.hostconfig import ip_commands

FABRICS = [spine_leaf(2, 3, 2), fat_tree(4), rail_optimized(3, 4, 2)]


@pytest.mark.parametrize("fabric", FABRICS, ids=lambda f: f.kind)
def test_shortest_path_reaches_every_host_without_loops(fabric):
    rules = compute(fabric, "shortest_path")
    for src in fabric.hosts:
        for dst in fabric.hosts:
            if src != dst:
                paths = trace(fabric, rules, src.name, dst.name)
                assert len(paths) == 1
                assert paths[0][-1] == dst.name
                assert len(paths[0]) == len(fabric.shortest_paths(src.name, dst.name)[0])


def test_shortest_path_concentrates_on_one_spine():
    f = spine_leaf(spines=4, leaves=2, hosts_per_leaf=4)
    rules = compute(f, "shortest_path")
    spines = {trace(f, rules, f"h{s}", f"h{d}")[0][2] for s in range(4) for d in range(4, 8)}
    assert len(spines) == 1


def test_shortest_path_picks_its_spine_at_random_from_the_seed():
    f = spine_leaf(spines=4, leaves=2, hosts_per_leaf=4)

    def spine(seed: int) -> str:
        rules = compute(f, "shortest_path", params={"seed": seed})
        return trace(f, rules, "h0", "h5")[0][2]

    assert spine(11) == spine(11)  # same seed, same rules
    # not the lowest-numbered spine every time: each of the four is some seed's choice
    assert {spine(seed) for seed in range(40)} == {"spine0", "spine1", "spine2", "spine3"}


def test_a_link_failure_keeps_every_shortest_path_choice_it_does_not_take_away():
    f = spine_leaf(spines=4, leaves=2, hosts_per_leaf=2)
    params = {"seed": 3}
    chosen = trace(f, compute(f, "shortest_path", params=params), "h0", "h2")[0][2]
    other = next(s for s in ("spine0", "spine1", "spine2", "spine3") if s != chosen)
    state = FabricState().with_link("leaf0", other, up=False)
    assert trace(f, compute(f, "shortest_path", state, params), "h0", "h2")[0][2] == chosen
    gone = FabricState().with_link("leaf0", chosen, up=False)
    assert trace(f, compute(f, "shortest_path", gone, params), "h0", "h2")[0][2] != chosen


def test_a_bad_seed_is_refused():
    with pytest.raises(PolicyError, match="seed=-1 is not allowed"):
        compute(spine_leaf(), "shortest_path", params={"seed": -1})


def test_link_down_is_routed_around():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    state = FabricState().with_link("leaf0", "spine0", up=False)
    rules = compute(f, "shortest_path", state)
    assert trace(f, rules, "h0", "h3") == [["h0", "leaf0", "spine1", "leaf1", "h3"]]
    assert all("spine0" not in p for s in ("h0", "h1") for p in trace(f, rules, s, "h2"))


def test_a_missing_rule_is_caught_by_the_walker():
    f = spine_leaf(spines=1, leaves=2, hosts_per_leaf=1)
    rules = compute(f, "shortest_path")
    rules.rules = [r for r in rules.rules if r.switch != "spine0"]
    with pytest.raises(ForwardingError, match="dropped at spine0"):
        trace(f, rules, "h0", "h1")


def test_unknown_policy():
    with pytest.raises(PolicyError, match="'ospf' is not known: allowed shortest_path"):
        compute(spine_leaf(), "ospf")


def test_host_config_uses_nvlink_for_same_server_peers():
    f = rail_optimized(servers=2, gpus_per_server=2)
    cmds = ip_commands(f, "gpu0_0", lambda node, port: f"{node}-eth{port}")
    routes = [c for c in cmds if c[0] == "route"]
    assert routes == [["route", "replace", "10.0.0.2/32", "dev", "gpu0_0-eth1"]]
    neigh = {c[2]: (c[4], c[6]) for c in cmds if c[0] == "neigh"}
    assert neigh["10.0.0.2"] == ("02:00:01:00:00:02", "gpu0_0-eth1")  # peer's NVLink port
    assert neigh["10.0.0.3"] == ("02:00:00:00:00:03", "gpu0_0-eth0")
    assert len(neigh) == 3

"""Placement of a fabric on several machines, and the plan's traffic across them (no root)."""

import json

import pandas as pd
import pytest

from controller.policy import compute
from controller.walk import trace
from experiments.cli.main import EXIT_OK, EXIT_USAGE, main
from experiments.orchestration.crossing import cross_traffic
from topologies import Fabric, FabricError, make_fabric
from topologies.placement import MachineShare, place
from topologies.scale import Scale
from topologies.shaping import switching_demand_mbps

TWO = [MachineShare("a"), MachineShare("b")]


def cut_gbps(fabric: Fabric, machine_of: dict[str, str]) -> float:
    return sum(lk.real_gbps for lk in fabric.links if machine_of[lk.a] != machine_of[lk.b])


def test_rail_optimized_keeps_every_server_whole_and_cuts_less_than_halving_it():
    fabric = make_fabric("rail_optimized", servers=8)
    placement = place(fabric, TWO)
    for gpu in fabric.gpus:
        peers = [g for g in fabric.gpus if g.server == gpu.server]
        nvl = fabric.nvlink_switch_of(gpu.name)
        assert {placement.machine_of[n.name] for n in peers} == {placement.machine_of[nvl]}
    assert not [lk for lk in placement.cut if lk.kind == "nvlink"]
    # the obvious split: servers 0-3, rails 0-1 and spine0 on a; the rest on b
    first = {f"rail{i}" for i in (0, 1)} | {"spine0"}
    naive = {
        n.name: "a" if (n.server is not None and n.server < 4) or n.name in first else "b"
        for n in fabric.nodes
    }
    assert placement.cut_gbps < cut_gbps(fabric, naive)
    assert placement.cut_gbps == cut_gbps(fabric, dict(placement.machine_of))


def test_spine_leaf_puts_two_leaves_with_their_hosts_on_each_machine():
    fabric = make_fabric("spine_leaf", leaves=4, spines=2)
    placement = place(fabric, TWO)
    for m in placement.machines:
        assert len([s for s in m.switches if s.startswith("leaf")]) == 2
        assert len(m.hosts) == 8
    for host in fabric.hosts:  # every host with its leaf: only leaf-spine links are cut
        leaf = fabric.links_of(host.name)[0].other(host.name)
        assert placement.machine_of[host.name] == placement.machine_of[leaf]
    assert {lk.kind for lk in placement.cut} == {"fabric"}
    assert placement.cut_gbps == 4 * 400  # two leaves' links to the spines of the other side
    alternate = {h.name: "ab"[h.number % 2] for h in fabric.hosts}
    alternate |= {s.name: "ab"[s.number % 2] for s in fabric.switches}
    assert placement.cut_gbps < cut_gbps(fabric, alternate)


def test_the_shares_add_up_to_the_one_machine_demand_and_balance():
    fabric = make_fabric("fat_tree", k=4)
    placement = place(fabric, TWO, scale=Scale(1e-4))
    total = sum(m.demand_mbps for m in placement.machines)
    assert total == pytest.approx(switching_demand_mbps(fabric, Scale(1e-4)), rel=0.02)
    assert [round(m.share, 2) for m in placement.machines] == [0.5, 0.5]


def test_a_machine_three_times_larger_takes_about_three_times_the_load():
    fabric = make_fabric("spine_leaf", leaves=8, spines=2)
    placement = place(fabric, [MachineShare("big", 300.0), MachineShare("small", 100.0)])
    big, small = placement.machine("big"), placement.machine("small")
    assert big.share > 0.6 and small.share < 0.4
    assert big.share <= 0.75 * 1.25 and small.share <= 0.25 * 1.25
    assert len(big.hosts) > 2 * len(small.hosts)
    even = place(fabric, [MachineShare("big", 100.0), MachineShare("small", 100.0)])
    assert even.machine("big").share == pytest.approx(0.5, abs=0.1)


def test_fits_says_which_machine_is_over_its_capacity():
    fabric = make_fabric("spine_leaf", leaves=4)
    fine = place(fabric, [MachineShare("a", 450.0), MachineShare("b", 450.0)])
    assert [m.fits for m in fine.machines] == [True, True]
    tight = place(fabric, [MachineShare("a", 150.0), MachineShare("b", 150.0)])
    assert [m.fits for m in tight.machines] == [False, False]
    assert [m.fits for m in place(fabric, TWO).machines] == [None, None]


def test_the_same_fabric_gives_the_same_placement():
    fabric = make_fabric("rail_optimized", servers=8, spines=4)
    machines = [MachineShare("x"), MachineShare("y"), MachineShare("z")]
    first, second = place(fabric, machines), place(fabric, machines)
    assert dict(first.machine_of) == dict(second.machine_of)
    assert first.cut == second.cut and first.machines == second.machines


@pytest.mark.parametrize(
    "kind, params, machines, says",
    [
        ("spine_leaf", {}, [], "at least 1 machine"),
        (
            "spine_leaf",
            {"leaves": 1, "spines": 1},
            [MachineShare(n) for n in "abc"],
            "at most 2 machines",
        ),
        ("spine_leaf", {}, [MachineShare("a"), MachineShare("a")], "unique"),
        ("spine_leaf", {}, [MachineShare("a", 100.0), MachineShare("b")], "every machine"),
        ("rail_optimized", {"nvlink_gbps": 3600.0}, [MachineShare("a", 1.0)], "GPU server 0"),
    ],
)
def test_refusals_name_the_servers_parameter(kind, params, machines, says):
    with pytest.raises(FabricError) as caught:
        place(make_fabric(kind, **params), machines)
    assert caught.value.param == "servers" and says in str(caught.value)


def all_to_all(hosts: list[str], size: int) -> pd.DataFrame:
    pairs = [(a, b) for a in hosts for b in hosts if a != b]
    return pd.DataFrame(
        {"src": [a for a, _ in pairs], "dst": [b for _, b in pairs], "bytes": size, "t_sched_ns": 0}
    )


def test_all_to_all_counts_each_byte_once_per_crossing():
    fabric = make_fabric("spine_leaf", leaves=4, spines=2)
    placement = place(fabric, TWO)
    where = placement.machine_of
    size = 1_000_000
    hosts = [h.name for h in fabric.hosts]
    crossing = cross_traffic(placement, fabric, all_to_all(hosts, size), 1e-4)

    def leaf(h: str) -> str:
        return fabric.links_of(h)[0].other(h)

    # shortest_path sends every flow from a leaf over the one spine that leaf prefers
    rules = compute(fabric, "shortest_path")
    expected: dict[tuple[str, str], float] = {}
    for src in hosts:
        for dst in hosts:
            up = trace(fabric, rules, src, dst)[0][2] if src != dst else None
            path = (
                [src, leaf(src), dst]
                if leaf(src) == leaf(dst)
                else [src, leaf(src), up, leaf(dst), dst]
            )
            for u, v in zip(path, path[1:], strict=False):
                if src != dst and where[u] != where[v]:
                    key = (where[u], where[v])
                    expected[key] = expected.get(key, 0) + size
    got = {(r.from_machine, r.to_machine): r.bytes for r in crossing.pairs.itertuples()}
    assert got == expected
    assert crossing.links["bytes"].sum() == crossing.crossing_bytes
    assert crossing.total_bytes == len(hosts) * (len(hosts) - 1) * size
    # flows between the two leaves of the side without spine0 cross twice
    assert crossing.crossing_bytes > 2 * 8 * 8 * size


def test_ecmp_splits_a_flow_over_both_spines_and_keeps_its_bytes():
    fabric = make_fabric("spine_leaf", leaves=2, spines=2)
    placement = place(fabric, TWO)
    a_host = next(h for h in placement.machine("a").hosts)
    b_host = next(h for h in placement.machine("b").hosts)
    one = pd.DataFrame({"src": [a_host], "dst": [b_host], "bytes": [8_000_000], "t_sched_ns": 0})
    crossing = cross_traffic(placement, fabric, one, 1e-4, "ecmp")
    assert crossing.pairs["bytes"].tolist() == [8_000_000]
    assert sorted(crossing.links["bytes"].tolist()) == [4_000_000, 4_000_000]


def test_topo_show_with_servers_prints_the_cut_links_and_whether_each_machine_fits(capsys):
    argv = ["topo", "show", "rail_optimized", "servers=8"]
    assert main([*argv, "--servers", "2"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "cut: 14 links, 5600 Gbit/s" in out and "rail1-spine0" in out
    assert "fits" in out and "m1 does not fit" in out
    assert main([*argv, "--servers", "a=2000,b=2000", "--json"]) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in info["placement"]["machines"]] == ["a", "b"]
    assert [m["fits"] for m in info["placement"]["machines"]] == [True, True]
    assert len(info["placement"]["cut"]) == 14
    assert main(argv) == EXIT_OK
    assert "cut:" not in capsys.readouterr().out


def test_topo_show_of_a_spec_prints_the_traffic_across_each_boundary(capsys):
    assert main(["topo", "show", "noisy-neighbour", "--servers", "2", "--json"]) == EXIT_OK
    crossing = json.loads(capsys.readouterr().out)["placement"]["cross_traffic"]
    assert {(p["from_machine"], p["to_machine"]) for p in crossing["pairs"]} == {
        ("m1", "m2"),
        ("m2", "m1"),
    }
    assert 0 < crossing["crossing_bytes"] <= 2 * crossing["total_bytes"]


def test_topo_show_refuses_zero_servers_in_one_line(capsys):
    assert main(["topo", "show", "spine_leaf", "--servers", "0"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--servers 0" in err

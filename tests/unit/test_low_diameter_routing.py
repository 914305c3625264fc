"""Minimal, Valiant and UGAL routing as rules, walked through the fake flow table
(``controller.walk``): every host reaches every other without a loop, on dragonflies
and HyperX fabrics of several sizes, and the routes have the shape each routing
promises (one global link minimally, two through a third group by Valiant)."""

from __future__ import annotations

import pytest
import yaml

from controller import ugal, valiant
from controller.minimal import minimal_hops
from controller.policy import FabricState, PolicyError, compute, path_hops
from controller.rules import TCP, RuleSet
from controller.session import ControllerSession, Flow
from controller.walk import trace
from experiments.orchestration.plan import controller_params
from experiments.spec.load import SpecError, expand, load_spec
from topologies import Fabric, make_fabric
from topologies.hyperx import coordinates

POLICIES = ("minimal", "valiant", "ugal")
DRAGONFLIES = [
    dict(p=1, a=2, h=1),
    dict(p=1, a=2, h=1, arrangement="palmtree"),
    dict(p=2, a=2, h=1),
    dict(p=1, a=4, h=2, groups=5),
    dict(p=1, a=4, h=2, groups=5, arrangement="palmtree"),
]
HYPERX = [dict(shape=[4], k=2), dict(shape=[3, 3]), dict(shape=[2, 3, 2])]
FABRICS = [("dragonfly", p) for p in DRAGONFLIES] + [("hyperx", p) for p in HYPERX]


def params(policy: str, seed: int = 7) -> dict:
    return {"seed": seed} if policy in ("valiant", "ugal") else {}


def all_paths(f: Fabric, rules: RuleSet) -> dict[tuple[str, str], list[list[str]]]:
    """Every pair's paths; the walker raises on a loop, a drop or a wrong host."""
    return {
        (s.name, d.name): trace(f, rules, s.name, d.name)
        for s in f.hosts
        for d in f.hosts
        if s != d
    }


def switch_hops(path: list[str]) -> int:
    return len(path) - 3


def global_links(f: Fabric, path: list[str]) -> int:
    pods = [f.node(n).pod for n in path[1:-1]]
    return sum(a != b for a, b in zip(pods, pods[1:], strict=False))


def differing(f: Fabric, a: str, b: str) -> int:
    shape = f.params["shape"]
    ca, cb = (coordinates(shape, f.node(x).number) for x in (a, b))
    return sum(x != y for x, y in zip(ca, cb, strict=True))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("kind", "given"), FABRICS, ids=lambda v: str(v))
def test_every_pair_is_reached_without_loops(kind, given, policy):
    f = make_fabric(kind, **given)
    paths = all_paths(f, compute(f, policy, params=params(policy)))
    assert all(paths.values())
    longest = max(switch_hops(p) for ps in paths.values() for p in ps)
    diameter = f.diameter()
    if policy != "valiant":  # minimal routes: as long as the diameter at most
        assert longest == diameter
    assert longest <= 2 * diameter - (kind == "dragonfly")  # Valiant: l-g-l-g-l at most


@pytest.mark.parametrize("given", DRAGONFLIES, ids=str)
def test_dragonfly_minimal_crosses_one_global_link_at_most(given):
    f = make_fabric("dragonfly", **given)
    for (src, dst), paths in all_paths(f, compute(f, "minimal")).items():
        same_group = f.node(src).pod == f.node(dst).pod
        for path in paths:
            assert global_links(f, path) == (0 if same_group else 1)
            assert switch_hops(path) <= 3


@pytest.mark.parametrize("given", DRAGONFLIES, ids=str)
def test_dragonfly_valiant_goes_through_a_third_group(given):
    f = make_fabric("dragonfly", **given)
    for (src, dst), paths in all_paths(f, compute(f, "valiant", params={"seed": 3})).items():
        (path,) = paths  # one route per pair: no ECMP under Valiant
        ends = {f.node(src).pod, f.node(dst).pod}
        if len(ends) == 1:
            assert global_links(f, path) == 0
            continue
        assert global_links(f, path) == 2
        assert {f.node(n).pod for n in path[1:-1]} - ends  # a third group


@pytest.mark.parametrize("given", HYPERX, ids=str)
def test_hyperx_minimal_fixes_one_coordinate_per_hop(given):
    f = make_fabric("hyperx", **given)
    for paths in all_paths(f, compute(f, "minimal")).values():
        need = differing(f, paths[0][1], paths[0][-2])
        assert all(switch_hops(p) == need for p in paths)
        assert len(paths) == max(1, _factorial(need))  # every order of the dimensions


def _factorial(n: int) -> int:
    return 1 if n <= 1 else n * _factorial(n - 1)


@pytest.mark.parametrize("given", HYPERX, ids=str)
def test_hyperx_valiant_goes_through_a_third_router(given):
    f = make_fabric("hyperx", **given)
    for (_src, _dst), paths in all_paths(f, compute(f, "valiant", params={"seed": 5})).items():
        (path,) = paths
        first, last = path[1], path[-2]
        if first == last:
            assert switch_hops(path) == 0
            continue
        assert switch_hops(path) >= max(2, differing(f, first, last))
        assert len(set(path)) == len(path)


def test_valiant_draws_from_the_seed():
    f = make_fabric("dragonfly", p=1, a=4, h=2, groups=5)
    one = compute(f, "valiant", params={"seed": 1})
    assert set(one.rules) == set(compute(f, "valiant", params={"seed": 1}).rules)
    assert set(one.rules) != set(compute(f, "valiant", params={"seed": 2}).rules)


@pytest.mark.parametrize("policy", ["minimal", "valiant"])
def test_a_global_link_down_is_routed_around(policy):
    f = make_fabric("dragonfly", p=1, a=2, h=1)  # one global link between two groups
    glob = next(
        lk for lk in f.links if lk.kind == "fabric" and f.node(lk.a).pod != f.node(lk.b).pod
    )
    state = FabricState().with_link(glob.a, glob.b, up=False)
    paths = all_paths(f, compute(f, policy, state, params(policy)))
    for ps in paths.values():
        for path in ps:
            assert not any({a, b} == {glob.a, glob.b} for a, b in zip(path, path[1:], strict=False))


@pytest.mark.parametrize("policy", ["valiant", "ugal"])
@pytest.mark.parametrize(
    "fabric",
    [
        make_fabric("spine_leaf", spines=2, leaves=3, hosts_per_leaf=2),
        make_fabric("fat_tree", k=4),
        make_fabric("rail_optimized", servers=2, gpus_per_server=3),
    ],
    ids=lambda f: f.kind,
)
def test_the_other_kinds_route_valiant_through_a_third_switch(fabric, policy):
    paths = all_paths(fabric, compute(fabric, policy, params={"seed": 1}))
    assert all(paths.values())


@pytest.mark.parametrize("policy", ["valiant", "ugal"])
@pytest.mark.parametrize(
    ("kind", "given", "fragment"),
    [
        ("spine_leaf", dict(leaves=2), "spine_leaf fabric has 2"),
        ("dragonfly", dict(p=1, a=1, h=1), "groups; this dragonfly fabric has 2"),
        ("hyperx", dict(shape=[2]), "hyperx fabric has 2"),
    ],
)
def test_valiant_needs_a_third_intermediate(kind, given, fragment, policy):
    with pytest.raises(PolicyError, match=f"controller.policy {policy}: .*{fragment}"):
        compute(make_fabric(kind, **given), policy, params={"seed": 1})


def test_a_spec_names_controller_policy_when_valiant_cannot_route_its_fabric():
    spec = {
        "name": "valiant",
        "duration_s": 5,
        "fabric": {"kind": "spine_leaf", "leaves": 2},
        "controller": {"policy": "ugal"},
        "workloads": [{"kind": "incast", "senders": 3, "sru_bytes": 1.0e6, "rounds": 1}],
    }
    with pytest.raises(SpecError) as info:
        load_spec(yaml.safe_dump(spec))
    assert info.value.path == "controller.policy"
    assert "spine_leaf fabric has 2" in str(info.value) and "minimal" in str(info.value)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "1"])
def test_a_bad_seed_is_refused(seed):
    with pytest.raises(PolicyError, match="seed="):
        compute(make_fabric("hyperx"), "valiant", params={"seed": seed})


def test_tenant_paths_is_refused_on_routers():
    f = make_fabric("hyperx", shape=[3, 3])
    tenants = {"blue": ["h0", "h1"], "red": ["h2", "h3"]}
    with pytest.raises(PolicyError, match="controller.policy tenant_paths: .*routers only"):
        compute(f, "tenant_paths", params={"tenants": tenants})


def test_minimal_spreads_over_every_minimal_route_whatever_the_seed():
    # every policy is given the run's seed (ties); minimal has none to break
    f = make_fabric("hyperx")
    one, two = (compute(f, "minimal", params={"seed": s}) for s in (1, 2))
    assert one.rules == two.rules and one.groups == two.groups


def _placed(f: Fabric, loads: dict, flow: Flow) -> tuple[ugal.Placement, list[str]]:
    hops = minimal_hops(f)
    placed = ugal.place_flow(f, FabricState(), hops, flow, loads, seed=4)
    rules = compute(f, "ugal", params={"seed": 4})
    rules.rules += placed.rules
    src, dst = (f.host_by_ip(ip).name for ip in flow[:2])
    (path,) = trace(f, rules, src, dst, ip_proto=TCP, tcp_src=flow.sport, tcp_dst=flow.dport)
    return placed, path


@pytest.mark.parametrize(("kind", "given"), [FABRICS[3], FABRICS[6]], ids=str)
def test_ugal_takes_minimal_when_idle_and_valiant_when_minimal_is_loaded(kind, given):
    f = make_fabric(kind, **given)
    src, dst = f.hosts[0], f.hosts[-1]
    minimal = trace(f, compute(f, "minimal"), src.name, dst.name)
    for sport in range(40000, 40100):  # a flow whose drawn intermediate is off every minimal route
        flow = Flow(src.ip, dst.ip, TCP, sport, 5201)
        rng = valiant.pair_random(4, *flow)
        detour = valiant.route(f, FabricState(), minimal_hops(f), src.name, dst.name, rng)
        if len(detour) > len(minimal[0]):
            break
    placed, path = _placed(f, {}, flow)
    assert placed.route == "minimal" and path in minimal and switch_hops(path) == placed.hops
    # every minimal route busy where the drawn Valiant route is not: the detour is cheaper
    spared = set(zip(detour[1:-1], detour[2:], strict=True))
    loads = {
        (a, f.port(a, b)): 1e9
        for route in minimal
        for a, b in zip(route[1:-1], route[2:], strict=True)
        if (a, b) not in spared
    }
    placed, path = _placed(f, loads, flow)
    assert placed.route == "valiant" and path == detour
    assert (
        switch_hops(path)
        == placed.hops
        > switch_hops(trace(f, compute(f, "minimal"), src.name, dst.name)[0])
    )


def test_a_ugal_session_counts_its_placements_and_an_install_its_hops():
    f = make_fabric("dragonfly", p=1, a=2, h=1)
    session = ControllerSession(f, "ugal", {"seed": 2})
    for sw in f.switches:
        session.switch_connected(sw.dpid, 1)
    answer, _ = session.control({"cmd": "events"}, 5)
    (install,) = [e for e in answer["events"] if e["event"] == "install"]
    assert "path_hops" not in install  # not while the install's barriers are out
    for sw in f.switches:
        session.barrier_reply(sw.dpid, 6)
    answer, _ = session.control({"cmd": "events"}, 7)
    (install,) = [e for e in answer["events"] if e["event"] == "install"]
    assert install["path_hops"] == path_hops(f, "ugal", FabricState(), {"seed": 2})
    assert sum(install["path_hops"].values()) == 6 * 5  # every ordered pair once
    assert max(map(int, install["path_hops"])) == 3
    assert session.places_flows
    flow = Flow(f.hosts[0].ip, f.hosts[-1].ip, TCP, 40000, 5201)
    assert session.packet_in(flow, 10)
    answer, _ = session.control({"cmd": "events"}, 20)
    (counts,) = [e for e in answer["events"] if e["event"] == "placed_paths"]
    assert sum(counts["minimal"].values()) == 1 and counts["valiant"] == {}


def test_path_hops_of_valiant_is_longer_than_minimal():
    f = make_fabric("hyperx", shape=[3, 3])
    minimal = path_hops(f, "minimal", FabricState(), {})
    detour = path_hops(f, "valiant", FabricState(), {"seed": 1})
    assert max(map(int, minimal)) == 2 and max(map(int, detour)) == 4
    assert sum(minimal.values()) == sum(detour.values()) == 9 * 8
    assert path_hops(f, "ecmp", FabricState(), {}) is None


def test_valiant_seed_reaches_the_policy_from_the_run():
    spec = {
        "name": "valiant",
        "seed": 11,
        "duration_s": 5,
        "fabric": {"kind": "hyperx", "shape": [3, 3]},
        "controller": {"policy": "valiant"},
        "workloads": [{"kind": "incast", "senders": 3, "sru_bytes": 1.0e6, "rounds": 1}],
    }
    run = expand(load_spec(yaml.safe_dump(spec)))[0]
    params = controller_params(run.config.controller, run.config.seed)
    assert params == {"seed": run.config.seed}
    assert compute(run.fabric(), "valiant", params=params).rules
    plain = controller_params(run.config.controller)
    assert plain == {}

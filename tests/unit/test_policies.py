"""Every policy's rules walked like a flow table (Faucet-style): reachability,
no loops, ECMP groups equal to the equal-cost next hops, tenant confinement,
failures, adaptive placement, rule diffs and bad parameters."""

import json
import shutil
import subprocess

import pytest

from controller.adaptive import place_flow, stale_placements
from controller.core import PRIORITY_ROUTE, TABLE_PLACE, TABLE_ROUTE, ingress
from controller.paths import next_hops
from controller.policy import POLICIES, FabricState, PolicyError, compute
from controller.rules import CONTROLLER, RuleSet, diff, ofctl_flow, ofctl_group
from controller.tenants import assign_spines, top_switches
from controller.walk import deliveries, trace
from topologies import fat_tree, rail_optimized, spine_leaf

FABRICS = [spine_leaf(2, 3, 2), fat_tree(4), rail_optimized(3, 4, 2)]
TCP = {"ip_proto": 6, "tcp_src": 40000, "tcp_dst": 5201}


def halves(fabric, spare=1):
    """Two tenants, hosts alternating (so both span leaves), ``spare`` hosts left out."""
    hosts = [h.name for h in fabric.hosts][: len(fabric.hosts) - spare]
    return {"blue": hosts[::2], "red": hosts[1::2]}


def params_for(policy, fabric):
    if policy in ("valiant", "ugal"):
        return {"seed": 1}
    return {"tenants": halves(fabric)} if policy == "tenant_paths" else {}


# Valiant routes every pair through an intermediate switch: not a fewest-hop path
# (tests/unit/test_low_diameter_routing.py judges its routes).
DETOURING = ("valiant",)


def pairs(fabric):
    return [(s.name, d.name) for s in fabric.hosts for d in fabric.hosts if s != d]


def fabric_paths(fabric, src, dst, down=()):
    """Fewest-hop paths that start where the host's routing table sends the packet."""
    first, _ = ingress(fabric, src, dst)
    return [p for p in fabric.shortest_paths(src, dst, down) if p[1] == first]


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("fabric", FABRICS, ids=lambda f: f.kind)
def test_every_policy_reaches_every_host_on_shortest_paths(fabric, policy):
    rules = compute(fabric, policy, params=params_for(policy, fabric))
    for src, dst in pairs(fabric):
        paths = trace(fabric, rules, src, dst, **TCP)  # raises on a loop or a drop
        assert paths
        if policy not in DETOURING:
            assert all(p in fabric_paths(fabric, src, dst) for p in paths)


@pytest.mark.parametrize("fabric", FABRICS, ids=lambda f: f.kind)
def test_ecmp_groups_are_exactly_the_equal_cost_next_hops(fabric):
    rules = compute(fabric, "ecmp")
    hops = next_hops(fabric)
    groups = {(g.switch, g.group_id): sorted(g.outputs()) for g in rules.groups}
    routes = [r for r in rules.rules if r.table == TABLE_ROUTE]
    assert len(routes) == sum(len(per_dst) for per_dst in hops.values())
    for rule in routes:
        dst = fabric.host_by_ip(rule.match_dict()["ipv4_dst"]).name
        expected = [port for _peer, port in hops[rule.switch][dst]]
        if len(expected) == 1:
            assert rule.outputs() == expected and rule.group() is None
        else:
            assert groups[(rule.switch, rule.group())] == expected
    # one group per distinct port set per switch, all of them used
    used = {(r.switch, r.group()) for r in routes if r.group() is not None}
    assert used == set(groups)
    for sw in {s for s, _ in groups}:
        sets = [tuple(v) for (s, _), v in groups.items() if s == sw]
        assert len(sets) == len(set(sets))
    # and the walker explores exactly the fabric's equal-cost paths
    for src, dst in pairs(fabric):
        assert trace(fabric, rules, src, dst) == fabric_paths(fabric, src, dst)


def test_ecmp_spreads_over_spines_and_shortest_path_does_not():
    f = spine_leaf(spines=4, leaves=2, hosts_per_leaf=4)
    spines = {}
    for policy in ("ecmp", "shortest_path"):
        rules = compute(f, policy)
        spines[policy] = {
            path[2]
            for sport in (40000, 40001, 40002)
            for path in trace(f, rules, "h0", "h5", ip_proto=6, tcp_src=sport, tcp_dst=5201)
        }
    assert spines["ecmp"] == {"spine0", "spine1", "spine2", "spine3"}
    assert len(spines["shortest_path"]) == 1


def test_group_ids_are_deterministic():
    f = fat_tree(4)
    assert compute(f, "ecmp").groups == compute(f, "ecmp").groups
    assert {g.group_id for g in compute(f, "ecmp").groups} == {1}


# ----- tenant_paths --------------------------------------------------------
@pytest.mark.parametrize("fabric", FABRICS, ids=lambda f: f.kind)
def test_tenant_traffic_never_uses_another_tenants_spines(fabric):
    tenants = halves(fabric)
    rules = compute(fabric, "tenant_paths", params={"tenants": tenants})
    owned = assign_spines(fabric, {k: tuple(v) for k, v in tenants.items()})
    top = set(top_switches(fabric))
    assert set(owned["blue"]).isdisjoint(owned["red"])
    used = {name: set() for name in tenants}
    for name, hosts in tenants.items():
        for src in hosts:
            for dst in hosts:
                if src != dst:
                    for path in trace(fabric, rules, src, dst, **TCP):
                        used[name] |= set(path) & top
    for name in tenants:
        assert used[name] <= set(owned[name])
        assert used[name] == set(owned[name])  # and ECMP over all of its own
    # between tenants (and to the untenanted host): ordinary ECMP over every spine
    spare = fabric.hosts[-1].name
    cross = [(s, d) for s in tenants["blue"] for d in tenants["red"] + [spare]]
    ecmp = compute(fabric, "ecmp")
    for src, dst in cross:
        assert trace(fabric, rules, src, dst) == trace(fabric, ecmp, src, dst)
    assert {sw for s, d in cross for p in trace(fabric, rules, s, d) for sw in p} >= top


def test_fat_tree_tenants_are_confined_to_cores():
    f = fat_tree(4)
    tenants = {"a": ["h0", "h4"], "b": ["h8", "h12"]}
    spines = {"a": ["core0"], "b": ["core2", "core3"]}
    rules = compute(f, "tenant_paths", params={"tenants": tenants, "spines": spines})
    assert {p[3] for p in trace(f, rules, "h0", "h4")} == {"core0"}
    assert {p[3] for p in trace(f, rules, "h8", "h12")} == {"core2", "core3"}
    assert {p[3] for p in trace(f, rules, "h0", "h8")} == {f"core{i}" for i in range(4)}


def test_tenant_rules_match_source_and_destination_at_uplink_choosers_only():
    f = spine_leaf(spines=4, leaves=2, hosts_per_leaf=2)
    rules = compute(f, "tenant_paths", params={"tenants": {"a": ["h0", "h2"], "b": ["h1", "h3"]}})
    tenant_rules = [r for r in rules.rules if "ipv4_src" in r.match_dict()]
    assert {r.switch for r in tenant_rules} == {"leaf0", "leaf1"}
    assert {(r.match_dict()["ipv4_src"], r.match_dict()["ipv4_dst"]) for r in tenant_rules} == {
        ("10.0.0.1", "10.0.0.3"),
        ("10.0.0.3", "10.0.0.1"),
        ("10.0.0.2", "10.0.0.4"),
        ("10.0.0.4", "10.0.0.2"),
    }
    assert {p[2] for p in trace(f, rules, "h0", "h2")} == {"spine0", "spine1"}
    assert {p[2] for p in trace(f, rules, "h1", "h3")} == {"spine2", "spine3"}


def test_tenant_falls_back_to_ecmp_when_its_spines_are_cut_off():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    state = FabricState().with_link("leaf0", "spine0", up=False)
    params = {"tenants": {"a": ["h0", "h2"], "b": ["h1", "h3"]}}
    rules = compute(f, "tenant_paths", state, params)
    assert trace(f, rules, "h0", "h2") == [["h0", "leaf0", "spine1", "leaf1", "h2"]]


# ----- failures -------------------------------------------------------------
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("fabric", FABRICS, ids=lambda f: f.kind)
def test_a_down_link_is_in_no_rule_and_no_group(fabric, policy):
    spine = top_switches(fabric)[0]
    lower = next(lk.other(spine) for lk in fabric.links_of(spine))
    state = FabricState().with_link(lower, spine, up=False)
    rules = compute(fabric, policy, state, params_for(policy, fabric))
    dead = {(lower, fabric.port(lower, spine)), (spine, fabric.port(spine, lower))}
    for rule in rules.rules:
        assert not {(rule.switch, p) for p in rule.outputs()} & dead
    for group in rules.groups:
        assert not {(group.switch, p) for p in group.outputs()} & dead
        assert len(group.outputs()) > 1
    for src, dst in pairs(fabric):
        for path in trace(fabric, rules, src, dst, **TCP):
            assert not any({path[i], path[i + 1]} == {lower, spine} for i in range(len(path) - 1))
            if policy not in DETOURING:
                assert path in fabric_paths(fabric, src, dst, state.down_pairs())


def test_unreachable_destination_gets_no_rule():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    state = FabricState().with_link("h0", "leaf0", up=False)
    rules = compute(f, "ecmp", state)
    assert not [r for r in rules.rules if r.match_dict().get("ipv4_dst") == "10.0.0.1"]
    assert trace(f, rules, "h1", "h3")


def test_diff_sends_only_what_a_failure_changed():
    f = spine_leaf(spines=3, leaves=3, hosts_per_leaf=2)
    old = compute(f, "ecmp")
    new = compute(f, "ecmp", FabricState().with_link("leaf0", "spine0", up=False))
    changes = diff(old, new)
    assert set(changes) == {"leaf0", "leaf1", "leaf2", "spine0"}
    # leaf0's single uplink group shrinks in place: one GroupMod, no FlowMod
    assert [g.outputs() for g in changes["leaf0"].groups_modify] == [[4, 5]]
    assert not changes["leaf0"].rules_add and not changes["leaf0"].rules_delete
    # spine0 reaches leaf0's hosts only the long way now (a route nobody's shortest path uses)
    assert {r.match_dict()["ipv4_dst"] for r in changes["spine0"].rules_add} == {
        "10.0.0.1",
        "10.0.0.2",
    }
    assert all(r.outputs() != [f.port("spine0", "leaf0")] for r in changes["spine0"].rules_add)
    # other leaves now need a second group (spines 1-2) for leaf0's hosts
    assert len(changes["leaf1"].groups_add) == 1 and len(changes["leaf1"].rules_add) == 2
    assert _apply(old, changes) == _canonical(new)
    assert _apply(new, diff(new, old)) == _canonical(old)
    assert diff(old, compute(f, "ecmp")) == {}


def _canonical(rs):
    return ({r.key(): r for r in rs.rules}, {(g.switch, g.group_id): g for g in rs.groups})


def _apply(rs, changes):
    rules, groups = _canonical(rs)
    for ch in changes.values():
        for g in ch.groups_add + ch.groups_modify:
            groups[(g.switch, g.group_id)] = g
        for r in ch.rules_add:
            rules[r.key()] = r
        for r in ch.rules_delete:
            del rules[r.key()]
        for g in ch.groups_delete:
            del groups[(g.switch, g.group_id)]
    return rules, groups


def test_rules_survive_json():
    f = rail_optimized(2, 2, 2)
    params = {
        "tenants": {"a": ["gpu0_0", "gpu1_0"]},
        "qos": {"classes": [{"name": "be", "dscp": 0, "rate_share": 0.5}]},
    }
    rules = compute(f, "adaptive", params=params)
    placed = place_flow(f, FabricState(), "10.0.0.1", "10.0.0.4", 17, 1, 2, {}, 3)
    rules.rules += placed
    back = RuleSet.from_dict(json.loads(json.dumps(rules.to_dict())))
    assert back == rules


# ----- adaptive ---------------------------------------------------------------
def test_adaptive_copies_new_flows_to_the_controller_and_still_forwards_them():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    rules = compute(f, "adaptive")
    for d in deliveries(f, rules, "h0", "h3", **TCP):
        assert d.to_controller == ["leaf0"]
    udp = deliveries(f, rules, "h0", "h3", ip_proto=17, udp_src=1, udp_dst=2)
    assert len(udp) == 2 and all(d.to_controller == ["leaf0"] for d in udp)
    assert all(not d.to_controller for d in deliveries(f, rules, "h0", "h3", ip_proto=1))
    pin = [r for r in rules.rules if (CONTROLLER in r.outputs())]
    assert {r.switch for r in pin} == {"leaf0", "leaf1"} and len(pin) == 8


def test_place_flow_avoids_the_loaded_spine():
    f = spine_leaf(spines=4, leaves=2, hosts_per_leaf=2)
    uplink = {s: f.port("leaf0", f"spine{s}") for s in range(4)}
    args = ("10.0.0.1", "10.0.0.3", 6, 40000, 5201)
    loads = {("leaf0", uplink[s]): 9e8 for s in (0, 1, 3)}
    loads[("spine2", f.port("spine2", "leaf1"))] = 1e6
    placed = place_flow(f, FabricState(), *args, loads, idle_timeout_s=7)
    assert [r.switch for r in placed] == ["leaf1", "spine2", "leaf0"]  # egress first
    assert all(r.idle_timeout == 7 and r.table == TABLE_PLACE for r in placed)
    assert placed[-1].outputs() == [uplink[2]]
    assert placed[0].match_dict() == {
        "eth_type": 0x0800,
        "ip_proto": 6,
        "ipv4_src": "10.0.0.1",
        "ipv4_dst": "10.0.0.3",
        "tcp_src": 40000,
        "tcp_dst": 5201,
    }
    rules = compute(f, "adaptive")
    rules.rules += placed
    [d] = deliveries(f, rules, "h0", "h2", ip_proto=6, tcp_src=40000, tcp_dst=5201)
    assert d.path == ["h0", "leaf0", "spine2", "leaf1", "h2"] and not d.to_controller
    # the bottleneck counts, wherever on the path it is: spine1's downlink is
    # saturated, the other spines' uplinks only half loaded
    loads = {("spine1", f.port("spine1", "leaf1")): 9e8}
    loads.update({("leaf0", uplink[s]): 5e8 for s in (0, 2, 3)})
    assert place_flow(f, FabricState(), *args, loads)[1].switch != "spine1"
    loads[("leaf0", uplink[3])] = 9.5e8
    assert place_flow(f, FabricState(), *args, loads)[1].switch in ("spine0", "spine2")


def test_place_flow_ties_are_deterministic_and_spread():
    f = spine_leaf(spines=4, leaves=2, hosts_per_leaf=2)
    spines = [
        place_flow(f, FabricState(), "10.0.0.1", "10.0.0.3", 6, p, 80, {})[1].switch
        for p in range(40000, 40032)
    ]
    assert spines == [
        place_flow(f, FabricState(), "10.0.0.1", "10.0.0.3", 6, p, 80, {})[1].switch
        for p in range(40000, 40032)
    ]
    assert len(set(spines)) >= 3


def test_place_flow_ties_follow_the_run_seed():
    f = spine_leaf(spines=4, leaves=2, hosts_per_leaf=2)

    def spines(seed: int) -> list[str]:
        return [
            place_flow(f, FabricState(), "10.0.0.1", "10.0.0.3", 6, p, 80, {}, seed=seed)[1].switch
            for p in range(40000, 40016)
        ]

    assert spines(1) == spines(1) and spines(1) != spines(2)


def test_place_flow_respects_down_links_and_stale_placements_are_found():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    placed = place_flow(f, FabricState(), "10.0.0.1", "10.0.0.3", 17, 5, 6, {})
    via = placed[1].switch
    state = FabricState().with_link("leaf0", via, up=False)
    other = place_flow(f, state, "10.0.0.1", "10.0.0.3", 17, 5, 6, {})
    assert other[1].switch != via
    also = place_flow(f, FabricState(), "10.0.0.2", "10.0.0.4", 6, 1, 2, {})
    stale = stale_placements(f, state, placed + also)
    assert stale == placed + (also if also[1].switch == via else [])
    assert stale_placements(f, state, other) == []
    cut = FabricState().with_link("h2", "leaf1", up=False)
    assert place_flow(f, cut, "10.0.0.1", "10.0.0.3", 6, 1, 2, {}) == []


# ----- bad parameters ---------------------------------------------------------
A, AB, ABC = {"a": ["h0"]}, {"a": ["h0"], "b": ["h1"]}, {"a": ["h0"], "b": ["h1"], "c": ["h2"]}
GOLD = {"name": "gold", "dscp": 46}


def tp(tenants, spines=None):
    return {"tenants": tenants} | ({"spines": spines} if spines is not None else {})


BAD = [
    ("ecmp", {"spines": {}}, "policy ecmp: unknown parameter 'spines': allowed tenants, qos"),
    ("tenant_paths", {}, "tenant_paths needs params\\['tenants'\\]"),
    ("tenant_paths", tp({"a": ["h0", "h99"]}), "tenant 'a' names host 'h99', which does not exist"),
    ("tenant_paths", tp({"a": ["leaf0"]}), "names host 'leaf0', which is a switch"),
    ("tenant_paths", tp({"a": ["h0"], "b": ["h1", "h0"]}), "host 'h0' is in two tenants: 'a', 'b'"),
    ("tenant_paths", tp(A, {"a": ["spine7"]}), "names spine 'spine7', which is not a top-tier"),
    ("tenant_paths", tp(A, {"a": ["leaf0"]}), "names spine 'leaf0'"),
    ("tenant_paths", tp(AB, {"a": ["spine0"]}), "tenant 'b' has no spines"),
    ("tenant_paths", tp(A, {"z": ["spine0"]}), "names tenant 'z'"),
    ("tenant_paths", tp(ABC), "3 tenants but only 2 spines"),
    ("adaptive", {"idle_timeout_s": 0}, "idle_timeout_s=0 is not allowed"),
    ("ecmp", {"qos": {"classes": [GOLD]}}, "class 'gold' has neither a rate_share nor a priority"),
    ("ecmp", {"qos": {"classes": [], "bogus": 1}}, "qos: unknown parameter 'bogus'"),
]


@pytest.mark.parametrize(("policy", "params", "message"), BAD)
def test_bad_params_are_named(policy, params, message):
    with pytest.raises(PolicyError, match=message):
        compute(spine_leaf(2, 2, 2), policy, params=params)


def test_bad_flows_are_named():
    f = spine_leaf(2, 2, 2)
    with pytest.raises(PolicyError, match="ip_proto=1 is not allowed"):
        place_flow(f, FabricState(), "10.0.0.1", "10.0.0.3", 1, 0, 0, {})
    with pytest.raises(PolicyError, match="no host has address 10.9.9.9"):
        place_flow(f, FabricState(), "10.0.0.1", "10.9.9.9", 6, 1, 2, {})


@pytest.mark.skipif(shutil.which("ovs-ofctl") is None, reason="needs ovs-ofctl")
@pytest.mark.parametrize("policy", list(POLICIES))
def test_ofctl_accepts_every_rule(tmp_path, policy):
    f = spine_leaf(2, 3, 2) if policy in ("valiant", "ugal") else spine_leaf(2, 2, 2)
    params = dict(params_for(policy, f))
    params["tenants"] = halves(f)
    params["qos"] = {"classes": [{"name": "be", "dscp": 0, "rate_share": 0.9}]}
    rules = compute(f, policy, params=params)
    rules.rules += place_flow(f, FabricState(), "10.0.0.1", "10.0.0.3", 6, 1, 2, {})
    flows = tmp_path / "flows"
    flows.write_text("".join(ofctl_flow(r) + "\n" for r in rules.rules))
    proc = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "parse-flows", str(flows)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("OFPT_FLOW_MOD") == len(rules.rules)
    assert "goto_table:2" in proc.stdout
    # ovs-ofctl has no offline group parser; the format is the foundation's
    assert all(
        ofctl_group(g).startswith(f"group_id={g.group_id},type=select,bucket=output:")
        for g in rules.groups
    )


def test_routes_are_in_the_routing_table():
    f = spine_leaf(2, 2, 2)
    rules = compute(f, "shortest_path")
    routes = [r for r in rules.rules if "ipv4_dst" in r.match_dict()]
    assert {(r.table, r.priority) for r in routes} == {(TABLE_ROUTE, PRIORITY_ROUTE)}


def test_the_adaptive_rules_idle_timeout_lasts_d_times_longer_on_the_wall_clock():
    from controller.adaptive import DEFAULT_IDLE_TIMEOUT_S, wall_params

    assert wall_params("adaptive", {}, 4) == {"idle_timeout_s": 4 * DEFAULT_IDLE_TIMEOUT_S}
    assert wall_params("adaptive", {"idle_timeout_s": 3}, 2.5) == {"idle_timeout_s": 8}  # up
    assert wall_params("adaptive", {"idle_timeout_s": 60_000}, 2) == {"idle_timeout_s": 65535}
    assert wall_params("adaptive", {"idle_timeout_s": 3}, 1) == {"idle_timeout_s": 3}
    assert wall_params("ecmp", {}, 4) == {}  # no idle timeouts to stretch

"""The fluid route estimate of low-diameter routing (``experiments.analysis.route_estimate``):
max-min shares and FCTs by hand, the textbook's group-to-group shares, and the bundled
dragonfly-adversarial estimate in the order the handout states."""

from __future__ import annotations

import pytest

from experiments.analysis.estimates import estimate
from experiments.analysis.route_estimate import (
    fluid_fcts,
    max_min_rates,
    policy_routes,
    route_estimate,
    textbook,
)
from experiments.spec.load import expand, find_bundled, load_spec
from topologies import make_fabric

# two flows share link x (10 Gbit/s); the first also crosses y (2.5 Gbit/s)
USAGE = [{("a", "x"): 1.0, ("x", "y"): 1.0}, {("a", "x"): 1.0}]
CAPACITY = {("a", "x"): 10.0, ("x", "y"): 2.5}


def group_to_group(fabric) -> list[tuple[str, str]]:
    groups = len({sw.pod for sw in fabric.switches})
    per = len(fabric.hosts) // groups
    return [
        (f"h{per * g + i}", f"h{per * ((g + 1) % groups) + i}")
        for g in range(groups)
        for i in range(per)
    ]


def test_max_min_gives_the_unconstrained_flow_what_the_other_cannot_use():
    assert max_min_rates(USAGE, CAPACITY, [0, 1]) == pytest.approx({0: 2.5, 1: 7.5})
    assert max_min_rates(USAGE, CAPACITY, [1]) == pytest.approx({1: 10.0})


def test_a_flow_speeds_up_when_the_one_it_shared_with_ends():
    # the second moves 10 Gbit at 7.5 (1.33 s); the first at 2.5 throughout (4 s)
    assert fluid_fcts(USAGE, CAPACITY, 10.0) == pytest.approx([4.0, 10 / 7.5])
    # two equal flows on one link: each half of it until both end together
    same = [{("a", "x"): 1.0}, {("a", "x"): 1.0}]
    assert fluid_fcts(same, {("a", "x"): 10.0}, 10.0) == pytest.approx([2.0, 2.0])


@pytest.mark.parametrize(
    ("params", "minimal", "valiant"),
    [
        (dict(p=1, a=3, h=2), 1 / 3, 1.0),  # one global link, a·h = 6 ≥ 2·a·p
        (dict(p=2, a=4, h=2), 1 / 8, 0.5),  # balanced a = 2p = 2h: the textbook's 1/2
        (dict(p=1, a=4, h=2, groups=5), 2 / 4, 1.0),  # two links between two groups
        (dict(p=1, a=2, h=1, global_gbps=50.0), 0.25, 0.25),
    ],
)
def test_textbook_shares(params, minimal, valiant):
    book = textbook(make_fabric("dragonfly", **params))
    assert book == pytest.approx({"minimal": minimal, "valiant": valiant})


def test_no_textbook_for_a_hyperx():
    assert textbook(make_fabric("hyperx", shape=[3, 3])) is None


def test_minimal_group_to_group_shares_the_one_global_link():
    """Three hosts per group on one global link: a third each, three times as slow,
    and the busiest links are the global links from group i to group i + 1."""
    f = make_fabric("dragonfly", p=1, a=3, h=2)
    est = route_estimate(f, group_to_group(f), 2.0, "minimal", seed=1)
    m = est["by_policy"]["minimal"]
    assert m["injection_share"] == pytest.approx({"mean": 1 / 3, "min": 1 / 3, "max": 1 / 3})
    assert m["fct_slowdown"]["max"] == pytest.approx(3.0)
    assert m["most_flows_on_a_link"] == 3
    assert all(
        f.node(a).pod != f.node(b).pod for a, b in (link.split("→") for link in m["busiest_links"])
    )
    assert m["switch_hops"]["max"] == 3


def test_link_balance_is_max_over_mean_as_the_draft_defines_mmr():
    """Minimal group-to-group: 7 of the 42 directed global links carry 3 flows each,
    the rest none: MMR = 3 ÷ (21 / 42) = 6, while max ÷ min is unbounded (None)."""
    f = make_fabric("dragonfly", p=1, a=3, h=2)
    m = route_estimate(f, group_to_group(f), 2.0, "minimal", seed=1)["by_policy"]
    assert m["minimal"]["link_mmr"] == pytest.approx(6.0)
    assert m["minimal"]["link_max_min_ratio"] is None
    assert m["valiant_spread"]["link_mmr"] < m["valiant"]["link_mmr"] < 6.0


def test_valiant_routes_go_through_a_third_group_and_follow_the_seed():
    f = make_fabric("dragonfly", p=1, a=3, h=2)
    pairs = group_to_group(f)
    one = policy_routes(f, "valiant", pairs, seed=1)
    for flow in one:
        (path,) = flow["routes"]
        groups = {f.node(n).pod for n in path[1:-1]}
        assert len(groups) == 3  # source's, an intermediate, destination's
    assert one == policy_routes(f, "valiant", pairs, seed=1)
    assert one != policy_routes(f, "valiant", pairs, seed=2)


def test_the_bundled_experiment_s_estimate_orders_the_policies():
    """dragonfly-adversarial: minimal a third of injection; Valiant's seeded routes
    better but short of the many-flows limit (collisions of 21 single draws); UGAL on
    counters that saw an idle fabric routes as minimal does."""
    run = expand(load_spec(find_bundled("dragonfly-adversarial")))[0]
    est = estimate(run.config, run.fabric())["routes"]
    by = {k: v["injection_share"]["mean"] for k, v in est["by_policy"].items()}
    assert est["flows"] == 21
    assert by["minimal"] == pytest.approx(1 / 3)
    assert by["minimal"] < by["valiant"] < by["valiant_spread"] < 1.0
    assert by["ugal_same_counters"] == by["minimal"]
    assert by["ugal_fresh"] == max(by["minimal"], by["valiant"])
    assert est["textbook_injection_share"] == pytest.approx({"minimal": 1 / 3, "valiant": 1.0})


def test_no_route_estimate_for_other_policies():
    run = expand(load_spec(find_bundled("ecmp-collisions")))[0]
    assert "routes" not in estimate(run.config, run.fabric())

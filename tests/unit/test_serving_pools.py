"""Serving pools by GPU: prefill and decode on GPUs of the same servers, KV between them
over the server's NVLink, the topology_aware router's tier budget as a spec key, and the
pool layouts that are refused (with the key named)."""

from __future__ import annotations

import copy

import pytest
import yaml

from controller.policy import compute
from controller.walk import trace
from experiments.analysis.estimates import estimate
from experiments.spec.load import SpecError, expand, find_bundled, load_spec
from experiments.spec.typed import resolved_of
from topologies import rail_optimized
from traffic.serving import (
    RouterState,
    ServingError,
    TierMap,
    TopologyAware,
    build_serving,
    fabric_rate,
    make_instances,
    simulate,
)
from traffic.serving.instances import check_disjoint, tp_fits
from traffic.workloads import shard_overlap

# Prefill on GPUs 0-1 of server 0, decode on GPUs 2-3 of servers 0 and 1: each prefill GPU
# reaches two decode GPUs over its server's NVLink (tier 0) and two across the spine.
SHARED = {
    "name": "gpu-pools",
    "duration_s": 10,
    "fabric": {"kind": "rail_optimized", "servers": 4, "gpus_per_server": 4},
    "workloads": [
        {
            "kind": "serving",
            "model": "llama-3-8b",
            "prefill": {"servers": [0], "gpus": [0, 1], "tp": 1},
            "decode": {"servers": [0, 1], "gpus": [2, 3], "tp": 1},
            "router": "topology_aware",
            "transfer": "monolithic",
            "arrivals": {
                "synthetic": {"n": 24, "rate_per_s": 40, "input_tokens": 4000, "output_tokens": 4}
            },
        }
    ],
}


def _spec(**changes) -> dict:
    spec = copy.deepcopy(SHARED)
    spec["workloads"][0].update(changes)
    return spec


def _resolved(spec: dict) -> tuple[object, object]:
    """The spec's serving workload, typed (``ServingWorkload``), and its fabric."""
    loaded = load_spec(yaml.safe_dump(spec, sort_keys=False))
    return loaded.config.workloads[0], loaded.fabric()


def _simulate(spec: dict):
    workload, fabric = _resolved(spec)
    driver = build_serving(workload, fabric, 1)
    result = simulate(driver, fabric_rate(fabric), t0_ns=10**12)
    assert result.finished
    return driver, fabric


@pytest.fixture(scope="module")
def fabric():
    return rail_optimized(servers=4, gpus_per_server=4)


# ---- pools by GPU ------------------------------------------------------------------------


def test_pools_take_the_named_gpus_of_each_server(fabric):
    prefill = make_instances(fabric, "prefill", [0, 1], 1, 8, gpus=[0, 1])
    decode = make_instances(fabric, "decode", [0, 1], 2, 8, gpus=[3, 2])
    assert [i.hosts for i in prefill] == [("gpu0_0",), ("gpu0_1",), ("gpu1_0",), ("gpu1_1",)]
    # GPU order whatever order the list is in; each instance within one server
    assert [i.hosts for i in decode] == [("gpu0_2", "gpu0_3"), ("gpu1_2", "gpu1_3")]
    assert [i.server for i in decode] == [0, 1]
    check_disjoint(prefill, decode)  # same servers, no GPU in both: allowed
    # a tp of two servers' shares spans them, homed on the first
    (wide,) = make_instances(fabric, "prefill", [0, 1], 4, 8, gpus=[0, 1])
    assert wide.hosts == ("gpu0_0", "gpu0_1", "gpu1_0", "gpu1_1") and wide.server == 0


def test_kv_between_pools_on_one_server_is_the_nvlink_tier(fabric):
    tiers = TierMap(fabric)
    (p,) = make_instances(fabric, "prefill", [0], 2, 8, gpus=[0, 1])
    near, far = make_instances(fabric, "decode", [0, 1], 2, 8, gpus=[2, 3])
    ov = shard_overlap(8, 2, 2)
    assert tiers.instance_tier(p, near, ov) == 0
    assert tiers.instance_gbps(p, near, ov) == 3600.0  # the NVLink rate, not the rail's
    assert tiers.instance_tier(p, far, ov) == 2  # gpu0_0 → gpu1_2: rail0, spine, rail2


def test_every_policy_forwards_same_server_kv_over_nvlink_only(fabric):
    for policy in ("shortest_path", "ecmp", "adaptive"):
        rules = compute(fabric, policy)
        assert trace(fabric, rules, "gpu0_0", "gpu0_2") == [["gpu0_0", "nvl0", "gpu0_2"]]
        assert trace(fabric, rules, "gpu0_2", "gpu0_0") == [["gpu0_2", "nvl0", "gpu0_0"]]


@pytest.mark.parametrize(
    ("servers", "gpus", "tp", "match"),
    [
        ([0, 1], [0, 4], 1, r"prefill.gpus names GPUs \[4\] that server 0 lacks; .*0\.\.3"),
        ([0], [1, 1], 1, "prefill.gpus must list distinct"),
        ([0], [], 1, "prefill.gpus must list distinct"),
        ([0, 1], [0, 1, 2], 2, "prefill.tp=2 .* straddle two servers"),
        ([0], [0, 1], 4, "prefill.tp=4 .* straddle two servers"),
    ],
)
def test_bad_pools_are_refused_naming_the_key(fabric, servers, gpus, tp, match):
    with pytest.raises(ServingError, match=match):
        make_instances(fabric, "prefill", servers, tp, 8, gpus=gpus)


def test_a_gpu_in_both_pools_is_refused(fabric):
    prefill = make_instances(fabric, "prefill", [0], 1, 8, gpus=[0, 1])
    decode = make_instances(fabric, "decode", [0], 1, 8, gpus=[1, 2])
    with pytest.raises(ServingError, match=r"decode.gpus: GPUs \['gpu0_1'\] .*overlap"):
        check_disjoint(prefill, decode)


# ---- the spec: gpus and topology_budget_ms ------------------------------------------------


def test_spec_fills_gpus_and_tp_and_the_budget():
    w, _ = _resolved(SHARED)
    assert resolved_of(w.prefill) == {"servers": [0], "gpus": [0, 1], "tp": 1}
    assert w.topology_budget_ms == 50.0
    w, _ = _resolved(_spec(prefill={"servers": [0], "gpus": [0, 1]}))
    assert w.prefill.tp == 2  # default tp: the pool's GPUs of one server
    w, _ = _resolved(_spec(decode={"servers": [2, 3]}))
    assert resolved_of(w.decode) == {"servers": [2, 3], "gpus": [0, 1, 2, 3], "tp": 4}


@pytest.mark.parametrize(
    ("changes", "fragments"),
    [
        (
            {"decode": {"servers": [0, 1], "gpus": [2, 4], "tp": 1}},
            ["workloads.0.decode.gpus.1:", "4", "GPU index of server 0: 0..3"],
        ),
        (
            {"decode": {"servers": [0, 1], "gpus": [1, 2], "tp": 1}},
            ["workloads.0.decode.gpus:", "[1]", "both pools", "[0, 1] of server 0"],
        ),
        (
            {"decode": {"servers": [0, 1], "tp": 1}},  # every GPU of server 0: both pools
            ["workloads.0.decode.gpus:", "[0, 1]", "both pools"],
        ),
        (
            {"prefill": {"servers": [2, 3], "gpus": [0, 1, 2], "tp": 2}},
            ["workloads.0.prefill.tp:", "2", "straddle", "[3, 3]", "servers: 1"],
        ),
        (
            {"decode": {"servers": [1], "gpus": [2, 3], "tp": 4}},
            ["workloads.0.decode.tp:", "4", "straddle", "servers: 1, 2"],
        ),
        ({"topology_budget_ms": 0}, ["workloads.0.topology_budget_ms:", "> 0"]),
    ],
)
def test_bad_pools_in_a_spec_name_the_key(changes, fragments):
    with pytest.raises(SpecError) as info:
        _resolved(_spec(**changes))
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {info.value}"


def test_whole_servers_in_both_pools_are_refused_at_decode_servers():
    spec = _spec(prefill={"servers": [0, 1], "tp": 4}, decode={"servers": [1, 2], "tp": 4})
    with pytest.raises(SpecError, match=r"decode\.servers: \[1\] .*overlap"):
        _resolved(spec)


# ---- the topology_aware router with an NVLink tier ----------------------------------------


def test_router_skips_a_tier_the_prefill_instance_lacks():
    # decode 0 and 1 over NVLink, 2 across the spine: no rail tier for this instance
    state = RouterState(
        request_blocks=1,
        prefill_load=(0,),
        decode_load=(0, 0, 0),
        tiers=((0, 0, 2),),
        inflight_kv_bytes=((400, 200, 0),),
        tier_budget_bytes=(500.0, 1.0, 100.0),
    )
    assert TopologyAware().choose(state) == (0, 2)  # NVLink holds 600 > 500 in flight
    roomy = RouterState(**{**state.__dict__, "tier_budget_bytes": (600.0, 1.0, 100.0)})
    assert TopologyAware().choose(roomy) == (0, 0)


def _same_server(req) -> list[bool]:
    return [
        p[: p.index("_")] == d[: d.index("_")]
        for p, d in zip(req["prefill_host"], req["decode_host"], strict=True)
    ]


def test_a_roomy_budget_keeps_every_kv_transfer_on_nvlink():
    driver, fabric = _simulate(_spec(topology_budget_ms=10_000))
    req = driver.requests_table()
    assert req["served"].all() and all(_same_server(req))
    assert driver.tier_budget[0] == pytest.approx(3600e9 / 8 * 10.0)  # bytes in 10 s
    assert {d.inst.server for d in driver.decode} == {0, 1}  # server 1 was in reach


def test_a_tight_budget_spills_kv_to_the_spine_where_it_is_slower():
    driver, _ = _simulate(_spec(topology_budget_ms=0.001))
    req = driver.requests_table().assign(local=lambda r: _same_server(r))
    assert req["served"].all()
    assert req["local"].any() and not req["local"].all()  # some spilled across the spine
    kv = req.groupby("local")["kv_transfer_ms"].median()
    # 3600 vs 400 Gbit/s bottleneck in the fluid model: 9× less time over NVLink
    assert kv[False] / kv[True] == pytest.approx(9.0, rel=0.05)


def test_least_loaded_ignores_the_nvlink_tier():
    driver, _ = _simulate(_spec(router="least_loaded"))
    req = driver.requests_table()
    local = _same_server(req)
    assert req["served"].all() and any(local) and not all(local)


# ---- a pool with its own GPUs per server: all three tiers in reach -------------------------


@pytest.mark.parametrize(
    ("shares", "tp", "fits"),
    [
        ([4, 4], 2, True),
        ([2, 4], 2, True),
        ([2, 2], 4, True),
        ([2, 4], 4, False),
        ([3, 3], 2, False),
        ([4], 8, False),
        ([1, 3], 2, False),
    ],
)
def test_tp_fits_within_a_server_or_whole_shares(shares, tp, fits):
    assert tp_fits(shares, tp) is fits


def test_a_mapping_gives_each_server_its_own_gpus(fabric):
    gpus = {0: [2, 3], 1: [3, 2], 2: [0, 1, 2, 3]}
    decode = make_instances(fabric, "decode", [0, 1, 2], 2, 8, gpus=gpus)
    assert [i.hosts for i in decode] == [
        ("gpu0_2", "gpu0_3"),
        ("gpu1_2", "gpu1_3"),
        ("gpu2_0", "gpu2_1"),
        ("gpu2_2", "gpu2_3"),
    ]
    with pytest.raises(ServingError, match=r"decode.gpus maps servers \[0, 1\]; .*\[0, 1, 2\]"):
        make_instances(fabric, "decode", [0, 1, 2], 1, 8, gpus={0: [2], 1: [2]})
    with pytest.raises(ServingError, match=r"decode.gpus.2 names GPUs \[4\] that server 2"):
        make_instances(fabric, "decode", [2], 1, 8, gpus={2: [4]})


THREE_TIERS = _spec(
    prefill={"servers": [0, 1], "gpus": [0, 1], "tp": 1},
    decode={"servers": [0, 1, 2], "gpus": {0: [2, 3], 1: [2, 3], 2: [0, 1, 2, 3]}, "tp": 1},
)
THREE_TIERS["fabric"] |= {"rail_gbps": 400, "spine_gbps": 200, "nvlink_gbps": 3600}


def test_a_mapping_in_the_spec_and_its_refusals():
    w, _ = _resolved(THREE_TIERS)
    assert resolved_of(w.decode.gpus) == {0: [2, 3], 1: [2, 3], 2: [0, 1, 2, 3]}
    wrong_keys = _spec(decode={"servers": [0, 1], "gpus": {0: [2, 3]}, "tp": 1})
    with pytest.raises(SpecError, match=r"decode.gpus: .*exactly the pool's servers \[0, 1\]"):
        _resolved(wrong_keys)
    lacking = _spec(decode={"servers": [2], "gpus": {2: [0, 7]}, "tp": 1})
    with pytest.raises(SpecError, match=r"decode.gpus.2.1: 7 .*server 2: 0..3"):
        _resolved(lacking)
    both = _spec(
        prefill={"servers": [0, 1], "gpus": [0, 1]},
        decode={"servers": [1, 2], "gpus": {1: [1, 2], 2: [0]}, "tp": 1},
    )
    with pytest.raises(SpecError, match=r"decode.gpus: \[1\] .*both pools.* on server 1"):
        _resolved(both)


def test_with_three_tiers_in_reach_kv_time_follows_the_tier():
    driver, fabric = _simulate(_spec_with(THREE_TIERS, topology_budget_ms=0.001))
    assert set(driver.tiers[0]) == {0, 1, 2}  # gpu0_0: NVLink, rail0 (gpu2_0), spine
    req = driver.requests_table()
    assert req["served"].all()
    tiers = TierMap(fabric)
    tier = [
        tiers.host_tier(p, d) for p, d in zip(req["prefill_host"], req["decode_host"], strict=True)
    ]
    kv = req.assign(tier=tier).groupby("tier")["kv_transfer_ms"].median()
    assert list(kv.index) == [0, 1, 2]  # every tier was used once the faster ones filled
    # 3600 : 400 : 200 Gbit/s in the fluid model: the rail 9×, the spine 18× NVLink's time
    assert kv[1] / kv[0] == pytest.approx(9.0, rel=0.05)
    assert kv[2] / kv[0] == pytest.approx(18.0, rel=0.05)


def _spec_with(spec: dict, **changes) -> dict:
    out = copy.deepcopy(spec)
    out["workloads"][0].update(changes)
    return out


# ---- the bundled nvlink-placement experiment ----------------------------------------------


def test_nvlink_placement_estimate_has_three_tiers_and_the_claimed_ratios():
    runs = {r.label: r for r in expand(load_spec(find_bundled("nvlink-placement")))}
    est = {label: estimate(r.config, r.fabric())["serving"] for label, r in runs.items()}
    blind, aware = est["router=least_loaded,seed=1"], est["router=topology_aware,seed=1"]
    assert blind["tiers"]["pairs_by_tier"] == {"0": 8, "1": 8, "2": 32}
    assert blind["tiers"]["rail_over_nvlink_transfer_ratio"] == pytest.approx(9.0)
    assert blind["tiers"]["spine_over_nvlink_transfer_ratio"] == pytest.approx(18.0)
    assert blind["served"] == aware["served"] == 60
    # NVLink-first: every transfer at NVLink speed; blind: most of the tail on the spine
    assert aware["kv_transfer_ms"]["p99"] < 2.0 < blind["kv_transfer_ms"]["p50"]
    assert blind["kv_transfer_ms"]["p99"] > 10 * aware["kv_transfer_ms"]["p99"]


# ---- blind routers are blind -------------------------------------------------------------

LIGHT = 400  # requests, one every 2 s: every instance is idle when the next arrives


def _light(router: str, seed: int) -> list[bool]:
    """Per request of a light-load run: did its KV stay on its server (NVLink)?"""
    spec = _spec(
        router=router,
        arrivals={
            "synthetic": {
                "n": LIGHT,
                "rate_per_s": 0.5,
                "input_tokens": 1000,
                "output_tokens": 2,
            }
        },
    )
    spec["duration_s"] = 2 * LIGHT + 10
    workload, fabric = _resolved(spec)
    driver = build_serving(workload, fabric, seed)
    assert simulate(driver, fabric_rate(fabric), t0_ns=10**12).finished
    req = driver.requests_table()
    assert req["served"].all() and len(req) == LIGHT
    return _same_server(req)


@pytest.mark.parametrize("router", ["least_loaded", "round_robin", "kv_affinity"])
def test_a_blind_router_picks_nvlink_peers_as_often_as_they_are_among_its_candidates(router):
    # two of the four decode GPUs share each prefill GPU's server: NVLink share 1/2. A blind
    # router's share of NVLink-local transfers lies within the binomial 95 % interval of
    # 1/2 (an index tie-break put every transfer on server 0's NVLink)
    local = sum(_light(router, seed=7))
    half_width = 1.96 * (LIGHT * 0.5 * 0.5) ** 0.5
    assert abs(local - LIGHT / 2) <= half_width, (local, LIGHT)


def test_a_blind_router_s_placements_repeat_with_the_seed():
    assert _light("least_loaded", seed=3) == _light("least_loaded", seed=3)
    assert _light("least_loaded", seed=3) != _light("least_loaded", seed=4)

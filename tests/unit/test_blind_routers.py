"""Blind routers are blind: on a symmetric fabric, where ``least_loaded`` and
``round_robin`` place prefill → decode pairs does not depend on the topology.

The router alone, fed what it sees at light load (every instance idle), over many seeds:
the share of NVLink-local pairs it picks equals the NVLink share of its candidate pairs
within a binomial 95 % interval, and its picks do not change when the tiers it is shown
do. ``topology_aware`` is the control: it must land outside that interval, so the test
can tell a blind router from one that looks.
"""

from __future__ import annotations

import math

import pytest

from topologies import rail_optimized
from traffic.serving import RouterState, TierMap, make_instances
from traffic.serving.routers import make_router, router_rng
from traffic.workloads import shard_overlap

SEEDS = 300
REQUESTS_PER_SEED = 6  # one round robin deck of the prefill pool (6 instances)
KV_HEADS = 8


@pytest.fixture(scope="module")
def tiers() -> tuple[tuple[int, ...], ...]:
    """[prefill][decode] tiers: prefill on GPUs 0-1 and decode on GPUs 2-3 of servers
    0-2, so each prefill instance has 2 NVLink decode peers (its server) of 6."""
    fabric = rail_optimized(servers=3, gpus_per_server=4)
    prefill = make_instances(fabric, "prefill", [0, 1, 2], 1, KV_HEADS, gpus=[0, 1])
    decode = make_instances(fabric, "decode", [0, 1, 2], 1, KV_HEADS, gpus=[2, 3])
    overlap = shard_overlap(KV_HEADS, 1, 1)
    tier_map = TierMap(fabric)
    return tuple(tuple(tier_map.instance_tier(p, d, overlap) for d in decode) for p in prefill)


def _idle(tiers: tuple[tuple[int, ...], ...]) -> RouterState:
    return RouterState(
        request_blocks=2,
        prefill_load=(0,) * len(tiers),
        decode_load=(0,) * len(tiers[0]),
        tiers=tiers,
        inflight_kv_bytes=tuple((0,) * len(row) for row in tiers),
    )


def _picks(router: str, seed: int, tiers: tuple[tuple[int, ...], ...]) -> list[tuple[int, int]]:
    chooser = make_router(router, rng=router_rng(seed))
    return [chooser.choose(_idle(tiers)) for _ in range(REQUESTS_PER_SEED)]


def _nvlink_share_and_interval(
    router: str, tiers: tuple[tuple[int, ...], ...]
) -> tuple[int, float, float]:
    """NVLink-local picks over all seeds, the count expected from the candidates' NVLink
    share, and the binomial 95 % half-width around it."""
    picks = [pair for seed in range(SEEDS) for pair in _picks(router, seed, tiers)]
    local = sum(tiers[p][d] == 0 for p, d in picks)
    candidates = [t for row in tiers for t in row]
    share = candidates.count(0) / len(candidates)
    n = len(picks)
    return local, n * share, 1.96 * math.sqrt(n * share * (1 - share))


def test_the_fabric_is_symmetric_with_a_third_of_candidates_on_nvlink(tiers):
    assert all(sorted(row) == [0, 0, 2, 2, 2, 2] for row in tiers)


@pytest.mark.parametrize("router", ["least_loaded", "round_robin"])
def test_a_blind_router_s_nvlink_share_is_its_candidates_share(router, tiers):
    local, expected, half_width = _nvlink_share_and_interval(router, tiers)
    # an index tie-break would have put every pair on server 0's NVLink: 1800 of 1800
    assert abs(local - expected) <= half_width, (local, expected, half_width)


def test_topology_aware_is_outside_the_blind_interval(tiers):
    local, expected, half_width = _nvlink_share_and_interval("topology_aware", tiers)
    assert local == SEEDS * REQUESTS_PER_SEED  # every pair NVLink-local at light load
    assert local - expected > half_width


@pytest.mark.parametrize("router", ["least_loaded", "round_robin"])
def test_a_blind_router_s_picks_do_not_change_with_the_tiers_it_is_shown(router, tiers):
    # the same loads and seed, the NVLink peers moved to other decode instances
    moved = tuple(tuple(2 - t for t in row) for row in tiers)
    for seed in range(20):
        assert _picks(router, seed, tiers) == _picks(router, seed, moved)
    assert _picks("topology_aware", 0, tiers) != _picks("topology_aware", 0, moved)

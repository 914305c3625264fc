"""Serving parts on their own: compute numbers, routers on hand-built states, the cache pool,
instances and tiers on a small rail-optimized fabric."""

import random

import pytest

from topologies import rail_optimized
from traffic import compute
from traffic.serving import (
    KvAffinity,
    LeastLoaded,
    PrefixCachePool,
    RoundRobin,
    RouterState,
    ServingError,
    TierMap,
    TopologyAware,
    make_instances,
    make_router,
    router_rng,
)
from traffic.workloads import shard_overlap

# ---- roofline compute model (llama-3-70b on h100, hand-computed) --------------------------------


def test_prefill_and_decode_times_for_llama70b_on_h100():
    # 2 × 70.6e9 × 1000 FLOPs / (4 × 989e12 × 0.5) = 0.0713852 s
    prefill = compute.prefill_step("llama-3-70b", "h100", 1000, 4, roofline=True)
    assert prefill.total_s == pytest.approx(0.0713852, 1e-5)
    # (70.6e9 × 2 + 1000 × 327,680) / (4 × 3350e9 × 0.5) = 0.0211235 s
    decode = compute.decode_step("llama-3-70b", "h100", 1000, 4, roofline=True)
    assert decode.total_s == pytest.approx(0.0211235, 1e-5)


def test_kv_capacity_tokens():
    # (4 × 80e9 × 0.9 − 141.2e9) / 327,680 bytes per token = 447,998 tokens
    assert compute.kv_capacity_tokens("llama-3-70b", "h100", 4) == 447_998
    # int8 KV halves the bytes per token, doubling the tokens
    assert compute.kv_capacity_tokens("llama-3-70b", "h100", 4, kv_dtype="int8") == 895_996
    assert compute.kv_capacity_tokens("llama-3-70b", "h100", 1) == 0  # 141 GB > 72 GB


def test_allreduce_bytes_per_rank():
    # 2(4−1)/4 × (1 × 8192 × 2 bytes × 2 all-reduces × 80 layers) = 3,932,160
    assert compute.allreduce_bytes_per_rank("llama-3-70b", 1, 4) == 3_932_160
    assert compute.allreduce_bytes_per_rank("llama-3-70b", 8, 4) == 8 * 3_932_160
    assert compute.allreduce_bytes_per_rank("llama-3-70b", 8, 1) == 0


# ---- routers ---------------------------------------------------------------------------


def test_round_robin_deals_every_instance_once_per_round():
    r = RoundRobin(router_rng(3))
    state = RouterState(request_blocks=1, prefill_load=(0, 0), decode_load=(0, 0, 0))
    picks = [r.choose(state) for _ in range(12)]
    for k in range(0, 12, 2):  # each round of the prefill pool: both instances
        assert sorted(p for p, _ in picks[k : k + 2]) == [0, 1]
    for k in range(0, 12, 3):  # each round of the decode pool: all three
        assert sorted(d for _, d in picks[k : k + 3]) == [0, 1, 2]
    # the pools are shuffled on their own: prefill k is not always paired with decode k
    assert len(set(picks)) > 2
    coloc = RouterState(request_blocks=1, prefill_load=(0, 0, 0))
    assert all(p == d for p, d in (RoundRobin().choose(coloc) for _ in range(6)))


def test_least_loaded_picks_lowest_load():
    state = RouterState(request_blocks=4, prefill_load=(5, 2, 3), decode_load=(9, 3, 7))
    assert LeastLoaded().choose(state) == (1, 1)


@pytest.mark.parametrize("name", ["round_robin", "least_loaded", "kv_affinity", "topology_aware"])
def test_ties_are_broken_at_random_and_the_same_seed_gives_the_same_picks(name):
    # idle instances, every tier within budget: all four decode instances tie
    state = RouterState(
        request_blocks=1,
        prefill_load=(0, 0, 0, 0),
        decode_load=(0, 0, 0, 0),
        tiers=((1, 1, 1, 1),) * 4,
        inflight_kv_bytes=((0, 0, 0, 0),) * 4,
        tier_budget_bytes=(1e9, 1e9, 1e9),
    )

    def picks(seed: int) -> list[tuple[int, int]]:
        router = make_router(name, 1.0, router_rng(seed))
        return [router.choose(state) for _ in range(200)]

    assert picks(5) == picks(5)
    assert picks(5) != picks(6)
    first = picks(5)
    assert {p for p, _ in first} == {0, 1, 2, 3} and {d for _, d in first} == {0, 1, 2, 3}


def test_kv_affinity_prefers_the_instance_holding_the_prefix():
    # instance 1 is busier (3 blocks queued) but holds 8 of the prompt's 10 blocks
    state = RouterState(
        request_blocks=10, prefill_load=(0, 3), decode_load=(1, 0), cached_blocks=(0, 8)
    )
    assert KvAffinity(1.0).choose(state) == (1, 1)  # costs 10 vs 2 + 3
    assert LeastLoaded().choose(state) == (0, 1)


def test_kv_affinity_weight_zero_equals_least_loaded():
    rng = random.Random(7)
    for _ in range(500):
        n_p, n_d = rng.randint(1, 5), rng.randint(1, 5)
        blocks = rng.randint(1, 40)
        state = RouterState(
            request_blocks=blocks,
            prefill_load=tuple(rng.randint(0, 20) for _ in range(n_p)),
            decode_load=tuple(rng.randint(0, 20) for _ in range(n_d)),
            cached_blocks=tuple(rng.randint(0, blocks) for _ in range(n_p)),
        )
        assert KvAffinity(0.0).choose(state) == LeastLoaded().choose(state)


def _topo_state(inflight, decode_load=(0, 0, 0)):
    # one prefill instance; decode 0 over NVLink, 1 over the rail, 2 across the spine
    return RouterState(
        request_blocks=1,
        prefill_load=(0,),
        decode_load=decode_load,
        tiers=((0, 1, 2),),
        inflight_kv_bytes=(inflight,),
        tier_budget_bytes=(1000.0, 500.0, 100.0),
    )


def test_topology_aware_prefers_fast_tier_and_falls_back_on_budget():
    r = TopologyAware()
    # fastest tier free: the NVLink peer, even if it is the busiest
    assert r.choose(_topo_state((0, 0, 0), decode_load=(9, 0, 0))) == (0, 0)
    # NVLink budget used up: the rail peer
    assert r.choose(_topo_state((1500, 0, 0))) == (0, 1)
    # NVLink and rail over budget: across the spine
    assert r.choose(_topo_state((1500, 600, 0))) == (0, 2)
    # every tier over budget: least loaded overall
    assert r.choose(_topo_state((1500, 600, 200), decode_load=(3, 1, 2))) == (0, 1)


def test_topology_aware_within_a_tier_picks_least_loaded():
    state = RouterState(
        request_blocks=1,
        prefill_load=(4, 1),
        decode_load=(5, 2, 0),
        tiers=((2, 1, 1), (1, 1, 2)),
        inflight_kv_bytes=((0, 0, 0), (0, 0, 0)),
        tier_budget_bytes=(10.0, 10.0, 10.0),
    )
    assert TopologyAware().choose(state) == (1, 1)


def test_make_router_rejects_unknown():
    assert isinstance(make_router("kv_affinity", 0.5), KvAffinity)
    with pytest.raises(ValueError, match="allowed: round_robin"):
        make_router("random")


# ---- prefix-cache pool -----------------------------------------------------------------


def test_cache_local_remote_hits_and_prefix_stop():
    pool = PrefixCachePool([0, 1], capacity_blocks=8)
    first = pool.lookup([1, 2, 3], 0)
    assert (first.local, first.remote_total) == (0, 0)
    pool.insert([1, 2, 3], 0)
    pool.insert([4], 1)
    # from server 0: 1,2 local; 4 is on server 1 but 9 breaks the prefix before it
    hit = pool.lookup([1, 2, 9, 4], 0)
    assert (hit.local, hit.remote) == (2, {})
    # from server 1: 1,2,3 remote from server 0, 4 local, 5 held nowhere
    hit = pool.lookup([1, 2, 3, 4, 5], 1)
    assert (hit.local, hit.remote, hit.hits) == (1, {0: 3}, 4)
    hit = pool.lookup([4, 1], 1)
    assert (hit.local, hit.remote) == (1, {0: 1})
    s = pool.stats()
    assert (s["local_hit_blocks"], s["remote_hit_blocks"], s["lookup_blocks"]) == (4, 4, 14)
    assert s["hit_rate"] == pytest.approx(8 / 14)


def test_cache_lru_eviction_per_server():
    pool = PrefixCachePool([0], capacity_blocks=3)
    pool.insert([1, 2, 3], 0)
    pool.lookup([1], 0)  # 1 becomes most recent; 2 is now least recent
    pool.insert([4], 0)
    assert [pool.holds(0, b) for b in (1, 2, 3, 4)] == [True, False, True, True]
    pool.insert([5, 6], 0)  # evicts 3 then 1
    assert sorted(pool.store[0]) == [4, 5, 6]
    assert pool.stats()["evictions"] == 3
    assert pool.local_prefix([4, 5, 7], 0) == 2


# ---- instances and tiers ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fabric():
    return rail_optimized(servers=4, gpus_per_server=4)


def test_instances_split_servers_into_tp_groups(fabric):
    inst = make_instances(fabric, "decode", [2, 3], 2, kv_heads=8)
    assert [i.hosts for i in inst] == [
        ("gpu2_0", "gpu2_1"),
        ("gpu2_2", "gpu2_3"),
        ("gpu3_0", "gpu3_1"),
        ("gpu3_2", "gpu3_3"),
    ]
    assert [i.server for i in inst] == [2, 2, 3, 3]
    wide = make_instances(fabric, "prefill", [0, 1], 8, kv_heads=8)
    assert wide[0].hosts[4] == "gpu1_0" and wide[0].server == 0


@pytest.mark.parametrize(
    ("servers", "tp", "match"),
    [([7], 4, "lacks"), ([0], 3, "KV heads"), ([0], 8, "does not divide the 4 GPUs")],
)
def test_instances_bad_input(fabric, servers, tp, match):
    with pytest.raises(ServingError, match=match):
        make_instances(fabric, "prefill", servers, tp, kv_heads=8)


def test_tiers_from_the_fabric(fabric):
    tiers = TierMap(fabric)
    assert tiers.host_tier("gpu0_0", "gpu0_1") == 0  # NVLink
    assert tiers.host_tier("gpu0_0", "gpu1_0") == 1  # rail0
    assert tiers.host_tier("gpu0_0", "gpu1_1") == 2  # rail0 → spine → rail1
    p = make_instances(fabric, "prefill", [0], 4, 8)[0]
    d4 = make_instances(fabric, "decode", [1], 4, 8)[0]
    d2 = make_instances(fabric, "decode", [1], 2, 8)[0]
    assert tiers.instance_tier(p, d4, shard_overlap(8, 4, 4)) == 1  # rank i → rank i
    assert tiers.instance_tier(p, d2, shard_overlap(8, 4, 2)) == 2  # rank 1 → gpu1_0
    assert tiers.path_gbps("gpu0_0", "gpu1_1") == 400.0

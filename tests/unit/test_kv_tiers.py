"""Tiered KV storage: the tier and eviction choices, the serving driver under HBM
pressure (fluid simulator), the refusals that name the key, and the kv_tiers metrics."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml

from experiments.analysis.estimates import estimate
from experiments.analysis.metrics.tiers import tier_metrics
from experiments.spec.load import SpecError, expand, find_bundled, load_spec
from traffic import compute, presets
from traffic.serving import ServingError, build_serving, fabric_rate, simulate
from traffic.serving.tiers import (
    RECOMPUTE,
    CxlTier,
    TierBlocks,
    TierSpace,
    choose_eviction,
    eviction_costs,
    hbm_tokens,
    lru_victims,
)

BPT_70B = 327_680  # Llama 3 70B fp16 KV bytes per token

# ---- the pure choices ------------------------------------------------------------------


def test_hbm_per_gpu_sets_an_instances_tokens():
    # 0.6 GB on each of 4 GPUs of Llama 3 70B: 2.4e9 / 327,680 bytes per token
    assert hbm_tokens(0.6, 4, BPT_70B) == 7324
    assert hbm_tokens(0.6, 1, BPT_70B) == 1831


def test_the_cheaper_way_out_of_hbm_wins_and_a_tie_keeps_the_kv():
    nbytes = 688e6  # 2,100 tokens of Llama 3 70B
    # 100 Gbit/s: 55 ms each way, 110 ms out and back, against a 150 ms recompute
    costs = eviction_costs(nbytes, 0.150, "flash", 100.0, latency_us=100)
    assert costs["flash"] == pytest.approx(2 * (100e-6 + nbytes * 8 / 100e9))
    assert choose_eviction(costs) == "flash"
    # a 10 Gbit/s storage link makes the round trip 1.1 s: recompute is cheaper
    assert choose_eviction(eviction_costs(nbytes, 0.150, "flash", 10.0)) == RECOMPUTE
    # no tier with room: recompute is the only way
    assert choose_eviction(eviction_costs(nbytes, 9.0, None)) == RECOMPUTE
    assert choose_eviction({RECOMPUTE: 0.1, "cxl": 0.1}) == "cxl"


def test_cxl_moves_cost_latency_plus_bytes_at_its_rate():
    cxl = CxlTier(capacity_gb=256, gbps=512, latency_us=1)
    assert cxl.move_s(688e6) == pytest.approx(1e-6 + 688e6 * 8 / 512e9)


def test_lru_victims_go_oldest_first_until_the_newcomer_fits():
    members = [("b", 20, 2400), ("a", 10, 2400), ("c", 30, 2400)]
    assert lru_victims(members, need=2400, free=400) == ["a"]
    assert lru_victims(members, need=5000, free=400) == ["a", "b"]
    assert lru_victims(members, need=2400, free=2400) == []


def test_tier_space_and_blocks_keep_their_bounds_and_order():
    space = TierSpace(["storage0"], 1000)
    space.hold("storage0", 600)
    assert not space.room("storage0", 500) and space.room("storage0", 400)
    space.free("storage0", 600)
    assert space.room("storage0", 1000)
    blocks = TierBlocks([0, 1])
    for b in (7, 8, 9):
        blocks.add(0, b)
    blocks.touch(0, 7)
    assert blocks.pop_lru(0) == 8 and blocks.where(9) == 0 and blocks.where(8) is None
    assert blocks.pop_lru(1) is None


# ---- the driver under HBM pressure -------------------------------------------------------

SPEC = {
    "name": "tiers",
    "duration_s": 10,
    "fabric": {
        "kind": "rail_optimized",
        "servers": 4,
        "gpus_per_server": 4,
        "spines": 2,
        "spine_gbps": 100,
        "storage_nodes": 1,
        "storage_attach": "spine0",
        "storage_gbps": 400,
    },
    "workloads": [
        {
            "kind": "serving",
            "model": "llama-3-70b",
            "prefill": {"servers": [0, 1], "tp": 4},
            "decode": {"servers": [2, 3], "tp": 4},
            "router": "least_loaded",
            "arrivals": {
                "synthetic": {"n": 16, "rate_per_s": 4, "input_tokens": 2000, "output_tokens": 200}
            },
            "kv_tiers": {"hbm_gb": 0.6},
        }
    ],
}
CXL = {"capacity_gb": 256, "gbps": 512, "latency_us": 1}
FLASH = {"capacity_gb": 4000, "latency_us": 100}


def _spec(fabric=None, **workload) -> dict:
    spec = copy.deepcopy(SPEC)
    spec["fabric"].update(fabric or {})
    spec["workloads"][0].update(workload)
    return spec


def _resolved(spec: dict):
    loaded = load_spec(yaml.safe_dump(spec, sort_keys=False))
    return loaded.config.workloads[0], loaded.fabric()


def _run(spec: dict):
    workload, fabric = _resolved(spec)
    driver = build_serving(workload, fabric, 1)
    result = simulate(driver, fabric_rate(fabric), t0_ns=10**12)
    assert result.finished
    return driver, driver.requests_table(), driver.tokens_table(), result.flows


def test_without_tiers_nothing_is_evicted():
    driver, req, _, flows = _run(_spec(kv_tiers=None))
    assert req["served"].all() and (req["evicted"] == 0).all()
    assert (req["tier_stall_ms"] == 0).all() and "tier_fetch" not in set(flows["kind"])
    assert "storage0" not in driver.hosts


def test_hbm_only_recomputes_every_victim_and_stalls_its_batch():
    driver, req, tok, flows = _run(_spec())
    assert driver.capacity == 7324  # three requests of 2,200 tokens
    victims = req[req["evicted"] > 0]
    assert len(victims) >= 3 and req["served"].all()
    # at each eviction a victim recomputes its prompt and what it had generated by then
    recomputed, n = victims["recomputed_tokens"], victims["evicted"]
    assert (recomputed > victims["input_tokens"] * n).all()
    assert (recomputed <= (victims["input_tokens"] + 200) * n).all()
    assert (victims["tier_stall_ms"] > 0).all()
    assert "tier_fetch" not in set(flows["kind"])
    # a recompute occupies the decode instance: a request never evicted sees a token gap
    # at least as long as a recompute of the prompt alone
    recompute_ms = compute.prefill_time_s("llama-3-70b", "h100", 2000, 4) * 1e3
    never = tok[~tok["request_id"].isin(victims["request_id"])]
    assert never["itl_ms"].max() >= recompute_ms


def test_cxl_takes_victims_with_no_fabric_traffic():
    _, req, tok, flows = _run(_spec(kv_tiers={"hbm_gb": 0.6, "cxl": CXL}))
    victims = req[req["evicted"] > 0]
    assert len(victims) >= 3 and (victims["recomputed_tokens"] == 0).all()
    # what went down came back, byte for byte: prompt + generated tokens of KV
    assert (victims["tier_offload_bytes_cxl"] == victims["tier_fetch_bytes_cxl"]).all()
    assert (victims["tier_offload_bytes_cxl"] % BPT_70B == 0).all()
    assert (victims["tier_offload_bytes_cxl"] > victims["input_tokens"] * BPT_70B).all()
    assert "tier_fetch" not in set(flows["kind"])
    # no recompute stalls the others: their ITL stays a decode step
    never = tok[~tok["request_id"].isin(victims["request_id"])]
    assert never["itl_ms"].max() < 50


def test_flash_moves_victims_over_the_storage_nodes_link():
    driver, req, _, flows = _run(_spec(kv_tiers={"hbm_gb": 0.6, "flash": FLASH}))
    assert "storage0" in driver.hosts
    victims = req[req["evicted"] > 0]
    assert len(victims) >= 3 and (victims["recomputed_tokens"] == 0).all()
    tier = flows[flows["kind"] == "tier_fetch"]
    decode_hosts = {f"gpu{s}_{i}" for s in (2, 3) for i in range(4)}
    out, back = tier[tier["dst"] == "storage0"], tier[tier["src"] == "storage0"]
    assert len(out) and len(back) and len(out) + len(back) == len(tier)
    assert set(out["src"]) <= decode_hosts and set(back["dst"]) <= decode_hosts
    assert out["bytes"].sum() == victims["tier_offload_bytes_flash"].sum()
    assert back["bytes"].sum() == victims["tier_fetch_bytes_flash"].sum()
    # the fetch back starts the flash latency after it is asked for
    assert (back["t_sched_ns"].diff().dropna() >= 0).all()


class FirstTierFetchFails:
    """The serving driver, except that the first tier_fetch message fails on arrival."""

    def __init__(self, driver) -> None:
        self.driver, self.doomed = driver, None

    def __getattr__(self, name):
        return getattr(self.driver, name)

    def _watch(self, messages):
        for m in messages:
            if m.kind == "tier_fetch" and self.doomed is None:
                self.doomed = m.flow_id
        return messages

    def start(self, t0_ns):
        return self._watch(self.driver.start(t0_ns))

    def on_timer(self, now_ns):
        return self._watch(self.driver.on_timer(now_ns))

    def on_received(self, flow_id, t_end_ns):
        if flow_id == self.doomed:
            return self._watch(self.driver.on_failed(flow_id, "connection reset", t_end_ns))
        return self._watch(self.driver.on_received(flow_id, t_end_ns))


def test_a_failed_tier_fetch_loses_its_request_and_no_other():
    workload, fabric = _resolved(_spec(kv_tiers={"hbm_gb": 0.6, "flash": FLASH}))
    driver = build_serving(workload, fabric, 1)
    wrapped = FirstTierFetchFails(driver)
    assert simulate(wrapped, fabric_rate(fabric), t0_ns=10**12).finished
    req = driver.requests_table()
    lost = req[~req["served"]]
    assert len(lost) == 1 and "tier_fetch message" in lost["error"].iloc[0]
    assert "connection reset" in lost["error"].iloc[0]
    # what it held below HBM is given back: the storage node ends empty
    assert driver.tier_stats()["flash"] == {"storage0": 0.0}


def test_a_slow_storage_link_makes_recompute_the_cheaper_way():
    spec = _spec({"storage_gbps": 5}, kv_tiers={"hbm_gb": 0.6, "flash": FLASH})
    _, req, _, flows = _run(spec)
    victims = req[req["evicted"] > 0]
    assert len(victims) and (victims["recomputed_tokens"] > 0).all()
    assert "tier_fetch" not in set(flows["kind"])


def test_prefix_blocks_evicted_from_hbm_are_fetched_from_flash():
    # 4 prefixes of 3 blocks against a pool of 4 blocks per prefill server: most prefixes
    # are pushed out of HBM before they come back, so they come back from flash
    arrivals = {
        "synthetic": {
            "n": 24,
            "rate_per_s": 4,
            "input_tokens": 2048,
            "output_tokens": 4,
            "shared_prefix_blocks": 3,
            "n_prefixes": 4,
        }
    }
    cache = {"enabled": True, "capacity_blocks": 4}
    tiered = _spec(arrivals=arrivals, prefix_cache=cache, kv_tiers={"hbm_gb": 10, "flash": FLASH})
    _, req, _, flows = _run(tiered)
    fetched = req[req["tier_hit_blocks"] > 0]
    assert len(fetched) >= 4
    assert (fetched["tier_fetch_bytes_flash"] == fetched["tier_hit_blocks"] * 512 * BPT_70B).all()
    tier = flows[flows["kind"] == "tier_fetch"]
    prefill_hosts = {f"gpu{s}_{i}" for s in (0, 1) for i in range(4)}
    assert set(tier.loc[tier["src"] == "storage0", "dst"]) <= prefill_hosts
    assert set(tier.loc[tier["dst"] == "storage0", "src"]) <= prefill_hosts  # demotions
    # the same arrivals with HBM alone: the evicted prefixes are computed again
    _, alone, _, _ = _run(_spec(arrivals=arrivals, prefix_cache=cache, kv_tiers=None))
    assert req["cached_tokens"].sum() > alone["cached_tokens"].sum()


def test_prefix_blocks_evicted_from_hbm_are_read_back_from_cxl_off_the_fabric():
    arrivals = {
        "synthetic": {
            "n": 24,
            "rate_per_s": 4,
            "input_tokens": 2048,
            "output_tokens": 4,
            "shared_prefix_blocks": 3,
            "n_prefixes": 4,
        }
    }
    cache = {"enabled": True, "capacity_blocks": 4}
    tiered = _spec(arrivals=arrivals, prefix_cache=cache, kv_tiers={"hbm_gb": 10, "cxl": CXL})
    _, req, _, flows = _run(tiered)
    fetched = req[req["tier_hit_blocks"] > 0]
    assert len(fetched) >= 4
    assert (fetched["tier_fetch_bytes_cxl"] == fetched["tier_hit_blocks"] * 512 * BPT_70B).all()
    assert (req["tier_fetch_bytes_flash"] == 0).all() and "tier_fetch" not in set(flows["kind"])
    _, alone, _, _ = _run(_spec(arrivals=arrivals, prefix_cache=cache, kv_tiers=None))
    assert req["cached_tokens"].sum() > alone["cached_tokens"].sum()


# ---- refusals that name the key ----------------------------------------------------------


def test_hbm_smaller_than_one_requests_kv_is_refused():
    workload, fabric = _resolved(_spec(kv_tiers={"hbm_gb": 0.1}))
    with pytest.raises(ServingError, match=r"kv_tiers\.hbm_gb=0\.1 holds 1220 .*needs 2200"):
        build_serving(workload, fabric, 1)


def test_a_lower_tier_smaller_than_one_requests_kv_is_refused():
    small = dict(CXL, capacity_gb=0.5)
    workload, fabric = _resolved(_spec(kv_tiers={"hbm_gb": 0.6, "cxl": small}))
    with pytest.raises(ServingError, match=r"kv_tiers\.cxl\.capacity_gb=0\.5 is smaller"):
        build_serving(workload, fabric, 1)


def test_flash_without_storage_nodes_is_refused():
    spec = _spec({"storage_nodes": 0}, kv_tiers={"hbm_gb": 0.6, "flash": FLASH})
    with pytest.raises(SpecError, match=r"kv_tiers\.flash: .*no storage nodes"):
        _resolved(spec)


def test_a_tier_fetch_mark_the_storage_nodes_port_would_rewrite_is_refused():
    spec = _spec(
        kv_tiers={"hbm_gb": 0.6, "flash": FLASH},
        tenant="a",
        dscp={"kv_transfer": "kv", "tier_fetch": "kv"},
    )
    gpus = [f"gpu{s}_{i}" for s in range(4) for i in range(4)]
    classes = [
        {"name": "kv", "dscp": 26, "rate_share": 0.7},
        {"name": "bulk", "dscp": 0, "rate_share": 0.3},
    ]
    qos = {"classes": classes, "tenant_class": {"a": ["kv", "bulk"]}}
    spec["controller"] = {"policy": "ecmp", "tenants": {"a": gpus}, "qos": qos}
    with pytest.raises(SpecError, match=r"dscp\.tier_fetch: 26 .*storage0's switch port"):
        _resolved(spec)
    spec["controller"]["tenants"]["a"] = [*gpus, "storage0"]
    workload, _ = _resolved(spec)
    assert workload.dscp.tier_fetch == 26


def test_hbm_for_kv_beyond_what_the_weights_leave_is_refused():
    # 70B fp16 weights over 4 GPUs: 35.3 GB of each 80 GB H100
    with pytest.raises(SpecError, match=r"kv_tiers\.hbm_gb: 60\.0 .*at most 44\.7 GB"):
        _resolved(_spec(kv_tiers={"hbm_gb": 60}))
    with pytest.raises(SpecError, match=r"kv_tiers\.cxl\.gbps: 0 "):
        _resolved(_spec(kv_tiers={"hbm_gb": 0.6, "cxl": dict(CXL, gbps=0)}))


# ---- metrics and the bundled experiment --------------------------------------------------


def test_tier_metrics_add_up_a_constructed_table():
    req = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "evicted": [0, 2, 1],
            "recomputed_tokens": [0, 2100, 0],
            "tier_fetch_bytes_cxl": [0, 0, 0],
            "tier_fetch_bytes_flash": [0, 600, 300],
            "tier_offload_bytes_cxl": [0, 0, 0],
            "tier_offload_bytes_flash": [0, 600, 300],
            "tier_stall_ms": [0.0, 40.0, 10.0],
            "tier_hit_blocks": [0, 0, 1],
        }
    )
    nan = float("nan")
    tok = pd.DataFrame({"request_id": [0, 0, 1, 1], "itl_ms": [nan, 5.0, nan, 200.0]})
    flows = pd.DataFrame(
        {
            "kind": ["tier_fetch", "tier_fetch", "kv_transfer"],
            "bytes_real": [600, 300, 10**9],
            "ok": [True, True, True],
        }
    )
    m = tier_metrics(req, tok, flows)
    assert m["requests_evicted"] == 2 and m["evictions"] == 3
    assert m["requests_recomputed"] == 1 and m["recomputed_tokens"] == 2100
    assert m["bytes_by_tier"]["flash"] == {"offloaded": 900, "fetched": 900, "moved": 1800}
    assert m["tier_fetch_bytes_on_wire"] == 900
    assert m["stall_ms"]["count"] == 2 and m["stall_ms_total"] == 50.0
    assert m["itl_ms_never_evicted"]["max"] == 5.0 and m["itl_ms_evicted"]["max"] == 200.0
    assert tier_metrics(req.drop(columns="evicted")) is None


def test_the_bundled_kv_tiering_estimate_orders_the_ways_out_of_hbm():
    runs = expand(load_spec(find_bundled("kv-tiering")))
    assert len(runs) == 4
    estimates = [estimate(run.config, run.fabric())["serving"] for run in runs]
    assert "kv_tiers" not in estimates[0]  # the unpressured baseline
    victims = [e["kv_tiers"]["victim"]["round_trip_ms"] for e in estimates[1:]]
    assert victims[1]["cxl"] < victims[2]["flash"] < victims[0][RECOMPUTE]
    assert all(e["kv_tiers"]["evictions"] > 0 for e in estimates[1:])
    moved = [e["kv_tiers"]["bytes_moved_by_tier"] for e in estimates[1:]]
    assert moved[0] == {"cxl": 0, "flash": 0}
    assert moved[1]["cxl"] > 0 and moved[2]["flash"] > 0
    # the model preset's numbers the spec's comment quotes
    assert presets.model("llama-3-70b").kv_bytes_per_token("fp16") == BPT_70B

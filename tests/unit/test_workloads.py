"""Workload models: bytes, counts, timing, dependencies and determinism of schedules."""

import numpy as np
import pandas as pd
import pytest

from traffic import compute
from traffic.flowsizes import FLOW_SIZE_CDFS, mean_flow_bytes, sample_flow_bytes
from traffic.presets import model
from traffic.workloads import (
    COLUMNS,
    WorkloadError,
    background,
    concat_schedules,
    incast,
    kv_transfer,
    moe_alltoall,
    probe,
    shard_overlap,
    validate_schedule,
)

HOSTS = [f"h{i}" for i in range(8)]
PREFILL = ["h0", "h1", "h2", "h3"]
DECODE = ["h4", "h5", "h6", "h7"]


def _valid(schedule: pd.DataFrame) -> pd.DataFrame:
    validate_schedule(schedule)
    assert list(schedule.columns) == list(COLUMNS)
    assert schedule["flow_id"].tolist() == list(range(len(schedule)))
    return schedule


# ---- incast ----------------------------------------------------------------------------


def test_incast_rounds_and_barriers():
    s = _valid(incast("h0", ["h1", "h2", "h3", "h4"], 256_000, 3))
    assert len(s) == 12 and set(s["kind"]) == {"incast"}
    assert (s["bytes"] == 256_000).all() and (s["dst"] == "h0").all()
    assert s.groupby("round")["src"].apply(sorted).tolist() == [["h1", "h2", "h3", "h4"]] * 3
    assert (s["t_sched_ns"] == 0).all()
    # Round r is group flow_id 4r; round r + 1 waits for it; round 0 waits for nothing.
    assert s["barrier"].tolist() == [0] * 4 + [4] * 4 + [8] * 4
    assert s["after"].tolist() == [-1] * 4 + [0] * 4 + [4] * 4


def test_incast_sender_count_picks_hosts_by_seed():
    a = _valid(incast("h0", 4, 1000, 2, hosts=HOSTS, seed=1))
    assert a["src"].nunique() == 4 and "h0" not in set(a["src"])
    pd.testing.assert_frame_equal(a, incast("h0", 4, 1000, 2, hosts=HOSTS, seed=1))
    picks = {tuple(incast("h0", 4, 1000, 1, hosts=HOSTS, seed=s)["src"]) for s in range(10)}
    assert len(picks) > 1


def test_incast_jitter_is_seeded_and_bounded():
    a = incast("h0", ["h1", "h2"], 1000, 5, jitter_us=100, seed=3)
    b = incast("h0", ["h1", "h2"], 1000, 5, jitter_us=100, seed=4)
    pd.testing.assert_frame_equal(a, incast("h0", ["h1", "h2"], 1000, 5, jitter_us=100, seed=3))
    assert not a["t_sched_ns"].equals(b["t_sched_ns"])
    assert a["t_sched_ns"].between(0, 100_000 - 1).all()


def test_an_incast_rides_its_lane_and_other_workloads_lane_zero():
    """A lane names which persistent connection of a pair carries the rows (QPs)."""
    two = concat_schedules([incast("h0", ["h1"], 1000, 2), incast("h0", ["h1"], 1000, 2, lane=3)])
    assert _valid(two)["lane"].tolist() == [0, 0, 3, 3]
    assert set(_valid(background(HOSTS, 0.5, 100, 0.01))["lane"]) == {0}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"senders": ["h1", "h0"]}, "receiver 'h0' is also a sender"),
        ({"senders": 8, "hosts": HOSTS}, "senders=8 but only 7 hosts"),
        ({"senders": 3}, "hosts .* is required"),
        ({"sru_bytes": 0}, "sru_bytes must be a positive integer, got 0"),
        ({"rounds": -1}, "rounds must be a positive integer"),
        ({"senders": ["h1", "h9"], "hosts": HOSTS}, r"hosts \['h9'\] the fabric lacks"),
        ({"senders": []}, "senders is empty"),
        ({"lane": -1}, "lane must be >= 0, got -1"),
    ],
)
def test_incast_bad_input(kwargs, match):
    args = {"receiver": "h0", "senders": ["h1"], "sru_bytes": 1000, "rounds": 1} | kwargs
    with pytest.raises(WorkloadError, match=match):
        incast(**args)


# ---- kv_transfer -----------------------------------------------------------------------


def test_monolithic_sends_the_whole_cache_after_prefill():
    s = _valid(kv_transfer(PREFILL, DECODE, "llama-3-70b", 8000))
    # TP 4 to TP 4: rank i owns the same two heads on both sides, so 4 messages.
    assert list(zip(s["src"], s["dst"], strict=True)) == list(zip(PREFILL, DECODE, strict=True))
    assert s["bytes"].sum() == 2_621_440_000
    assert (s["bytes"] == 2_621_440_000 // 4).all()
    prefill_ns = round(compute.prefill_time_s("llama-3-70b", "h100", 8000, tp=4) * 1e9)
    assert (s["t_sched_ns"] == prefill_ns).all()
    assert set(s["kind"]) == {"kv_transfer"} and (s["request_id"] == 0).all()


@pytest.mark.parametrize(("p", "d"), [(4, 4), (2, 4), (4, 2), (1, 8), (8, 1), (2, 2)])
def test_pipelined_one_chunk_per_layer_same_bytes_as_monolithic(p, d):
    pre = [f"p{i}" for i in range(p)]
    dec = [f"d{i}" for i in range(d)]
    mono = _valid(kv_transfer(pre, dec, "llama-3-70b", [3000, 5000]))
    pipe = _valid(kv_transfer(pre, dec, "llama-3-70b", [3000, 5000], mode="layer_pipelined"))
    assert set(pipe["kind"]) == {"kv_layer"}
    per_pair = pipe.groupby(["request_id", "src", "dst"])["layer"]
    assert (per_pair.count() == 80).all()
    assert per_pair.apply(lambda layers: sorted(layers) == list(range(80))).all()
    assert len(per_pair) == len(mono)  # the same rank pairs talk
    assert pipe["bytes"].sum() == mono["bytes"].sum() == 327_680 * 8000
    by_pair = pipe.groupby(["request_id", "src", "dst"])["bytes"].sum()
    pd.testing.assert_series_equal(
        by_pair, mono.set_index(["request_id", "src", "dst"])["bytes"], check_names=False
    )


def test_pipelined_chunks_follow_layer_compute():
    s = kv_transfer(["p0"], ["d0"], "llama-3-8b", 4000, mode="layer_pipelined", gpu="a100")
    total = compute.prefill_time_s("llama-3-8b", "a100", 4000)
    expected = [round(total * (layer + 1) / 32 * 1e9) for layer in range(32)]
    assert np.allclose(s["t_sched_ns"], expected, atol=1)
    assert s["chunk"].tolist() == s["layer"].tolist() == list(range(32))


def test_int8_halves_the_bytes():
    fp16 = kv_transfer(PREFILL, DECODE, "llama-3-8b", 1000, mode="layer_pipelined")
    int8 = kv_transfer(PREFILL, DECODE, "llama-3-8b", 1000, mode="layer_pipelined", dtype="int8")
    assert (int8["bytes"] * 2 == fp16["bytes"]).all()
    assert int8["bytes"].sum() == model("llama-3-8b").kv_bytes_per_token("fp16") * 1000 // 2


def test_shard_overlap_routes_heads_to_owners():
    assert shard_overlap(8, 2, 4).tolist() == [[2, 2, 0, 0], [0, 0, 2, 2]]
    assert shard_overlap(8, 4, 2).tolist() == [[2, 0], [2, 0], [0, 2], [0, 2]]
    assert shard_overlap(8, 1, 1).tolist() == [[8]]


def test_requests_queue_fifo_on_one_prefill_instance():
    s = kv_transfer(["p0"], ["d0"], "llama-3-8b", [1000, 1000, 1000])
    one = round(compute.prefill_time_s("llama-3-8b", "h100", 1000) * 1e9)
    assert np.allclose(s["t_sched_ns"], [one, 2 * one, 3 * one], atol=2)


def test_requests_spread_over_instances():
    s = kv_transfer(PREFILL, DECODE, "llama-3-8b", [1000] * 4, prefill_tp=2, decode_tp=1)
    assert s.groupby("request_id")["dst"].first().tolist() == DECODE
    assert set(s.loc[s["request_id"] == 1, "src"]) == {"h2", "h3"}


def test_poisson_arrivals_are_seeded():
    args = (["p0"], ["d0"], "llama-3-8b", [500] * 20)
    a = kv_transfer(*args, rate_rps=5.0, seed=1)
    pd.testing.assert_frame_equal(a, kv_transfer(*args, rate_rps=5.0, seed=1))
    assert not a["t_sched_ns"].equals(kv_transfer(*args, rate_rps=5.0, seed=2)["t_sched_ns"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "gpt-5"}, "unknown model 'gpt-5'; known models: llama-3-8b"),
        ({"tokens": 0}, "tokens must be a positive integer, got 0"),
        ({"mode": "streaming"}, "mode='streaming'; allowed: monolithic, layer_pipelined"),
        ({"dtype": "fp4"}, "unknown dtype 'fp4'"),
        ({"decode_hosts": ["h3", "h4"]}, "both prefill and decode"),
        ({"prefill_hosts": ["h0", "h1", "h2"]}, "prefill_tp=3 does not divide"),
        ({"prefill_tp": 2, "prefill_hosts": ["h0", "h1", "h2"]}, "not a multiple of tp=2"),
        ({"gpu": "tpu"}, "unknown GPU 'tpu'"),
        ({"rate_rps": 0}, "rate_rps must be a positive number"),
    ],
)
def test_kv_transfer_bad_input(kwargs, match):
    args = {
        "prefill_hosts": PREFILL,
        "decode_hosts": DECODE,
        "model": "llama-3-70b",
        "tokens": 100,
    } | kwargs
    with pytest.raises(WorkloadError, match=match):
        kv_transfer(**args)


# ---- moe_alltoall ----------------------------------------------------------------------


def test_alltoall_sizes_counts_and_synchronised_steps():
    group = HOSTS[:4]
    s = _valid(moe_alltoall(group, "tenant-a", 3, 4096, step_interval_ms=5))
    per_pair = 4096 * 2 // 4 * 4096 * 2  # tokens × top_k / G × hidden × bf16
    assert len(s) == 3 * 2 * 4 * 3 and (s["bytes"] == per_pair).all()
    assert set(s["tenant"]) == {"tenant-a"} and set(s["kind"]) == {"alltoall"}
    dispatch = s[s["after"] == -1]
    assert dispatch.groupby("step")["t_sched_ns"].unique().tolist() == [
        [0],
        [5_000_000],
        [10_000_000],
    ]
    assert len(dispatch) == 3 * 12


def test_alltoall_combine_waits_for_dispatch_into_its_sender():
    s = moe_alltoall(["a", "b", "c"], "t", 1, 300, expert_compute_us=20)
    dispatch, combine = s[s["after"] == -1], s[s["after"] >= 0]
    assert (combine["t_sched_ns"] == 20_000).all()
    for _, row in combine.iterrows():
        group = dispatch[dispatch["barrier"] == row["after"]]
        assert set(group["dst"]) == {row["src"]} and len(group) == 2
    # Combine returns what was dispatched: same bytes per (unordered) pair.
    fwd = dispatch.set_index(["src", "dst"])["bytes"]
    back = combine.set_index(["dst", "src"])["bytes"]
    pd.testing.assert_series_equal(fwd.sort_index(), back.sort_index(), check_names=False)


def test_alltoall_explicit_shape_and_fp8():
    s = moe_alltoall(["a", "b"], "t", 1, 1000, model=None, hidden_size=7168, top_k=8, dtype="fp8")
    assert (s["bytes"] == 1000 * 8 // 2 * 7168).all()


def test_alltoall_random_routing_seeded_and_conserves_tokens():
    args = (HOSTS[:4], "t", 2, 1000)
    a = moe_alltoall(*args, routing="random", seed=5)
    pd.testing.assert_frame_equal(a, moe_alltoall(*args, routing="random", seed=5))
    assert not a.equals(moe_alltoall(*args, routing="random", seed=6))
    pd.testing.assert_frame_equal(moe_alltoall(*args, seed=1), moe_alltoall(*args, seed=2))
    assert a["bytes"].nunique() > 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "llama-3-8b"}, "has no experts"),
        ({"model": "nope"}, "unknown model 'nope'"),
        ({"group": ["a"]}, "at least 2 hosts"),
        ({"group": ["a", "a"]}, "lists a host twice"),
        ({"tokens_per_step": 0}, "tokens_per_step must be a positive integer"),
        ({"step_interval_ms": -1}, "step_interval_ms must be a positive number"),
        ({"routing": "zipf"}, "routing='zipf'; allowed: uniform, random"),
    ],
)
def test_alltoall_bad_input(kwargs, match):
    args = {"group": ["a", "b"], "tenant": "t", "steps": 1, "tokens_per_step": 10} | kwargs
    with pytest.raises(WorkloadError, match=match):
        moe_alltoall(**args)


# ---- background ------------------------------------------------------------------------


def test_flow_size_cdfs_are_valid_and_means_match_samples():
    rng = np.random.default_rng(0)
    for name, cdf in FLOW_SIZE_CDFS.items():
        sizes, probs = zip(*cdf, strict=True)
        assert probs[0] == 0 and probs[-1] == 1
        assert list(sizes) == sorted(sizes) and list(probs) == sorted(probs)
        samples = sample_flow_bytes(name, rng, 400_000)
        assert samples.min() >= 1 and samples.max() <= sizes[-1]
        assert np.median(samples) == pytest.approx(np.interp(0.5, probs, sizes), rel=0.05)
    assert mean_flow_bytes("web_search") == pytest.approx(1_711_250)
    websearch = sample_flow_bytes("web_search", rng, 400_000)
    assert websearch.mean() == pytest.approx(mean_flow_bytes("web_search"), rel=0.02)


@pytest.mark.parametrize(
    ("distribution", "duration_s", "tolerance"),
    [("web_search", 60.0, 0.03), ("data_mining", 600.0, 0.06)],
)
def test_background_offered_load_meets_target(distribution, duration_s, tolerance):
    hosts, gbps, load = HOSTS, 10.0, 0.4
    s = _valid(background(hosts, load, gbps, duration_s, distribution=distribution, seed=7))
    offered = s["bytes"].sum() * 8 / (duration_s * len(hosts) * gbps * 1e9)
    assert offered == pytest.approx(load, rel=tolerance)
    assert (s["src"] != s["dst"]).all()
    assert s["t_sched_ns"].is_monotonic_increasing
    assert s["t_sched_ns"].max() < duration_s * 1e9
    per_host = s.groupby("src")["bytes"].sum() / s["bytes"].sum()
    assert per_host.between(0.5 / len(hosts), 2.0 / len(hosts)).all()


def test_background_arrivals_are_poisson():
    s = background(HOSTS, 0.5, 10.0, 20.0, seed=3)
    gaps = np.diff(s["t_sched_ns"].to_numpy()) / 1e9
    rate = 0.5 * 8 * 10e9 / 8 / mean_flow_bytes("web_search")
    assert len(s) == pytest.approx(rate * 20.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: CV 1


def test_background_seeded():
    a = background(HOSTS, 0.3, 10.0, 1.0, seed=1)
    pd.testing.assert_frame_equal(a, background(HOSTS, 0.3, 10.0, 1.0, seed=1))
    assert not a.equals(background(HOSTS, 0.3, 10.0, 1.0, seed=2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"load": 0}, "load must be a positive number, got 0"),
        ({"load": 1.5}, r"load=1.5; allowed: \(0, 1\]"),
        ({"host_gbps": -1}, "host_gbps must be a positive number"),
        ({"hosts": ["h0"]}, "at least 2 hosts"),
        ({"distribution": "hadoop"}, "distribution='hadoop'; allowed: web_search, data_mining"),
    ],
)
def test_background_bad_input(kwargs, match):
    args = {"hosts": HOSTS, "load": 0.5, "host_gbps": 10.0, "duration_s": 1.0} | kwargs
    with pytest.raises(WorkloadError, match=match):
        background(**args)


# ---- probe -----------------------------------------------------------------------------


def test_probe_rate_count_and_udp():
    s = _valid(probe([("h0", "h4"), ("h1", "h5")], rate_hz=1000, size_bytes=64, duration_s=0.5))
    assert len(s) == 2 * 500
    assert set(s["proto"]) == {"udp"} and not s["scaled"].any() and (s["bytes"] == 64).all()
    one = s[s["src"] == "h0"]
    assert np.diff(one["t_sched_ns"]).tolist() == [1_000_000] * 499
    assert one["chunk"].tolist() == list(range(500))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pairs": [("h0", "h0")]}, "sends to itself"),
        ({"rate_hz": 0}, "rate_hz must be a positive number"),
        ({"size_bytes": 10}, "size_bytes=10; allowed 44..1472"),
        ({"size_bytes": 9000}, "size_bytes=9000"),
        ({"pairs": [("h0", "x")], "hosts": HOSTS}, "the fabric lacks"),
    ],
)
def test_probe_bad_input(kwargs, match):
    args = {"pairs": [("h0", "h1")], "rate_hz": 100, "size_bytes": 64, "duration_s": 1} | kwargs
    with pytest.raises(WorkloadError, match=match):
        probe(**args)


# ---- schedules together ----------------------------------------------------------------


def test_concat_keeps_dependencies_and_unique_ids():
    parts = [
        incast("h0", ["h1", "h2"], 1000, 3),
        moe_alltoall(["h3", "h4"], "t", 2, 100),
        probe([("h5", "h6")], 10, 64, 1.0),
    ]
    merged = _valid(concat_schedules(parts))
    assert len(merged) == sum(len(p) for p in parts)
    moe = merged[merged["kind"] == "alltoall"]
    for _, row in moe[moe["after"] >= 0].iterrows():
        assert (moe.loc[moe["barrier"] == row["after"], "dst"] == row["src"]).all()
    inc = merged[merged["kind"] == "incast"]
    assert inc["after"].tolist() == [-1, -1, 0, 0, 2, 2]


def test_validate_rejects_dangling_dependency():
    s = incast("h0", ["h1"], 1000, 2)
    s.loc[1, "after"] = 99
    with pytest.raises(WorkloadError, match="do not exist"):
        validate_schedule(s)


def test_validate_rejects_waiting_on_a_later_message():
    s = incast("h0", ["h1", "h2"], 1000, 2)
    s.loc[1, "barrier"] = 2  # round 0's group would now include a round-1 message
    s.loc[2:, "after"] = 2
    with pytest.raises(WorkloadError, match="do not all come before"):
        validate_schedule(s)


def test_an_empty_schedule_is_valid_and_has_every_column():
    from traffic.workloads import concat_schedules, empty_schedule, validate_schedule

    empty = empty_schedule()
    validate_schedule(empty)
    assert len(empty) == 0 and list(empty.columns) == list(concat_schedules([]).columns)

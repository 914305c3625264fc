"""The draft's KPIs (experiments.analysis.bmwg) on small hand-made tables, each number
checked by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments.analysis.bmwg import derived, fabric, latency, throughput
from topologies.scale import Scale

MS = 1_000_000  # ns


def requests_table() -> pd.DataFrame:
    """Three requests: one disaggregated (prefill 100 ms, KV 20 ms after it), one
    colocated (no transfer), one unserved."""
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "arrival_ns": [0, 0, 0],
            "prefill_end_ns": [100 * MS, 40 * MS, -1],
            "ttft_ms": [150.0, 50.0, math.nan],
            "e2e_ms": [400.0, 300.0, math.nan],
            "kv_transfer_ms": [25.0, math.nan, math.nan],
            "kv_exposed_ms": [20.0, math.nan, math.nan],
            "input_tokens": [1000, 500, 800],
            "output_tokens": [10, 20, 30],
            "served": [True, True, False],
            "error": [None, None, "timeout"],
            "evicted": [0, 1, 0],
        }
    )


def flows_table() -> pd.DataFrame:
    """Two KV messages from h0 (1 MB in 1 s each, back to back), one failed KV message,
    one probe."""
    return pd.DataFrame(
        {
            "kind": ["kv_transfer", "kv_transfer", "kv_transfer", "probe"],
            "src": ["h0", "h0", "h1", "h2"],
            "dst": ["h4", "h4", "h5", "h6"],
            "bytes": [1_000_000, 1_000_000, 5_000_000, 100],
            "t_sched_ns": [0, 1000 * MS, 0, 0],
            "t_start_ns": [0, 1000 * MS, 0, 0],
            "t_end_ns": [1000 * MS, 2000 * MS, np.nan, 1 * MS],
            "fct_ms": [1000.0, 1000.0, np.nan, 1.0],
            "ok": [True, True, False, True],
        }
    )


def test_ttft_splits_into_prefill_transfer_and_first_decode():
    parts = latency.ttft_decomposition(requests_table())
    first = parts.iloc[0]
    assert (first.t_prefill_ms, first.t_transfer_ms, first.t_decode_init_ms) == (100, 20, 30)
    assert first.fabric_fraction == pytest.approx(20 / 150)
    assert math.isnan(parts.iloc[1].t_transfer_ms)  # colocated: no fabric share
    assert len(parts) == 2  # the unserved request has no TTFT to split
    assert latency.ttft_fabric(requests_table())["max"] == 20
    assert latency.fabric_fraction(requests_table()) == pytest.approx(20 / 150)


def test_the_exposed_part_is_ttft_fabric_and_the_whole_transfer_without_it():
    older = requests_table().drop(columns="kv_exposed_ms")  # a run before the column
    assert latency.ttft_decomposition(older).iloc[0].t_transfer_ms == 25


def test_latency_stats_carry_p95_and_the_tail_spread():
    stats = latency.draft_stats(np.arange(1, 101, dtype=float))
    assert stats["p95"] == pytest.approx(95.05) and stats["p50"] == pytest.approx(50.5)
    assert latency.tail_spread(stats) == pytest.approx(99.01 - 50.5)
    assert latency.ttft(requests_table())["count"] == 2
    assert latency.e2e_latency(requests_table())["max"] == 400


def test_itl_and_its_stalls():
    tokens = pd.DataFrame({"itl_ms": [np.nan, 10.0, 20.0, 150.0, 101.0, 100.0]})
    assert latency.itl(tokens)["count"] == 5
    assert latency.itl_stalls(tokens) == 2  # strictly above 100 ms


def test_itl_fabric_is_the_ep_step_or_the_tp_all_reduce():
    steps = pd.DataFrame(
        {
            "kind": ["alltoall"] * 4,
            "tenant": ["ep"] * 4,
            "step": [0, 0, 1, 1],
            "bytes": [10] * 4,
            "t_sched_ns": [0, 0, 100 * MS, 100 * MS],
            "t_start_ns": [0, 0, 100 * MS, 100 * MS],
            "t_end_ns": [3 * MS, 5 * MS, 104 * MS, 102 * MS],
            "ok": [True] * 4,
        }
    )
    assert latency.itl_fabric(steps)["mean"] == pytest.approx(4.5)  # steps of 5 and 4 ms
    collective = steps.assign(kind="collective").drop(columns="step")
    assert latency.itl_fabric(collective)["max"] == pytest.approx(5.0)


def test_tps_and_inference_goodput():
    req = requests_table()
    tokens = pd.DataFrame({"itl_ms": [np.nan] * 30})
    assert throughput.tps_input(req, 10.0) == 150  # prefilled: 1000 + 500 tokens
    assert throughput.tps_output(tokens, 10.0) == 3
    assert throughput.tps_per_gpu(tokens, 10.0, decode_gpus=3) == 1
    # only request 0 is served without error or eviction
    assert throughput.inference_goodput(req, 10.0) == 1
    assert throughput.eviction_rate(req, 10.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        throughput.tps_output(tokens, 0)


def test_fabric_goodput_and_kv_bandwidth_are_real_equivalent():
    scale = Scale(1e-4)
    flows = flows_table()
    # 2 MB delivered over 2 s = 8 Mbit/s emulated = 80 Gbit/s real; probes never count
    assert throughput.fabric_goodput_gbps(flows, scale) == pytest.approx(80.0)
    assert throughput.kv_bw_gbps(flows, scale) == pytest.approx(80.0)
    kv = throughput.kv_xfer(flows, scale)
    assert kv["latency_ms"]["count"] == 2 and kv["latency_ms"]["p50"] == 1000
    assert kv["bandwidth_gbps"]["per_port"] == {"h0": pytest.approx(80.0), "h1": None}
    assert throughput.fabric_goodput_gbps(flows[flows["kind"] == "probe"], scale) is None
    # 5.3's KV messages are incast rows (bases.message): KV_BW counts them as KV_xfer does
    messages = flows.assign(kind=flows["kind"].replace({"kv_transfer": "incast"}))
    assert throughput.kv_bw_gbps(messages, scale) == pytest.approx(80.0)


def test_ep_alltoall_bandwidth_and_busbw():
    steps = pd.DataFrame(
        {
            "kind": ["alltoall"] * 2,
            "tenant": ["ep"] * 2,
            "step": [0, 0],
            "bytes": [500_000, 500_000],
            "t_sched_ns": [0, 0],
            "t_start_ns": [0, 0],
            "t_end_ns": [1000 * MS, 1000 * MS],
            "ok": [True, True],
        }
    )
    ep = throughput.ep_alltoall(steps, Scale(1e-4), ranks=2)
    assert ep["latency_ms"]["p50"] == 1000
    assert ep["bandwidth_gbps"] == pytest.approx(80.0)  # 10 GB real in 1 s
    assert ep["busbw_gbps"] == pytest.approx(40.0)  # × (n − 1)/n at n = 2
    assert throughput.bus_bandwidth_gbps(1e9, 1.0, 4) == pytest.approx(6.0)


def test_s_kv_and_t_dispatch_follow_the_formulas():
    # Appendix F: 70B (L 80, H_kv 8, D 128), 4096 tokens, FP16 → 1,342,177,280 bytes
    assert throughput.s_kv_bytes(80, 8, 128, 4096, 2) == 1_342_177_280
    # CFG-A by the formula is 128 KiB per token (Table 9's 0.25 GB at 4K is half of it)
    assert throughput.s_kv_bytes(32, 8, 128, 1, 2) == 128 << 10
    # M3 (k 2, H 7168), B 128, N 96, BF16: 38.2 KB per pair, not Table 7's 14 MB
    assert throughput.t_dispatch_bytes(128, 2, 7168, 2, 96) == pytest.approx(38229.33, rel=1e-6)


def test_fabric_fct_times_only_delivered_kv_flows():
    stats = fabric.fabric_fct(flows_table())
    assert stats["count"] == 2 and stats["max"] == 1000


def test_buffer_utilization_is_the_peak_backlog_over_the_buffer():
    queues = pd.DataFrame(
        {
            "t_ns": [0, 10 * MS, 20 * MS, 0, 10 * MS],
            "node": ["leaf0", "leaf0", "leaf0", "leaf1", "leaf1"],
            "port": [1, 1, 1, 1, 1],
            "backlog_pkts": [0, 32, 8, 0, 16],
            "backlog_bytes": [0, 48000, 12000, 0, 24000],
            "drops": [0, 0, 0, 0, 0],
            "sent_bytes": [0, 100, 200, 0, 100],
        }
    )
    util = fabric.buffer_utilization(queues, buffer_pkts=64)
    assert util["peak_pct"] == 50 and util["by_port"]["leaf1:1"] == 25


def links_table() -> pd.DataFrame:
    """One port sending 1.25 MB a second (10 Mbit/s), then 2.5 MB (20 Mbit/s); 999,000
    packets sent and 1,000 dropped over the two seconds."""
    return pd.DataFrame(
        {
            "t_ns": [0, 1000 * MS, 2000 * MS],
            "node": ["leaf0"] * 3,
            "port": ["1"] * 3,
            "tx_bytes": [0, 1_250_000, 3_750_000],
            "tx_packets": [0, 499_000, 999_000],
            "tx_dropped": [0, 0, 1000],
        }
    )


def test_link_utilization_mean_tail_and_peak():
    util = fabric.link_utilization(links_table(), capacity_mbps=20.0)
    row = util.iloc[0]
    assert (row.mean_pct, row.peak_pct) == (75.0, 100.0)
    assert 95 <= row.p95_pct <= row.p99_pct <= 100
    assert fabric.link_utilization(links_table(), {"leaf9:1": 20.0}).empty


def test_drop_rate_is_per_million_packets_offered():
    assert fabric.drop_rate_ppm(links_table()) == pytest.approx(1000.0)
    assert fabric.drop_rate_ppm(links_table().iloc[:1]) is None


def test_balance_jfi_mmr_and_max_min():
    assert fabric.jfi([5, 5, 5, 5]) == 1.0
    assert fabric.jfi([1, 0]) == 0.5
    assert fabric.mmr([1, 1, 4]) == 2.0  # max ÷ mean, as [TERMINOLOGY] defines MMR
    assert fabric.max_min_ratio([1, 1, 4]) == 4.0
    assert fabric.max_min_ratio([0, 4]) is None and fabric.mmr([0, 0]) is None


def test_peak_concurrent_kv_flows():
    flows = flows_table()  # the two h0 messages only touch at one instant
    assert fabric.peak_concurrent_flows(flows) == 1
    overlapping = flows.assign(t_start_ns=[0, 500 * MS, 0, 0])
    assert fabric.peak_concurrent_flows(overlapping) == 2


def test_penalties_and_ratios():
    assert derived.contention_penalty(30.0, 10.0) == 3.0
    assert derived.interference_penalty_pct(12.0, 10.0) == pytest.approx(20.0)
    assert derived.contention_penalty(None, 10.0) is None
    assert derived.ep_scaling_efficiency(1.0, 2.0, 32) == 2.0  # can exceed 1, as written
    assert derived.coefficient_of_variation([1, 1, 1]) == 0


def test_inflection_and_degradation_under_background_load():
    p99 = {0.0: 100.0, 0.25: 105.0, 0.5: 109.0, 0.75: 150.0, 0.9: 400.0}
    assert derived.inflection_point(p99) == 0.75
    assert derived.degradation_factors(p99) == {0.5: 1.09, 0.75: 1.5, 0.9: 4.0}
    assert derived.inflection_point({0.0: 1.0, 0.5: 1.05}) is None


def test_scale_limit_is_the_first_size_ten_percent_worse():
    kpis = {
        4: {"ttft_p99": 100.0, "tps": 1000.0},
        8: {"ttft_p99": 108.0, "tps": 950.0},
        16: {"ttft_p99": 109.0, "tps": 880.0},  # throughput 12% lower
        32: {"ttft_p99": 200.0, "tps": 800.0},
    }
    assert derived.scale_limit(kpis, higher_is_better=["tps"]) == 16
    assert derived.scale_limit({4: {"x": 1.0}, 8: {"x": 1.05}}) is None


def test_convergence_time_after_a_class_joins():
    t = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    rate = [80, 80, 60, 40, 53, 49, 50, 50, 50, 50]
    assert derived.convergence_time_s(t, rate, start_s=2) == 3  # within 5% of 50 from t = 5
    assert derived.convergence_time_s(t, rate, start_s=20) is None


def test_slo_bounded_rate_and_pareto_xpyd():
    by_rate = {1.0: (100.0, 20.0), 2.0: (300.0, 40.0), 4.0: (600.0, 45.0)}
    assert derived.slo_bounded_rate(by_rate) == 2.0
    ratios = {
        "2P6D": (400.0, 30.0, 900.0),
        "4P4D": (200.0, 60.0, 1500.0),
        "6P2D": (100.0, 20.0, 700.0),
    }
    assert derived.pareto_xpyd(ratios) == "2P6D"
    assert derived.pareto_xpyd({"1P7D": (900.0, 10.0, 1.0)}) is None


def test_a_counter_increase_is_counted_from_the_sample_before_the_measured_part():
    """8.1's smoke traffic lasted 77 ms between two 10 Hz link samples: its drops are
    the counters' increase from the sample before it to the one after, not 'none'."""
    from experiments.analysis.bmwg.fabric import drop_rate_ppm
    from experiments.analysis.bmwg.window import measured

    links = pd.DataFrame(
        {
            "t_ns": [0, 100 * MS, 200 * MS],
            "node": "leaf0",
            "port": 1,
            "tx_packets": [0, 0, 990],
            "tx_dropped": [0, 0, 10],
        }
    )
    start = 117 * MS  # the traffic: 117 to 194 ms
    kept = measured(links, "links", start, warmup_s=0.0)
    assert list(kept["t_ns"]) == [100 * MS, 200 * MS]
    assert drop_rate_ppm(kept) == pytest.approx(10_000)  # 10 of 1,000 offered
    tokens = links[["t_ns"]]  # a table of events, not counters: from the start
    assert list(measured(tokens, "tokens", start, 0.0)["t_ns"]) == [200 * MS]


def test_soak_trend_flags_monotonic_growth():
    growing = derived.trend([10.0, 11.0, 12.0, 14.0])
    assert growing["monotonic_growth"] and growing["slope"] > 0
    assert growing["change"] == pytest.approx(0.4)
    assert not derived.trend([10.0, 9.0, 10.0])["monotonic_growth"]


def test_warm_up_rows_are_left_out_and_soaks_cut_into_windows():
    from experiments.analysis.bmwg.window import measured, windows

    tokens = pd.DataFrame({"t_ns": [5 * MS, 1500 * MS, 2500 * MS, 3100 * MS], "itl_ms": [1.0] * 4})
    start = 0
    assert list(measured(tokens, "tokens", start, warmup_s=1.0)["t_ns"]) == [
        1500 * MS,
        2500 * MS,
        3100 * MS,
    ]
    cut = [(t, len(rows)) for t, rows in windows(tokens, "tokens", start, window_s=2.0)]
    assert cut == [(0.0, 2), (2.0, 2)]

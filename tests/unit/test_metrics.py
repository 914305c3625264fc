"""Every metric on a small synthetic table whose answer is computed by hand in the test."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from experiments.analysis.metrics import (
    LATENCY_KEYS,
    alltoall_step_ms,
    counter_increase,
    fct_by_kind,
    goodput_mbps,
    hottest_ports,
    incast_goodput,
    jain_fairness,
    json_records,
    latency_stats,
    probe_owd_ms,
    queue_occupancy,
    schedule_lateness_ms,
    serving_metrics,
    slowdown,
)

MS = 1_000_000  # ns per ms
NAN = float("nan")


def flows_table(rows: list[dict]) -> pd.DataFrame:
    """A flows.parquet-shaped table; unspecified fields take harmless defaults."""
    base = {
        "flow_id": 0,
        "kind": "background",
        "tenant": "t0",
        "src": "h1",
        "dst": "h2",
        "bytes": 0,
        "dscp": 0,
        "t_sched_ns": 0.0,
        "t_start_ns": 0.0,
        "t_end_ns": 0.0,
        "fct_ms": NAN,
        "ok": True,
        "error": None,
    }
    return pd.DataFrame([base | {"flow_id": i} | r for i, r in enumerate(rows)])


# --- latency_stats, jain, slowdown -----------------------------------------------------------


def test_latency_stats_interpolates_percentiles():
    s = latency_stats([4.0, 1.0, 3.0, 2.0])
    # sorted 1,2,3,4; rank q*(n-1): p50 -> 1.5 -> 2.5; p90 -> 2.7 -> 3.7; p99 -> 2.97 -> 3.97
    assert s["count"] == 4 and s["mean"] == 2.5 and s["max"] == 4.0
    assert s["p50"] == pytest.approx(2.5)
    assert s["p90"] == pytest.approx(3.7)
    assert s["p99"] == pytest.approx(3.97)
    assert s["p999"] == pytest.approx(3.997)
    assert tuple(s) == LATENCY_KEYS


def test_latency_stats_empty_and_nan_are_json_safe():
    empty = latency_stats([])
    assert empty == {"count": 0} | {k: None for k in LATENCY_KEYS[1:]}
    assert latency_stats(None)["count"] == 0
    s = latency_stats(pd.Series([1.0, NAN, 3.0, float("inf")]))
    assert s["count"] == 2 and s["mean"] == 2.0
    json.dumps(empty, allow_nan=False)  # None, not NaN: strict JSON
    json.dumps(s, allow_nan=False)


def test_jain_fairness():
    assert jain_fairness([1, 1, 1, 1]) == 1.0
    assert jain_fairness([1, 0, 0, 0]) == 0.25
    assert jain_fairness([1, 2]) == pytest.approx(9 / 10)  # (1+2)^2 / (2 * (1+4))
    assert jain_fairness([]) is None
    assert jain_fairness([0, 0]) is None
    with pytest.raises(ValueError):
        jain_fairness([1, -1])


def test_slowdown_from_values_and_from_stats():
    assert slowdown([2.0] * 10, [1.0] * 10) == 2.0
    assert slowdown({"p99": 30.0}, {"p99": 10.0}) == 3.0
    assert slowdown({"p50": 30.0, "p99": 40.0}, {"p50": 10.0}, stat="p50") == 3.0
    assert slowdown([5.0], []) is None
    assert slowdown([5.0], [0.0]) is None
    with pytest.raises(ValueError):
        slowdown([1.0], [1.0], stat="p75")


# --- flows ----------------------------------------------------------------------------------


def test_fct_by_kind_counts_failures_and_fills_missing_fct():
    flows = flows_table(
        [
            {"kind": "kv_transfer", "fct_ms": 10.0},
            {"kind": "kv_transfer", "fct_ms": 20.0},
            {"kind": "token", "fct_ms": 1.0},
            {"kind": "token", "fct_ms": 500.0, "ok": False, "error": "timeout"},
            # fct_ms missing: derived from t_end - t_start = 3 ms
            {"kind": "incast", "t_start_ns": 1 * MS, "t_end_ns": 4 * MS},
        ]
    )
    r = fct_by_kind(flows)
    assert r["all"]["count"] == 4
    assert r["all"]["mean"] == pytest.approx((10 + 20 + 1 + 3) / 4)
    assert r["all"]["max"] == 20.0
    assert r["by_kind"]["kv_transfer"]["mean"] == 15.0
    assert r["by_kind"]["token"]["count"] == 1 and r["by_kind"]["token"]["max"] == 1.0
    assert r["by_kind"]["incast"]["mean"] == pytest.approx(3.0)
    assert r["failed"] == 1 and r["failed_by_kind"] == {"token": 1}


def test_schedule_lateness():
    flows = flows_table(
        [
            {"t_sched_ns": 0, "t_start_ns": 1 * MS},
            {"t_sched_ns": 10 * MS, "t_start_ns": 13 * MS, "ok": False},
        ]
    )
    s = schedule_lateness_ms(flows)
    assert s["count"] == 2 and s["mean"] == pytest.approx(2.0) and s["max"] == pytest.approx(3.0)


def test_incast_goodput_three_rounds():
    def sender(rnd, sched, end, nbytes, ok=True, start=None):
        return {
            "kind": "incast",
            "round": rnd,
            "bytes": nbytes,
            "t_sched_ns": sched,
            "t_start_ns": sched if start is None else start,
            "t_end_ns": end,
            "ok": ok,
        }

    flows = flows_table(
        [
            # round 0: 2 x 1 MB, 0 -> 20 ms: 2e6 B * 8 / 0.020 s = 800 Mbit/s
            sender(0, 0, 10 * MS, 1_000_000),
            sender(0, 0, 20 * MS, 1_000_000),
            # round 1: no schedule recorded -> t_start; 2 x 250 kB, 100 -> 110 ms: 400 Mbit/s
            sender(1, NAN, 105 * MS, 250_000, start=100 * MS),
            sender(1, NAN, 110 * MS, 250_000, start=101 * MS),
            # round 2: one sender failed (its bytes do not count); 1 MB, 200 -> 240 ms: 200
            sender(2, 200 * MS, 240 * MS, 1_000_000),
            sender(2, 200 * MS, NAN, 1_000_000, ok=False),
            {"kind": "background", "bytes": 10**9, "t_end_ns": 1e9},  # ignored
        ]
    )
    table, stats = incast_goodput(flows)
    assert list(table["round"]) == [0, 1, 2]
    assert list(table["senders"]) == [2, 2, 2]
    assert list(table["failed"]) == [0, 0, 1]
    assert list(table["bytes"]) == [2_000_000, 500_000, 1_000_000]
    assert list(table["round_ms"]) == pytest.approx([20.0, 10.0, 40.0])
    assert list(table["goodput_mbps"]) == pytest.approx([800.0, 400.0, 200.0])
    assert stats["rounds"] == 3
    assert stats["round_ms"]["mean"] == pytest.approx(70 / 3)
    assert stats["goodput_mbps"]["mean"] == pytest.approx(1400 / 3)
    assert stats["goodput_mbps"]["min"] == pytest.approx(200.0)
    assert stats["goodput_mbps"]["p50"] == pytest.approx(400.0)


def test_incast_goodput_needs_round_column():
    with pytest.raises(ValueError, match="round"):
        incast_goodput(flows_table([{"kind": "incast"}]))


def test_alltoall_step_spans_dispatch_and_combine():
    def a2a(tenant, step, sched, end, ok=True):
        return {
            "kind": "alltoall",
            "tenant": tenant,
            "step": step,
            "t_sched_ns": sched,
            "t_start_ns": sched,
            "t_end_ns": end,
            "ok": ok,
            "bytes": 100,
        }

    flows = flows_table(
        [
            # tenant A step 0: dispatch 0->2, 0->3, combine 3->5, 3->6: step = 6 ms
            a2a("A", 0, 0, 2 * MS),
            a2a("A", 0, 0, 3 * MS),
            a2a("A", 0, 3 * MS, 5 * MS),
            a2a("A", 0, 3 * MS, 6 * MS),
            # tenant A step 1: 10 -> 14 ms = 4 ms
            a2a("A", 1, 10 * MS, 12 * MS),
            a2a("A", 1, 12 * MS, 14 * MS),
            # tenant B step 0 has a failed flow: listed, not in the stats
            a2a("B", 0, 0, 1 * MS),
            a2a("B", 0, 0, NAN, ok=False),
        ]
    )
    table, per_tenant = alltoall_step_ms(flows)
    assert len(table) == 3
    a = table[table["tenant"] == "A"]
    assert list(a["step_ms"]) == pytest.approx([6.0, 4.0])
    assert list(a["flows"]) == [4, 2]
    assert per_tenant["A"]["count"] == 2 and per_tenant["A"]["mean"] == pytest.approx(5.0)
    assert "B" not in per_tenant
    assert int(table.loc[table["tenant"] == "B", "failed"].iloc[0]) == 1


def test_probe_owd_per_pair():
    flows = flows_table(
        [
            {"kind": "probe", "src": "h1", "dst": "h2", "t_start_ns": 0, "t_end_ns": 1 * MS},
            {"kind": "probe", "src": "h1", "dst": "h2", "t_start_ns": 5 * MS, "t_end_ns": 8 * MS},
            {"kind": "probe", "src": "h2", "dst": "h1", "t_start_ns": 0, "t_end_ns": 2 * MS},
            {"kind": "probe", "src": "h2", "dst": "h1", "t_end_ns": 99 * MS, "ok": False},
            {"kind": "token", "src": "h3", "dst": "h4", "t_end_ns": 7 * MS},
        ]
    )
    r = probe_owd_ms(flows)
    assert set(r) == {"h1->h2", "h2->h1"}
    assert r["h1->h2"]["count"] == 2 and r["h1->h2"]["mean"] == pytest.approx(2.0)
    assert r["h2->h1"]["count"] == 1 and r["h2->h1"]["max"] == pytest.approx(2.0)


def test_goodput_mbps():
    flows = flows_table(
        [
            {"bytes": 1_000_000, "t_end_ns": 10 * MS},
            {"bytes": 1_000_000, "t_sched_ns": 5 * MS, "t_end_ns": 20 * MS},
            {"bytes": 5_000_000, "t_end_ns": 90 * MS, "ok": False},
        ]
    )
    # 2 MB delivered from t=0 to t=20 ms: 2e6 * 8 / 0.02 / 1e6 = 800 Mbit/s
    assert goodput_mbps(flows) == pytest.approx(800.0)
    assert goodput_mbps(flows_table([{"ok": False}])) is None


# --- serving --------------------------------------------------------------------------------


def requests_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3],
            "ttft_ms": [100.0, 300.0, 150.0, NAN],  # request 3 was never served
            "tpot_ms": [20.0, 50.0, NAN, NAN],  # request 2 produced a single token
            "e2e_ms": [500.0, 800.0, 150.0, NAN],
            "kv_transfer_ms": [25.0, 60.0, 30.0, NAN],
        }
    )


def test_serving_metrics_slo_goodput_and_share():
    tokens = pd.DataFrame({"request_id": [0, 0, 0], "token_index": [0, 1, 2], "t_ns": [0, 1, 2]})
    tokens["itl_ms"] = [NAN, 10.0, 30.0]  # the first token has no inter-token gap
    m = serving_metrics(requests_table(), tokens, slo_ttft_ms=200, slo_tpot_ms=40, duration_s=2.0)
    assert (m["requests"], m["served"], m["unserved"]) == (4, 3, 1)
    assert m["ttft_ms"]["count"] == 3 and m["ttft_ms"]["mean"] == pytest.approx(550 / 3)
    assert m["tpot_ms"]["count"] == 2 and m["tpot_ms"]["mean"] == pytest.approx(35.0)
    assert m["itl_ms"]["count"] == 2 and m["itl_ms"]["mean"] == pytest.approx(20.0)
    assert m["e2e_ms"]["max"] == 800.0
    # TTFT <= 200: requests 0 and 2 -> 2/4; TPOT <= 40: 0 and 2 (single token) -> 2/4
    assert m["slo"]["ttft_attainment"] == 0.5
    assert m["slo"]["tpot_attainment"] == 0.5
    assert m["slo"]["attainment"] == 0.5
    assert m["goodput_rps"] == pytest.approx(2 / 2.0)
    assert m["throughput_rps"] == pytest.approx(3 / 2.0)
    share = m["kv_transfer_share_of_ttft"]
    assert share["aggregate"] == pytest.approx((25 + 60 + 30) / (100 + 300 + 150))
    assert share["per_request"]["mean"] == pytest.approx((0.25 + 0.2 + 0.2) / 3)
    assert share["per_request"]["min"] == pytest.approx(0.2)
    json.dumps(m, allow_nan=False)


def test_serving_metrics_without_requests():
    empty = requests_table().iloc[0:0]
    m = serving_metrics(empty, None, slo_ttft_ms=200, slo_tpot_ms=40, duration_s=1.0)
    assert m["requests"] == 0 and m["goodput_rps"] == 0.0
    assert m["slo"]["attainment"] is None and m["ttft_ms"]["count"] == 0
    assert m["kv_transfer_share_of_ttft"]["aggregate"] is None


# --- queues ---------------------------------------------------------------------------------


def queue_trace() -> pd.DataFrame:
    rows = [
        # s1/1: backlog 0,10,5,20,0 at 0,10,20,40,50 ms -> held for 10,10,20,10 ms
        ("s1", 1, 0, 0, 0, 0),
        ("s1", 1, 10, 10, 2, 10_000),
        ("s1", 1, 20, 5, 2, 22_500),
        ("s1", 1, 40, 20, 5, 47_500),
        ("s1", 1, 50, 0, 1, 50_000),  # drops counter restarted (5 -> 1)
        # s1/2, recorded out of order: backlog 2 for 20 ms, then a final sample of 4
        ("s1", 2, 20, 4, 0, 100),
        ("s1", 2, 0, 2, 0, 0),
        # s2/1: a single sample
        ("s2", 1, 0, 3, 0, 0),
    ]
    df = pd.DataFrame(rows, columns=["node", "port", "t_ms", "backlog_pkts", "drops", "sent_bytes"])
    df["t_ns"] = df.pop("t_ms") * MS
    df["backlog_bytes"] = df["backlog_pkts"] * 1500
    return df


def test_queue_occupancy_time_weighted():
    occ = queue_occupancy(queue_trace(), threshold_pkts=8).set_index(["node", "port"])
    p = occ.loc[("s1", 1)]
    assert p["samples"] == 5 and p["span_s"] == pytest.approx(0.05)
    # (0*10 + 10*10 + 5*20 + 20*10) / 50 = 8
    assert p["mean_pkts"] == pytest.approx(8.0)
    # weights by value: 0 -> 10 ms, 5 -> 20, 10 -> 10, 20 -> 10; 99% of 50 ms = 49.5 -> 20
    assert p["p99_pkts"] == 20.0
    assert p["max_pkts"] == 20.0 and p["max_bytes"] == 30_000
    # above 8 packets: the 10 (10 ms) and the 20 (10 ms) of 50 ms
    assert p["frac_above"] == pytest.approx(0.4)
    # increments 2, 0, 3, then a restart to 1 counts as 1: 6
    assert p["drops"] == 6
    # 50,000 B in 50 ms = 8 Mbit/s; backlogged at both ends: 10-20 ms (12,500 B) and
    # 20-40 ms (25,000 B): 37,500 B in 30 ms = 10 Mbit/s
    assert p["sent_bytes"] == 50_000
    assert p["dequeue_mbps"] == pytest.approx(8.0)
    assert p["busy_dequeue_mbps"] == pytest.approx(10.0)

    q = occ.loc[("s1", 2)]
    assert q["mean_pkts"] == pytest.approx(2.0) and q["max_pkts"] == 4.0
    assert q["dequeue_mbps"] == pytest.approx(100 * 8 / 0.02 / 1e6)

    single = occ.loc[("s2", 1)]
    assert single["mean_pkts"] == 3.0 and single["frac_above"] == 0.0
    assert single["span_s"] == 0.0
    assert math.isnan(single["dequeue_mbps"]) and math.isnan(single["busy_dequeue_mbps"])


def test_queue_table_to_json_records():
    occ = queue_occupancy(queue_trace(), threshold_pkts=8)
    recs = json_records(occ)
    json.dumps(recs, allow_nan=False)
    last = recs[-1]
    assert (last["node"], last["port"], last["dequeue_mbps"]) == ("s2", 1, None)
    assert isinstance(last["samples"], int) and recs[0]["drops"] == 6


def test_counter_increase_handles_restart():
    assert list(counter_increase([0, 5, 7, 2, 4])) == [5, 2, 2, 2]


def test_hottest_ports_orders_by_mean_backlog():
    hot = hottest_ports(queue_trace(), n=2)
    assert list(zip(hot["node"], hot["port"], strict=True)) == [("s1", 1), ("s2", 1)]
    # threshold 0: fraction of time non-empty: 0 ms at 0, then 40 of 50 ms
    assert hot["frac_above"].iloc[0] == pytest.approx(0.8)
    assert len(hottest_ports(queue_trace(), n=10)) == 3
    assert not math.isnan(hot["mean_pkts"].iloc[1])
    assert np.isfinite(hot["max_pkts"]).all()

"""summarize() on small synthetic tables whose answers are computed by hand."""

import json

import pandas as pd
import pytest

from experiments.analysis.summary import summarize
from experiments.spec.config import Slo
from tests.unit.run_configs import serving_config, spine_leaf_config

MS = 1_000_000  # ns per ms
NAN = float("nan")
SPEC = spine_leaf_config()


def flows_table(rows: list[dict]) -> pd.DataFrame:
    base = {
        "flow_id": 0,
        "kind": "background",
        "tenant": "t0",
        "src": "h1",
        "dst": "h2",
        "bytes": 0,
        "dscp": 0,
        "t_sched_ns": 0,
        "t_start_ns": 0,
        "t_end_ns": 0,
        "fct_ms": NAN,
        "ok": True,
        "error": None,
        "round": -1,
        "step": -1,
    }
    return pd.DataFrame([base | {"flow_id": i} | r for i, r in enumerate(rows)])


def strict(obj) -> dict:
    """Round trip through strict JSON: no NaN, no numpy scalars."""
    return json.loads(json.dumps(obj, allow_nan=False))


def test_fct_counts_errors_and_lateness():
    flows = flows_table(
        [
            {"t_sched_ns": 0, "t_start_ns": 1 * MS, "t_end_ns": 3 * MS, "bytes": 1000},
            {"t_sched_ns": 0, "t_start_ns": 0, "t_end_ns": 5 * MS, "bytes": 1000},
            {"t_sched_ns": 0, "t_start_ns": 3 * MS, "t_end_ns": 4 * MS, "bytes": 1000},
            {"ok": False, "error": "timeout", "t_end_ns": None, "kind": "kv_transfer"},
        ]
    )
    m = summarize(flows, None, None, None, SPEC)
    assert strict(m) == m
    # completed fcts 2, 5, 1 ms -> sorted 1, 2, 5: p50 = 2, max 5, mean 8/3
    assert m["fct_ms"]["count"] == 3 and m["fct_ms"]["p50"] == 2.0 and m["fct_ms"]["max"] == 5.0
    assert m["fct_ms"]["mean"] == pytest.approx(8 / 3)
    assert m["fct_ms_by_kind"]["background"]["p50"] == 2.0
    assert m["fct_ms_by_kind"]["kv_transfer"]["count"] == 0
    assert m["flows"]["total"] == 4 and m["flows"]["ok"] == 3 and m["flows"]["failed"] == 1
    assert m["flows"]["errors"] == {"timeout": 1}
    assert m["flows"]["bytes"] == 3000 and m["flows"]["bytes_real"] == 30_000_000
    # lateness 1, 0, 3, 0 ms -> p50 0.5, max 3
    assert m["lateness_ms"]["p50"] == 0.5 and m["lateness_ms"]["max"] == 3.0
    # goodput: 3000 B in 5 ms = 4.8 Mbit/s emulated; at 1e-4 that is 48 Gbit/s real
    assert m["goodput_mbps"] == pytest.approx(4.8)
    assert m["goodput_real_gbps"] == pytest.approx(48.0)
    assert "incast" not in m and "ttft_ms" not in m and "queue_pkts" not in m
    assert "jain_fairness" not in m  # one tenant


def test_incast_two_rounds_goodput():
    rows = []
    for rnd, (t0, ends) in enumerate([(0, (2, 4)), (100, (8, 10))]):
        for i, end in enumerate(ends):
            rows.append(
                {
                    "kind": "incast",
                    "src": f"h{i + 1}",
                    "dst": "h0",
                    "bytes": 5000,
                    "t_sched_ns": t0 * MS,
                    "t_start_ns": t0 * MS,
                    "t_end_ns": (t0 + end) * MS,
                    "round": rnd,
                }
            )
    m = summarize(flows_table(rows), None, None, None, SPEC)
    inc = m["incast"]
    # round 0: 10,000 B in 4 ms = 20 Mbit/s; round 1: 10,000 B in 10 ms = 8 Mbit/s
    assert inc["rounds"] == 2 and inc["failed_rounds"] == 0
    assert inc["round_ms"]["p50"] == 7.0 and inc["round_ms"]["max"] == 10.0
    assert inc["goodput_mbps"]["min"] == pytest.approx(8.0)
    assert inc["goodput_mbps"]["max"] == pytest.approx(20.0)
    assert inc["goodput_real_gbps"]["min"] == pytest.approx(80.0)  # 8 Mbit/s / 1e-4
    assert inc["by_senders"]["2"]["rounds"] == 2
    assert [r["goodput_mbps"] for r in inc["per_round"]] == pytest.approx([20.0, 8.0])
    # the per-round mean (14 Mbit/s) is not the aggregate: 20,000 B in 14 ms of rounds
    assert inc["goodput_mbps"]["mean"] == pytest.approx(14.0)
    assert inc["aggregate_goodput_mbps"] == pytest.approx(20_000 * 8 / 14e-3 / 1e6)
    assert inc["aggregate_goodput_real_gbps"] == pytest.approx(20_000 * 8 / 14e-3 / 1e6 / 1e-1)
    json.dumps(m, allow_nan=False)


def test_tenants_fairness_alltoall_and_probes():
    flows = flows_table(
        [
            {"tenant": "a", "bytes": 1000, "t_end_ns": 1 * MS},
            {"tenant": "b", "bytes": 1000, "t_end_ns": 2 * MS},
            {"tenant": "b", "kind": "alltoall", "step": 0, "t_end_ns": 3 * MS},
            {"tenant": "b", "kind": "alltoall", "step": 0, "t_end_ns": 6 * MS},
            {"kind": "probe", "src": "h1", "dst": "h3", "t_start_ns": MS, "t_end_ns": 3 * MS},
        ]
    )
    m = summarize(flows, None, None, None, SPEC)
    # a: 1000 B in 1 ms = 8 Mbit/s; b: 1000 B in 6 ms = 4/3 Mbit/s
    assert m["tenants"]["a"]["goodput_mbps"] == pytest.approx(8.0)
    assert m["tenants"]["b"]["goodput_mbps"] == pytest.approx(4 / 3)
    a, b = 8.0, 4 / 3
    assert m["jain_fairness"] == pytest.approx((a + b) ** 2 / (2 * (a * a + b * b)))
    assert m["alltoall"]["step_ms"]["b"]["max"] == 6.0
    assert m["probe"]["owd_ms"]["h1->h3"]["p50"] == 2.0
    assert "t0" not in m["tenants"]  # the probe's tenant is not payload
    json.dumps(m, allow_nan=False)


def test_queue_drops_counter_increase_and_threshold():
    queues = pd.DataFrame(
        {
            "t_ns": [0, 10 * MS, 20 * MS, 30 * MS],
            "node": "leaf0",
            "port": "eth1",
            "backlog_pkts": [0, 40, 10, 0],
            "backlog_bytes": [0, 60_000, 15_000, 0],
            "drops": [100, 102, 105, 105],  # cumulative: increases by 5
            "sent_bytes": [0, 1000, 2000, 3000],
        }
    )
    m = summarize(None, None, None, queues, SPEC)
    assert m["drops"] == {"total": 5, "ports_with_drops": 1, "by_port": {"leaf0:eth1": 5}}
    # threshold = 64 / 2 = 32 pkts; above it for the 10 ms interval starting at 40
    assert m["queue_above"]["threshold_pkts"] == 32.0
    assert m["queue_above"]["time_above_s"] == pytest.approx(0.01)
    assert m["queue_above"]["max_port"] == "leaf0:eth1"
    assert m["queue_pkts"]["all"]["max"] == 40.0
    assert m["queue_pkts"]["hottest"][0]["mean_pkts"] == pytest.approx(50 / 3)
    json.dumps(m, allow_nan=False)


def test_links_rates_emulated_and_real():
    links = pd.DataFrame(
        {
            "t_ns": [0, 10**9, 2 * 10**9],
            "node": "spine0",
            "port": "eth1",
            "tx_bytes": [0, 5_000_000, 10_000_000],
            "rx_bytes": 0,
            "tx_packets": 0,
            "rx_packets": 0,
            "tx_dropped": [0, 0, 3],
        }
    )
    m = summarize(None, None, None, None, SPEC, links=links)
    busiest = m["links"]["busiest"][0]
    assert busiest["mean_tx_mbps"] == pytest.approx(40.0)  # 10 MB in 2 s
    assert busiest["mean_tx_real_gbps"] == pytest.approx(400.0)
    assert m["links"]["tx_dropped"] == 3


def test_serving_ttft_and_slo_attainment():
    spec = serving_config(10.0, slo=Slo(ttft_ms=100.0, tpot_ms=20.0))
    requests = pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3],
            "tenant": "default",
            "arrival_ns": [0, MS, 2 * MS, 3 * MS],
            "ttft_ms": [50.0, 80.0, 150.0, NAN],  # request 3 unserved
            "tpot_ms": [10.0, 30.0, 10.0, NAN],
            "e2e_ms": [200.0, 300.0, 400.0, NAN],
            "kv_transfer_ms": [10.0, 20.0, 30.0, NAN],
        }
    )
    tokens = pd.DataFrame(
        {
            "request_id": [0, 0, 1],
            "token_index": [1, 2, 1],
            "t_ns": [1, 2, 3],
            "itl_ms": [10.0, 12.0, 30.0],
        }
    )
    m = summarize(None, requests, tokens, None, spec)
    assert m["ttft_ms"]["count"] == 3 and m["ttft_ms"]["p50"] == 80.0
    assert m["itl_ms"]["p50"] == 12.0
    slo = m["serving"]["slo"]
    # only request 0 meets both (1 misses TPOT, 2 misses TTFT, 3 unserved): 1/4
    assert slo["attainment"] == 0.25 and slo["ttft_attainment"] == 0.5
    assert m["serving"]["goodput_rps"] == pytest.approx(0.1)  # 1 good request / 10 s
    assert m["serving"]["unserved"] == 1
    json.dumps(m, allow_nan=False)


def test_empty_and_missing_tables():
    m = summarize(None, pd.DataFrame(), None, pd.DataFrame(), SPEC)
    assert m == {"scale": 1e-4}


def test_nullable_int_columns_from_the_fleet():
    """The fleet records timestamps as nullable Int64 (a flow never started has <NA>)."""
    flows = flows_table(
        [
            {"t_start_ns": 0, "t_end_ns": 2 * MS, "bytes": 10},
            {"t_start_ns": None, "t_end_ns": None, "ok": False, "error": "not sent"},
        ]
    )
    for col in ("t_sched_ns", "t_start_ns", "t_end_ns"):
        flows[col] = flows[col].astype("Int64")
    m = summarize(flows, None, None, None, SPEC)
    assert m["fct_ms"]["p50"] == 2.0 and m["flows"]["errors"] == {"not sent": 1}
    json.dumps(m, allow_nan=False)

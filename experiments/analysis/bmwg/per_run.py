"""A procedure's KPIs of one run, as numbers: each KPI name of ``KPIS`` → its columns
(``TTFT`` → ``TTFT p50 ms``, ``TTFT p99 ms``), from the run's tables after the warm-up
(``RunTables``). ``kpi_values`` is what ``kvfabric bmwg run`` writes per run; a KPI
that needs several sweep points (penalties, inflection point, scale limit, …) is
``derived_kpis``'s, over a test's points. A column is ``None`` when the run did not
measure it (no serving workload, no probe, nothing delivered).

Which loads a balance KPI (JFI, MMR, max/min) is over depends on the procedure:
``BALANCE`` (5.3: each pair's KV goodput; 8.3: each tenant's goodput; 9.4: each decode
worker's output tokens/s; otherwise the mean tx rate of each uplink of the switch that
sent the most up: ECMP's spread over its members).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.bmwg import derived, fabric, latency, throughput
from experiments.analysis.metrics import goodput_mbps
from experiments.analysis.metrics.flows import probe_owd_ms
from experiments.analysis.metrics.kv import prefix_cache_metrics
from experiments.analysis.summary import link_rates
from topologies.scale import Scale

Value = float | None
Columns = dict[str, Value]
UPLINK_KINDS = ("uplink", "spine", "rail_spine", "core", "agg")


@dataclass(frozen=True)
class RunTables:
    """One run's measured tables (after the warm-up) and what its KPIs need of its spec:
    ``seconds`` measured, the bandwidth ``scale``, the queue limit, each switch port's
    emulated capacity (``"node:port"`` → Mbit/s), the uplink ports, the decode GPUs and
    the EP group's size."""

    test: str
    seconds: float
    scale: Scale
    flows: pd.DataFrame | None = None
    requests: pd.DataFrame | None = None
    tokens: pd.DataFrame | None = None
    queues: pd.DataFrame | None = None
    links: pd.DataFrame | None = None
    buffer_pkts: float = 64.0
    capacity_mbps: Mapping[str, float] = field(default_factory=dict)
    uplinks: tuple[str, ...] = ()
    decode_gpus: int = 1
    ep_ranks: int = 0
    faults: tuple[Mapping[str, Any], ...] = ()  # the summary's ``faults`` rows


def _num(x: Any) -> Value:
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None


def _pcts(name: str, stats: Mapping[str, Any] | None, unit: str = "ms") -> Columns:
    stats = stats or {}
    return {
        f"{name} p50 {unit}": _num(stats.get("p50")),
        f"{name} p99 {unit}": _num(stats.get("p99")),
    }


def _has(table: pd.DataFrame | None) -> bool:
    return table is not None and len(table) > 0


def _kv_rows(t: RunTables) -> pd.DataFrame | None:
    if not _has(t.flows):
        return None
    kv = t.flows[t.flows["kind"].isin(throughput.KV_KINDS)]
    return kv if len(kv) else None


def balance_loads(t: RunTables) -> list[float]:
    """The loads a balance KPI is over for this run's test (``BALANCE``)."""
    how = BALANCE.get(t.test, "uplinks")
    if how == "kv_pairs" and _kv_rows(t) is not None:
        kv = _kv_rows(t)
        groups = kv.groupby(["src", "dst"])
        return [g for _, grp in groups if (g := goodput_mbps(grp)) is not None]
    if how == "tenants" and _has(t.flows):
        flows = t.flows[t.flows["kind"] != "probe"]
        return [g for _, grp in flows.groupby("tenant") if (g := goodput_mbps(grp)) is not None]
    if how == "decode_workers" and _has(t.tokens) and _has(t.requests):
        hosts = t.requests.set_index("request_id")["decode_host"]
        per = t.tokens["request_id"].map(hosts).value_counts()
        return [float(n) / t.seconds for n in per.to_numpy()]
    if not _has(t.links) or not t.uplinks:
        return []
    rates = link_rates(t.links)
    rates["key"] = rates["node"].astype(str) + ":" + rates["port"].astype(str)
    up = rates[rates["key"].isin(t.uplinks)]
    if not len(up):
        return []
    # ECMP's spread is over one switch's uplinks: those of the switch that sent most
    busiest = up.groupby("node")["tx_mbps"].mean().idxmax()
    mine = up[up["node"] == busiest]
    return [float(np.nanmean(g["tx_mbps"])) for _, g in mine.groupby("key")]


BALANCE = {"5.3": "kv_pairs", "8.3": "tenants", "9.4": "decode_workers"}


def _balance(t: RunTables, kpi: str) -> Columns:
    loads = balance_loads(t)
    fn = {"JFI": fabric.jfi, "MMR": fabric.mmr, "Max_min_ratio": fabric.max_min_ratio}[kpi]
    return {kpi: _num(fn(loads)) if loads else None}


def _link_util(t: RunTables) -> Columns:
    if not _has(t.links) or not t.capacity_mbps:
        return {"Link_utilization mean %": None, "Link_utilization peak %": None}
    table = fabric.link_utilization(t.links, t.capacity_mbps)
    if not len(table):
        return {"Link_utilization mean %": None, "Link_utilization peak %": None}
    return {
        "Link_utilization mean %": _num(table["mean_pct"].max()),
        "Link_utilization peak %": _num(table["peak_pct"].max()),
    }


def _ttft_parts(t: RunTables) -> Columns:
    parts = latency.ttft_decomposition(t.requests)
    return {
        f"{c[2:-3]} mean ms": _num(parts[c].mean())
        for c in ("t_prefill_ms", "t_transfer_ms", "t_decode_init_ms")
    }


def _serving(fn: Callable[[RunTables], Columns], names: tuple[str, ...]) -> Callable:
    """``fn`` when the run served requests; its columns as ``None`` otherwise."""

    def guarded(t: RunTables) -> Columns:
        if not _has(t.requests):
            return dict.fromkeys(names)
        return fn(t)

    return guarded


def _kv_latency(t: RunTables) -> Columns:
    kv = _kv_rows(t)
    return _pcts(
        "KV_xfer_latency", None if kv is None else throughput.kv_xfer(kv, t.scale)["latency_ms"]
    )


def _kv_bandwidth(t: RunTables) -> Columns:
    kv = _kv_rows(t)
    bw = None if kv is None else throughput.kv_xfer(kv, t.scale)["bandwidth_gbps"]["max"]
    return {"KV_xfer_bandwidth Gbit/s": _num(bw)}


def _ep(t: RunTables) -> dict[str, Any] | None:
    if not _has(t.flows) or not (t.flows["kind"] == "alltoall").any() or t.ep_ranks < 2:
        return None
    return throughput.ep_alltoall(t.flows, t.scale, t.ep_ranks)


def _tail_spread(t: RunTables) -> Columns:
    kv = _kv_rows(t)
    stats = None if kv is None else throughput.kv_xfer(kv, t.scale)["latency_ms"]
    return {"Tail_spread ms": _num(latency.tail_spread(stats)) if stats else None}


def _probe(t: RunTables) -> Columns:
    if not _has(t.flows):
        return _pcts("Probe_delay", None)
    pairs = probe_owd_ms(t.flows)
    worst = max(pairs.values(), key=lambda s: s.get("p99") or 0, default=None)
    return _pcts("Probe_delay", worst)


def _failures(t: RunTables) -> list[Mapping[str, Any]]:
    """The run's faults that fail something (``link_up``, ``switch_up``, … undo one)."""
    return [f for f in t.faults if not str(f.get("fault", "")).endswith("_up")]


def _worst_fault(t: RunTables, key: str) -> Value:
    """The largest ``key`` over the run's failures (``metrics.faults.fault_timings``);
    None without one, or when one of them has none (never reached: not bounded)."""
    values = [f.get(key) for f in _failures(t)]
    if not values or any(v is None for v in values):
        return None
    return _num(max(values))


def _disruption(t: RunTables) -> Columns:
    """12.3's traffic disruption: how long probes stopped getting through after the
    failure (``first_probe_ms`` where probes were lost; 0 where none was; None without
    probes, or when one pair never got through again)."""
    values = []
    for f in _failures(t):
        lost, back = f.get("probes_lost"), f.get("first_probe_ms")
        if lost is None or (lost and back is None):
            return {"Fault_disruption ms": None}
        values.append(float(back) if lost else 0.0)
    return {"Fault_disruption ms": max(values) if values else None}


def _trend(t: RunTables) -> Columns:
    """Soak: TTFT P99 in ten windows of the measured span, its slope and change."""
    if not _has(t.requests):
        return {"Trend TTFT p99 change": None, "Trend TTFT p99 slope ms/window": None}
    req = t.requests.dropna(subset=["ttft_ms"])
    if len(req) < 20:
        return {"Trend TTFT p99 change": None, "Trend TTFT p99 slope ms/window": None}
    edges = np.linspace(req["arrival_ns"].min(), req["arrival_ns"].max() + 1, 11)
    idx = np.digitize(req["arrival_ns"], edges) - 1
    p99 = [float(np.percentile(g["ttft_ms"], 99)) for _, g in req.groupby(idx)]
    tr = derived.trend(p99)
    return {
        "Trend TTFT p99 change": _num(tr["change"]),
        "Trend TTFT p99 slope ms/window": _num(tr["slope"]),
    }


def _goodput_eff(t: RunTables) -> Columns:
    tps = throughput.tps_output(t.tokens, t.seconds) if _has(t.tokens) else None
    good = throughput.inference_goodput(t.requests, t.seconds)
    return {"Goodput_efficiency": _num(derived.ratio(good, tps))}


def _decode_cv(t: RunTables) -> Columns:
    by = t.requests.dropna(subset=["decode_host"]).groupby("decode_host")["kv_bytes"].sum()
    return {"Decode_balance_CV": _num(derived.coefficient_of_variation(by.to_numpy(dtype=float)))}


TTFT_COLS = ("TTFT p50 ms", "TTFT p99 ms")
KPI_COLUMNS: dict[str, Callable[[RunTables], Columns]] = {
    "TTFT": _serving(lambda t: _pcts("TTFT", latency.ttft(t.requests)), TTFT_COLS),
    "ITL": lambda t: _pcts("ITL", latency.itl(t.tokens) if _has(t.tokens) else None),
    "TTFT_fabric": _serving(
        lambda t: _pcts("TTFT_fabric", latency.ttft_fabric(t.requests)),
        ("TTFT_fabric p50 ms", "TTFT_fabric p99 ms"),
    ),
    "ITL_fabric": lambda t: _pcts(
        "ITL_fabric", latency.itl_fabric(t.flows) if _has(t.flows) else None
    ),
    "E2E_latency": _serving(
        lambda t: _pcts("E2E_latency", latency.e2e_latency(t.requests)),
        ("E2E_latency p50 ms", "E2E_latency p99 ms"),
    ),
    "TTFT_decomposition": _serving(
        _ttft_parts, ("prefill mean ms", "transfer mean ms", "decode_init mean ms")
    ),
    "Fabric_fraction": _serving(
        lambda t: {"Fabric_fraction": _num(latency.fabric_fraction(t.requests))},
        ("Fabric_fraction",),
    ),
    "Tail_spread": _tail_spread,
    "ITL_stalls": lambda t: {
        "ITL_stalls tokens": float(latency.itl_stalls(t.tokens)) if _has(t.tokens) else None
    },
    "TPS_input": _serving(
        lambda t: {"TPS_input tokens/s": throughput.tps_input(t.requests, t.seconds)},
        ("TPS_input tokens/s",),
    ),
    "TPS_output": lambda t: {
        "TPS_output tokens/s": throughput.tps_output(t.tokens, t.seconds)
        if _has(t.tokens)
        else None
    },
    "TPS_per_GPU": lambda t: {
        "TPS_per_GPU tokens/s": throughput.tps_per_gpu(t.tokens, t.seconds, t.decode_gpus)
        if _has(t.tokens)
        else None
    },
    "Inference_Goodput": _serving(
        lambda t: {
            "Inference_Goodput tokens/s": throughput.inference_goodput(t.requests, t.seconds)
        },
        ("Inference_Goodput tokens/s",),
    ),
    "Fabric_Goodput": lambda t: {
        "Fabric_Goodput Gbit/s": _num(throughput.fabric_goodput_gbps(t.flows, t.scale))
        if _has(t.flows)
        else None
    },
    "KV_BW": lambda t: {
        "KV_BW Gbit/s": _num(throughput.kv_bw_gbps(t.flows, t.scale)) if _has(t.flows) else None
    },
    "KV_xfer_latency": _kv_latency,
    "KV_xfer_bandwidth": _kv_bandwidth,
    "EP_alltoall_latency": lambda t: _pcts("EP_alltoall_latency", (_ep(t) or {}).get("latency_ms")),
    "EP_alltoall_bandwidth": lambda t: {
        "EP_alltoall_bandwidth Gbit/s": _num((_ep(t) or {}).get("bandwidth_gbps"))
    },
    "BusBW": lambda t: {"BusBW Gbit/s": _num((_ep(t) or {}).get("busbw_gbps"))},
    "Eviction_rate": _serving(
        lambda t: {"Eviction_rate 1/s": throughput.eviction_rate(t.requests, t.seconds)},
        ("Eviction_rate 1/s",),
    ),
    "Fabric_FCT": lambda t: _pcts(
        "Fabric_FCT", fabric.fabric_fct(t.flows) if _has(t.flows) else None
    ),
    "Buffer_utilization": lambda t: {
        "Buffer_utilization peak %": _num(
            fabric.buffer_utilization(t.queues, t.buffer_pkts)["peak_pct"]
        )
        if _has(t.queues)
        else None
    },
    "Link_utilization": _link_util,
    "Packet_drop_rate": lambda t: {
        "Packet_drop_rate ppm": _num(fabric.drop_rate_ppm(t.links)) if _has(t.links) else None
    },
    "JFI": lambda t: _balance(t, "JFI"),
    "MMR": lambda t: _balance(t, "MMR"),
    "Max_min_ratio": lambda t: _balance(t, "Max_min_ratio"),
    "Concurrent_KV_flows": lambda t: {
        "Concurrent_KV_flows": float(fabric.peak_concurrent_flows(t.flows))
        if _has(t.flows)
        else None
    },
    "Probe_delay": _probe,
    "Prefix_hit_rate": _serving(
        lambda t: {"Prefix_hit_rate": _num(prefix_cache_metrics(t.requests).get("hit_rate"))},
        ("Prefix_hit_rate",),
    ),
    "Decode_balance_CV": _serving(_decode_cv, ("Decode_balance_CV",)),
    "Goodput_efficiency": _serving(_goodput_eff, ("Goodput_efficiency",)),
    "Trend": _trend,
    "Fault_disruption": _disruption,
    # failure to the delivered rate back to BACK_FRACTION of before (metrics.fault_rate)
    "Recovery_time": lambda t: {"Recovery_time ms": _worst_fault(t, "back_to_rate_ms")},
    # failure to the controller's last rule installed for it (control-plane convergence);
    # 8.3's convergence of congestion control is not this and has no column
    "Convergence_time": lambda t: (
        {"Convergence_time ms": _worst_fault(t, "installed_ms")} if t.faults else {}
    ),
}


def kpi_values(kpis: tuple[str, ...], tables: RunTables) -> Columns:
    """Every column of the ``kpis`` this module computes per run, in order."""
    out: Columns = {}
    for name in kpis:
        if name in KPI_COLUMNS:
            out |= KPI_COLUMNS[name](tables)
    return out

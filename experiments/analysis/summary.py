"""The ``metrics`` object of summary.json, computed from a run's tables.

Pure: tables and the run's configuration (``RunConfig``) in, plain JSON data out (no NaN,
no numpy scalars). It only assembles the metrics of :mod:`experiments.analysis.metrics`;
every number is defined there. A key is present only where it applies (``incast`` only
when there were incast flows, ``ttft_ms`` only for serving runs, ``jain_fairness`` only
with several tenants); every table may be ``None`` or empty, as after an interrupted run.

Units: latencies in ms as ``{count, mean, p50, p90, p99, p999, max}``. Bytes and rates
in the tables are emulated (what crossed the emulated links); each rate is given twice,
``*_mbps`` emulated Mbit/s and ``*_real_gbps`` real-equivalent Gbit/s
(emulated / scale), and byte totals as ``bytes`` and ``bytes_real``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.jsonable import to_jsonable
from experiments.analysis.metrics import (
    alltoall_step_ms,
    counter_increase,
    fct_by_kind,
    goodput_mbps,
    hottest_ports,
    incast_goodput,
    jain_fairness,
    json_records,
    latency_stats,
    pipelining_metrics,
    prefix_cache_metrics,
    probe_owd_ms,
    queue_occupancy,
    schedule_lateness_ms,
    serving_metrics,
    value_stats,
)
from experiments.analysis.metrics.bursts import peak_second_metrics
from experiments.analysis.metrics.faults import fault_timings
from experiments.analysis.metrics.flows import fct_slowdown, ok_mask
from experiments.analysis.metrics.hops import hop_metrics
from experiments.analysis.metrics.sessions import session_metrics
from experiments.analysis.metrics.tenants import noisy_neighbour
from experiments.analysis.metrics.tiers import tier_metrics
from experiments.spec.config import RunConfig, ServingWorkload
from experiments.spec.typed import fabric_of
from topologies import Fabric
from topologies.scale import Scale
from topologies.shaping import queue_frames

__all__ = ["HOTTEST_PORTS", "QUEUE_THRESHOLD_FRACTION", "real_gbps", "summarize"]

HOTTEST_PORTS = 5
# "Time above threshold" counts time with the backlog above this fraction of the buffer.
QUEUE_THRESHOLD_FRACTION = 0.5
# Flow kinds whose bytes are not payload of the workload: probes are one real packet
# whatever the scale, so they stay out of goodput.
NOT_GOODPUT = ("probe",)


def summarize(
    flows: pd.DataFrame | None,
    requests: pd.DataFrame | None,
    tokens: pd.DataFrame | None,
    queues: pd.DataFrame | None,
    config: RunConfig,
    links: pd.DataFrame | None = None,
    events: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``metrics`` object of summary.json (see the module doc for units).

    Keys, each only where it applies: ``scale``; ``flows`` (counts, errors, bytes);
    ``fct_ms``, ``fct_ms_by_kind``, ``lateness_ms``; ``goodput_mbps``,
    ``goodput_real_gbps``; ``tenants`` and ``jain_fairness``; ``incast``; ``alltoall``;
    ``probe``; ``fct_slowdown`` (FCT ÷ ideal FCT); ``queue_pkts``, ``drops``,
    ``queue_above``; ``links``; ``ttft_ms``,
    ``tpot_ms``, ``itl_ms``, ``e2e_ms``, ``kv_transfer_ms`` and ``serving`` (with
    ``serving.prefix_cache`` and, for layer-pipelined transfers, ``serving.pipelining``:
    ``metrics.kv``; ``serving.kv_tiers`` with ``kv_tiers``: ``metrics.tiers``;
    ``serving.peak_second``: ``metrics.bursts``; ``serving.hops``, each request's KV hops
    and its latencies by them: ``metrics.hops``); ``faults``
    (``metrics.faults.fault_timings``, from ``events``: the run's events.json, with
    the data-plane side of ``metrics.fault_impact`` from the flows, links and requests).
    """
    scale = config.scale
    flows, requests, tokens, queues, links = map(
        _plain_numbers, (flows, requests, tokens, queues, links)
    )
    out: dict[str, Any] = {"scale": scale.bandwidth}
    if _has_rows(flows):
        out |= _flow_metrics(flows, scale)
        out["fct_slowdown"] = fct_slowdown(flows, _fabric(config), scale)
    if _has_rows(queues):
        out |= _queue_metrics(queues, _threshold_pkts(config))
    if _has_rows(links):
        out["links"] = _link_metrics(links, scale)
    if _has_rows(requests):
        out |= _serving(requests, tokens, config, flows)
    applied = (events or {}).get("faults") or []
    if applied:
        out["faults"] = fault_timings(
            applied,
            (events or {}).get("controller") or [],
            _fabric(config),
            flows=flows,
            links=links,
            requests=requests,
        )
    if config.noisy_neighbour and _has_rows(flows):
        out["noisy_neighbour"] = [
            noisy_neighbour(flows, tokens, requests, p.victim, p.aggressor)
            for p in config.noisy_neighbour
        ]
    return to_jsonable(out)


def real_gbps(emulated_mbps: float | None, scale: Scale) -> float | None:
    """A real-equivalent rate in Gbit/s from an emulated rate in Mbit/s."""
    if emulated_mbps is None or not np.isfinite(emulated_mbps):
        return None
    return scale.real_gbps(emulated_mbps)


# ---- flows ---------------------------------------------------------------------------------


def _fabric(config: RunConfig) -> Fabric:
    """The run's fabric (built once per set of parameters: fabrics are immutable)."""
    return fabric_of(config)


def _flow_metrics(flows: pd.DataFrame, scale: Scale) -> dict[str, Any]:
    ok = ok_mask(flows)
    fct = fct_by_kind(flows)
    errors = Counter(str(e) for e in flows.loc[~ok, "error"].fillna("no error recorded"))
    by_kind = {}
    for kind, group in flows.groupby("kind", sort=True):
        k_ok = ok_mask(group)
        by_kind[str(kind)] = {"total": len(group), "ok": int(k_ok.sum())}
    n_bytes = int(flows.loc[ok, "bytes"].sum())
    out: dict[str, Any] = {
        "flows": {
            "total": len(flows),
            "ok": int(ok.sum()),
            "failed": int((~ok).sum()),
            "by_kind": by_kind,
            "errors": dict(sorted(errors.items())),
            "bytes": n_bytes,
            "bytes_real": _real_bytes(flows, ok, scale),
        },
        "fct_ms": fct["all"],
        "fct_ms_by_kind": fct["by_kind"],
        "lateness_ms": schedule_lateness_ms(flows),
    }
    payload = flows[~flows["kind"].isin(NOT_GOODPUT)]
    if len(payload):
        gp = goodput_mbps(payload)
        out["goodput_mbps"] = gp
        out["goodput_real_gbps"] = real_gbps(gp, scale)
    if "tenant" in flows:
        out |= _tenant_metrics(payload, scale)
    kinds = set(flows["kind"].dropna())
    if "incast" in kinds and "round" in flows:
        out["incast"] = _incast(flows, scale)
    if "alltoall" in kinds and "step" in flows:
        table, per_tenant = alltoall_step_ms(flows)
        out["alltoall"] = {
            "steps": len(table),
            "failed_steps": int((table["failed"] > 0).sum()),
            "step_ms": per_tenant,
        }
    if "probe" in kinds:
        out["probe"] = {"owd_ms": probe_owd_ms(flows)}
    return out


def _real_bytes(flows: pd.DataFrame, ok: pd.Series, scale: Scale) -> int:
    """Delivered real-equivalent bytes: the recorded ``bytes_real`` where the engine
    wrote it (probes are not scaled), else emulated bytes / scale."""
    if "bytes_real" in flows:
        real = (
            flows["bytes_real"].astype(float).fillna(scale.real_bytes(flows["bytes"].astype(float)))
        )
    else:
        real = scale.real_bytes(flows["bytes"].astype(float))
    return int(round(float(real[ok].sum())))


def _tenant_metrics(flows: pd.DataFrame, scale: Scale) -> dict[str, Any]:
    tenants: dict[str, Any] = {}
    for tenant, group in flows.groupby("tenant", sort=True, dropna=False):
        ok = ok_mask(group)
        fct = fct_by_kind(group)["all"]
        gp = goodput_mbps(group)
        tenants[str(tenant)] = {
            "flows": len(group),
            "failed": int((~ok).sum()),
            "fct_ms_p99": fct["p99"],
            "fct_ms": fct,
            "goodput_mbps": gp,
            "goodput_real_gbps": real_gbps(gp, scale),
        }
    out: dict[str, Any] = {"tenants": tenants} if tenants else {}
    if len(tenants) > 1:
        out["jain_fairness"] = jain_fairness([t["goodput_mbps"] or 0.0 for t in tenants.values()])
    return out


def _incast(flows: pd.DataFrame, scale: Scale) -> dict[str, Any]:
    table, stats = incast_goodput(flows)
    table["goodput_real_gbps"] = scale.real_gbps(table["goodput_mbps"])
    by_senders = {}
    for senders, group in table.groupby("senders", sort=True):
        by_senders[str(int(senders))] = {
            "rounds": len(group),
            "round_ms": latency_stats(group["round_ms"]),
            "goodput_mbps": value_stats(group["goodput_mbps"]),
            "goodput_real_gbps": value_stats(group["goodput_real_gbps"]),
        }
    # all rounds' bytes over all rounds' time: the aggregate incast studies (and the
    # incast-collapse handout) tabulate, not the mean of per-round goodputs
    round_s = float(table["round_ms"].sum()) / 1e3
    aggregate = float(table["bytes"].sum()) * 8 / round_s / 1e6 if round_s > 0 else None
    return {
        "rounds": stats["rounds"],
        "failed_rounds": int((table["failed"] > 0).sum()),
        "round_ms": stats["round_ms"],
        "goodput_mbps": stats["goodput_mbps"],
        "goodput_real_gbps": value_stats(table["goodput_real_gbps"]),
        "aggregate_goodput_mbps": aggregate,
        "aggregate_goodput_real_gbps": real_gbps(aggregate, scale),
        "by_senders": by_senders,
        "per_round": json_records(table),
    }


# ---- queues and links ----------------------------------------------------------------------


def _queue_metrics(queues: pd.DataFrame, threshold: float) -> dict[str, Any]:
    occ = queue_occupancy(queues, threshold)
    hot = hottest_ports(queues, HOTTEST_PORTS)
    above = occ.assign(time_above_s=occ["frac_above"] * occ["span_s"])
    worst = above.sort_values(["frac_above", "node", "port"], ascending=[False, True, True])
    drops_by_port = {
        f"{r.node}:{r.port}": int(r.drops) for r in occ.itertuples(index=False) if r.drops > 0
    }
    return {
        "queue_pkts": {
            "all": latency_stats(queues["backlog_pkts"]),
            "ports": len(occ),
            "hottest": json_records(hot),
        },
        "drops": {
            "total": int(occ["drops"].sum()),
            "ports_with_drops": len(drops_by_port),
            "by_port": drops_by_port,
        },
        "queue_above": {
            "threshold_pkts": threshold,
            "time_above_s": float(above["time_above_s"].sum()),
            "max_frac": float(worst["frac_above"].iloc[0]),
            "max_port": f"{worst['node'].iloc[0]}:{worst['port'].iloc[0]}",
        },
    }


def link_rates(links: pd.DataFrame) -> pd.DataFrame:
    """Per-interval tx rate of every (node, port) from the cumulative ``tx_bytes``
    counter: columns ``node, port, t_ns`` (interval end), ``dt_s``, ``tx_mbps``
    (emulated). Used by the summary and the link-utilisation heatmap."""
    parts = []
    for (node, port), g in links.groupby(["node", "port"], sort=True):
        g = g.sort_values("t_ns", kind="stable")
        if len(g) < 2:
            continue
        t = g["t_ns"].to_numpy(dtype=float)
        dt = np.diff(t) / 1e9
        inc = counter_increase(g["tx_bytes"])
        with np.errstate(divide="ignore", invalid="ignore"):
            mbps = np.where(dt > 0, inc * 8 / dt / 1e6, np.nan)
        parts.append(
            pd.DataFrame({"node": node, "port": port, "t_ns": t[1:], "dt_s": dt, "tx_mbps": mbps})
        )
    if not parts:
        return pd.DataFrame(columns=["node", "port", "t_ns", "dt_s", "tx_mbps"])
    return pd.concat(parts, ignore_index=True)


def _link_metrics(links: pd.DataFrame, scale: Scale) -> dict[str, Any]:
    rates = link_rates(links)
    rows = []
    for (node, port), g in links.groupby(["node", "port"], sort=True):
        g = g.sort_values("t_ns", kind="stable")
        span_s = float(g["t_ns"].iloc[-1] - g["t_ns"].iloc[0]) / 1e9
        tx = float(counter_increase(g["tx_bytes"]).sum()) if len(g) > 1 else 0.0
        r = rates[(rates["node"] == node) & (rates["port"] == port)]["tx_mbps"]
        mean = tx * 8 / span_s / 1e6 if span_s > 0 else None
        peak = float(r.max()) if r.notna().any() else None
        drops = (
            int(counter_increase(g["tx_dropped"]).sum()) if "tx_dropped" in g and len(g) > 1 else 0
        )
        rows.append(
            {
                "node": str(node),
                "port": str(port),
                "tx_bytes": int(tx),
                "mean_tx_mbps": mean,
                "peak_tx_mbps": peak,
                "mean_tx_real_gbps": real_gbps(mean, scale),
                "peak_tx_real_gbps": real_gbps(peak, scale),
                "tx_dropped": drops,
            }
        )
    busiest = sorted(rows, key=lambda r: (-(r["mean_tx_mbps"] or 0.0), r["node"], r["port"]))
    return {
        "ports": len(rows),
        "tx_bytes": sum(r["tx_bytes"] for r in rows),
        "tx_dropped": sum(r["tx_dropped"] for r in rows),
        "busiest": busiest[:HOTTEST_PORTS],
    }


# ---- serving -------------------------------------------------------------------------------

SERVING_LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "kv_transfer_ms")


def _serving(
    requests: pd.DataFrame,
    tokens: pd.DataFrame | None,
    config: RunConfig,
    flows: pd.DataFrame | None = None,
) -> dict[str, Any]:
    serving = [w for w in config.workloads if isinstance(w, ServingWorkload)]
    slo = serving[0].slo if serving else None
    duration = float(config.duration_s or 0.0) or _span_s(requests)
    if slo is not None and duration > 0:
        m = serving_metrics(requests, tokens, float(slo.ttft_ms), float(slo.tpot_ms), duration)
    else:  # no SLO declared: latencies only
        itl = tokens["itl_ms"] if tokens is not None and "itl_ms" in tokens else None
        ttft = requests["ttft_ms"].astype(float)
        m = {
            "requests": len(requests),
            "served": int(ttft.notna().sum()),
            "unserved": int(ttft.isna().sum()),
            "ttft_ms": latency_stats(ttft),
            "tpot_ms": latency_stats(requests["tpot_ms"]),
            "itl_ms": latency_stats(itl),
            "e2e_ms": latency_stats(requests["e2e_ms"]),
            "kv_transfer_ms": latency_stats(requests["kv_transfer_ms"]),
        }
    m["prefix_cache"] = prefix_cache_metrics(requests) | {
        "enabled": any(w.prefix_cache.enabled for w in serving)
    }
    if any(w.transfer == "layer_pipelined" for w in serving):
        m["pipelining"] = pipelining_metrics(requests)
    sessions = session_metrics(requests)
    if sessions is not None:
        m["sessions"] = sessions
    hops = hop_metrics(requests, _fabric(config))
    if hops is not None:
        m["hops"] = hops
    if any(w.kv_tiers is not None for w in serving):
        m["kv_tiers"] = tier_metrics(requests, tokens, flows)
    peak = peak_second_metrics(requests)
    if peak is not None:
        m["peak_second"] = peak
    out = {key: m.pop(key) for key in SERVING_LATENCIES}
    out["serving"] = m
    return out


def _span_s(requests: pd.DataFrame) -> float:
    if "arrival_ns" not in requests or requests["arrival_ns"].isna().all():
        return 0.0
    return float(requests["arrival_ns"].max() - requests["arrival_ns"].min()) / 1e9


# ---- helpers -------------------------------------------------------------------------------


def _plain_numbers(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """Nullable numeric columns (``Int64``, ``Float64``: the fleet records a flow that
    never started as <NA>) as float64 with NaN, the "not measured" of the metrics."""
    if df is None:
        return None
    nullable = [
        c
        for c, dtype in df.dtypes.items()
        if isinstance(dtype, pd.api.extensions.ExtensionDtype)
        and pd.api.types.is_numeric_dtype(dtype)
        and not pd.api.types.is_bool_dtype(dtype)
    ]
    if not nullable:
        return df
    return df.astype({c: "float64" for c in nullable})


def _has_rows(df: pd.DataFrame | None) -> bool:
    return df is not None and len(df) > 0


def _threshold_pkts(config: RunConfig) -> float:
    """The threshold in the frames the queues hold (the buffer keeps its bytes at any MTU)."""
    frames = queue_frames(config.fabric.buffer_pkts, config.scale.mtu)
    return float(frames) * QUEUE_THRESHOLD_FRACTION

"""Metrics over flows.parquet: flow completion, agent lateness, incast rounds, all-to-all
steps, probe one-way delay and goodput.

Columns used: ``flow_id, kind, tenant, src, dst, bytes, t_sched_ns, t_start_ns, t_end_ns,
fct_ms, ok`` plus ``round`` (incast) and ``step`` (all-to-all). Bytes are the emulated
bytes on the wire, so rates are emulated rates; divide by the spec's bandwidth scale for
real-equivalent figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.stats import Stats, latency_stats, value_stats
from topologies import Fabric
from topologies.scale import Scale

MSS = 1448  # TCP payload per frame at MTU 1500 (with timestamps)
FRAME_BYTES = 1514  # a full frame as HTB counts it: MSS + 52 (TCP/IP) + 14 (Ethernet)
TCP_IP_HEADER_BYTES = 52  # IPv4 20 + TCP 20 + timestamps 12


def ok_mask(flows: pd.DataFrame) -> pd.Series:
    """Which flows completed: a missing ``ok`` (NaN/None) counts as failed, never as ok."""
    return flows["ok"].fillna(False).astype(bool)


def fct_ms(flows: pd.DataFrame) -> pd.Series:
    """Recorded ``fct_ms``, filled from ``t_end_ns - t_start_ns`` where it is missing."""
    span = flows["t_end_ns"].astype("Float64") - flows["t_start_ns"].astype("Float64")
    derived = (span / 1e6).astype(float)  # nullable Int64 columns: missing -> NaN
    if "fct_ms" not in flows:
        return derived
    return flows["fct_ms"].astype(float).fillna(derived)


def fct_by_kind(flows: pd.DataFrame) -> dict[str, Any]:
    """FCT stats of completed flows, overall and per kind, and how many flows failed.

    Returns ``{"all": stats, "by_kind": {kind: stats}, "failed": int,
    "failed_by_kind": {kind: int}}``. Failed flows are counted, not timed: their FCT
    would be the time to give up, which says nothing about the network.
    """
    ok = ok_mask(flows)
    fct = fct_ms(flows)
    by_kind = {str(k): latency_stats(fct[ok & (flows["kind"] == k)]) for k in _kinds(flows)}
    failed = {str(k): int((~ok & (flows["kind"] == k)).sum()) for k in _kinds(flows)}
    return {
        "all": latency_stats(fct[ok]),
        "by_kind": by_kind,
        "failed": int((~ok).sum()),
        "failed_by_kind": {k: n for k, n in failed.items() if n},
    }


def schedule_lateness_ms(flows: pd.DataFrame) -> Stats:
    """How late agents started flows versus their schedule (``t_start - t_sched``, ms),
    failed flows included: the fidelity monitor uses its p99 to tell a loaded host (the
    emulation lying) from a loaded network (the thing measured)."""
    return latency_stats((flows["t_start_ns"] - flows["t_sched_ns"]) / 1e6)


def incast_goodput(flows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Goodput of each incast round: all senders' delivered bytes over the round time.

    Round time = last ``t_end`` of the round − first ``t_sched`` (``t_start`` where unset),
    i.e. from the aggregator's request to the last byte, as incast studies define it; the
    round is as slow as its slowest sender. Only ok flows' bytes count (a timed-out sender
    delivered nothing useful). Rows of kind ``incast`` are used when a ``kind`` column exists.

    Returns ``(table, stats)``: table columns ``tenant, round, senders, failed, bytes,
    round_ms, goodput_mbps``; stats ``{"rounds", "round_ms": latency stats,
    "goodput_mbps": value stats}``.
    """
    inc = _of_kind(flows, "incast")
    _require(inc, "round", "incast_goodput")
    table = _spans(inc, "round").rename(columns={"flows": "senders", "span_ms": "round_ms"})
    table["goodput_mbps"] = [
        b * 8 / (ms / 1e3) / 1e6 if ms > 0 else np.nan
        for b, ms in zip(table["bytes"], table["round_ms"], strict=True)
    ]
    stats = {
        "rounds": len(table),
        "round_ms": latency_stats(table["round_ms"]),
        "goodput_mbps": value_stats(table["goodput_mbps"]),
    }
    return table, stats


def alltoall_step_ms(flows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Stats]]:
    """MoE all-to-all step time per tenant: the span of one step's dispatch and combine
    flows (first ``t_sched`` to last ``t_end``), because the experts wait for the slowest
    peer. Steps with a failed flow are listed but left out of the stats.

    Returns ``(table, {tenant: latency stats})``; table columns ``tenant, step, flows,
    failed, bytes, step_ms``.
    """
    a2a = _of_kind(flows, "alltoall")
    _require(a2a, "step", "alltoall_step_ms")
    table = _spans(a2a, "step").rename(columns={"span_ms": "step_ms"})
    done = table[table["failed"] == 0]
    per_tenant = {
        str(t): latency_stats(g["step_ms"]) for t, g in done.groupby("tenant", dropna=False)
    }
    return table, per_tenant


def probe_owd_ms(flows: pd.DataFrame) -> dict[str, Stats]:
    """One-way delay of ok probes per ``"src->dst"`` pair (``t_end - t_start``, ms).

    Exact up to scheduling noise because sender and receiver share CLOCK_MONOTONIC; the
    per-pair split shows which paths queue.
    """
    probes = _of_kind(flows, "probe")
    probes = probes[ok_mask(probes)]
    owd = (probes["t_end_ns"] - probes["t_start_ns"]) / 1e6
    pairs = probes["src"].astype(str) + "->" + probes["dst"].astype(str)
    return {pair: latency_stats(owd[pairs == pair]) for pair in sorted(pairs.unique())}


def goodput_mbps(flows: pd.DataFrame) -> float | None:
    """Delivered (ok) bytes × 8 over the span from the first scheduled start to the last
    completed end, in Mbit/s. None when nothing completed. Filter the table first
    (by tenant, kind) to get that party's goodput, e.g. for Jain fairness."""
    ok = ok_mask(flows)
    if not ok.any():
        return None
    span_ns = float(flows.loc[ok, "t_end_ns"].max() - _first_ns(flows).min())
    if not span_ns > 0:
        return None
    return float(flows.loc[ok, "bytes"].sum()) * 8 / (span_ns / 1e9) / 1e6


# --- helpers --------------------------------------------------------------------------------


def _kinds(flows: pd.DataFrame) -> list[Any]:
    return sorted(flows["kind"].dropna().unique(), key=str)


def _of_kind(flows: pd.DataFrame, kind: str) -> pd.DataFrame:
    return flows[flows["kind"] == kind] if "kind" in flows else flows


def _require(flows: pd.DataFrame, column: str, who: str) -> None:
    if column not in flows:
        raise ValueError(f"{who} needs a {column!r} column in the flows table")


def _keys(flows: pd.DataFrame, column: str) -> list[str]:
    return ["tenant", column] if "tenant" in flows else [column]


def _first_ns(flows: pd.DataFrame) -> pd.Series:
    """Scheduled start, or the actual start where no schedule was recorded."""
    return flows["t_sched_ns"].astype(float).fillna(flows["t_start_ns"].astype(float))


def _spans(flows: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (tenant, ``column``) group: ``tenant, <column>, flows, failed, bytes, span_ms``,
    where bytes are ok bytes and the span runs from the first scheduled start to the last
    ok end (NaN if none completed)."""
    rows = []
    for keys, group in flows.groupby(_keys(flows, column), sort=True, dropna=False):
        tenant, key = keys if len(keys) == 2 else (None, keys[0])
        ok = ok_mask(group)
        end = group.loc[ok, "t_end_ns"].max() if ok.any() else np.nan
        span_ms = float(end - _first_ns(group).min()) / 1e6
        n_bytes = int(group.loc[ok, "bytes"].sum())
        rows.append([tenant, key, len(group), int((~ok).sum()), n_bytes, span_ms])
    return pd.DataFrame(rows, columns=["tenant", column, "flows", "failed", "bytes", "span_ms"])


def ideal_fct_ms(flows: pd.DataFrame, fabric: Fabric, scale: Scale) -> np.ndarray:
    """Each flow's FCT on an empty fabric (ms): its bytes on the wire (frames of ``MSS``
    payload, ``FRAME_BYTES`` each at MTU 1500; ``scale.mtu``'s) at the path's slowest
    emulated link (``scale``), plus one
    frame's store-and-forward at each other link (the pFabric/HPCC ideal: no slow start,
    no queue)."""
    frame, mss = scale.frame_bytes, scale.mtu - TCP_IP_HEADER_BYTES

    cache: dict[tuple[str, str], tuple[float, float]] = {}

    def path(src: str, dst: str) -> tuple[float, float]:
        if (src, dst) not in cache:
            hops = fabric.shortest_paths(src, dst)[0]
            rates = [
                scale.emulated_bps(fabric.link_between(a, b).real_gbps)
                for a, b in zip(hops, hops[1:], strict=False)
            ]
            slowest = min(rates)
            forward = sum(frame * 8 / r for r in rates) - frame * 8 / slowest
            cache[(src, dst)] = (slowest, forward)
        return cache[(src, dst)]

    nbytes = flows["bytes"].to_numpy(dtype=np.float64)
    wire = nbytes + np.ceil(nbytes / mss) * (frame - mss)
    out = np.empty(len(flows))
    for i, (src, dst) in enumerate(zip(flows["src"], flows["dst"], strict=True)):
        slowest, forward = path(src, dst)
        out[i] = (wire[i] * 8 / slowest + min(forward, wire[i] * 8 / slowest)) * 1e3
    return out


def fct_slowdown(flows: pd.DataFrame, fabric: Fabric, scale: Scale) -> Stats:
    """FCT ÷ ideal FCT of every completed TCP flow (``ideal_fct_ms``): comparable across
    flow sizes, scales and flow-size aggregation, as FCT itself is not."""
    done = flows[ok_mask(flows) & (flows["proto"] == "tcp")] if "proto" in flows else flows
    if done.empty:
        return latency_stats([])
    return latency_stats(
        done["fct_ms"].to_numpy(dtype=np.float64) / ideal_fct_ms(done, fabric, scale)
    )

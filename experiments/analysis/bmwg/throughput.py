"""The draft's throughput KPIs: TPS (input, output, per GPU), Inference_Goodput and
Fabric_Goodput, KV_BW, KV_xfer, EP all-to-all and BusBW, and the S_KV and T_dispatch
sizes of the terminology draft.

Rates over a run take its measured span in seconds (``seconds``: the trial after
warm-up). Byte rates are real-equivalent Gbit/s (the tables' emulated bytes ÷ the
bandwidth scale); the draft asks every report to say GB/s or Gbit/s: these are Gbit/s.
Fabric_Goodput counts application payload only (TCP headers and retransmitted bytes
are never in the flows table), as [TERMINOLOGY] defines it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from experiments.analysis.bmwg.latency import draft_stats
from experiments.analysis.metrics import alltoall_step_ms, goodput_mbps
from experiments.analysis.metrics.flows import fct_ms, ok_mask
from topologies.scale import Scale

KV_KINDS = ("kv_transfer", "kv_layer", "incast")  # incast: 5.x's KV messages


def _rate(count: float, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return float(count) / seconds


def tps_input(requests: pd.DataFrame, seconds: float) -> float:
    """Prompt tokens of the requests whose prefill finished, per second."""
    done = requests["prefill_end_ns"].astype(float) >= 0
    return _rate(requests.loc[done, "input_tokens"].sum(), seconds)


def tps_output(tokens: pd.DataFrame, seconds: float) -> float:
    """Output tokens emitted per second (every row of the tokens table)."""
    return _rate(len(tokens), seconds)


def tps_per_gpu(tokens: pd.DataFrame, seconds: float, decode_gpus: int) -> float:
    """TPS_output ÷ the decode GPUs."""
    return tps_output(tokens, seconds) / decode_gpus


def inference_goodput(requests: pd.DataFrame, seconds: float) -> float:
    """Output tokens per second of requests that finished without error, preemption or
    eviction (TPS_output restricted to them)."""
    good = requests["served"].astype(bool) & requests["error"].isna()
    if "evicted" in requests:
        good &= requests["evicted"].fillna(0).astype(float) == 0
    return _rate(requests.loc[good, "output_tokens"].sum(), seconds)


def fabric_goodput_gbps(
    flows: pd.DataFrame, scale: Scale, kinds: tuple[str, ...] | None = None
) -> float | None:
    """Delivered payload over the span of ``flows`` (of ``kinds``; probes never count),
    real-equivalent Gbit/s; None when nothing was delivered."""
    picked = flows[flows["kind"] != "probe"]
    if kinds is not None:
        picked = picked[picked["kind"].isin(kinds)]
    mbps = goodput_mbps(picked) if len(picked) else None
    return None if mbps is None else scale.real_gbps(mbps)


def kv_bw_gbps(flows: pd.DataFrame, scale: Scale) -> float | None:
    """KV_BW: Fabric_Goodput of the KV messages between the pools: the serving driver's
    transfers, and 5.x's KV messages (``incast`` rows), as ``kv_xfer`` counts them."""
    return fabric_goodput_gbps(flows, scale, KV_KINDS)


def kv_xfer(flows: pd.DataFrame, scale: Scale, kinds: tuple[str, ...] = KV_KINDS) -> dict[str, Any]:
    """KV_xfer_latency (each delivered KV message's completion time, ms) and
    KV_xfer_bandwidth (each sending port's goodput, and the highest)."""
    kv = flows[flows["kind"].isin(kinds)]
    per_port = {
        str(src): fabric_goodput_gbps(group, scale, kinds) for src, group in kv.groupby("src")
    }
    rates = [r for r in per_port.values() if r is not None]
    return {
        "latency_ms": draft_stats(fct_ms(kv[ok_mask(kv)])),
        "bandwidth_gbps": {"per_port": per_port, "max": max(rates) if rates else None},
    }


def bus_bandwidth_gbps(data_bytes: float, seconds: float, ranks: int) -> float:
    """BusBW of an all-to-all: data × (n − 1)/n ÷ time, Gbit/s (algo_factor fixed)."""
    return data_bytes * 8 * (ranks - 1) / ranks / seconds / 1e9


def ep_alltoall(flows: pd.DataFrame, scale: Scale, ranks: int) -> dict[str, Any]:
    """EP_alltoall_latency (each complete step, ms), EP_alltoall_bandwidth (the steps'
    delivered bytes over their summed time, Gbit/s) and its BusBW over ``ranks``."""
    table, _ = alltoall_step_ms(flows)
    done = table[table["failed"] == 0]
    seconds = float(done["step_ms"].sum()) / 1e3
    real_bytes = scale.real_bytes(float(done["bytes"].sum()))
    return {
        "latency_ms": draft_stats(done["step_ms"]),
        "bandwidth_gbps": real_bytes * 8 / seconds / 1e9 if seconds > 0 else None,
        "busbw_gbps": bus_bandwidth_gbps(real_bytes, seconds, ranks) if seconds > 0 else None,
    }


def s_kv_bytes(layers: int, kv_heads: int, head_dim: int, context: int, p_bytes: int) -> int:
    """S_KV = 2 × L × H_kv × D × C × P_bytes: one request's KV cache."""
    return 2 * layers * kv_heads * head_dim * context * p_bytes


def t_dispatch_bytes(batch: int, top_k: int, hidden: int, p_bytes: int, ranks: int) -> float:
    """T_dispatch = B × k × H_model × P_bytes ÷ N: one source–destination pair's payload
    per MoE layer (the formula; the draft's Table 7 omits the ÷ N)."""
    return batch * top_k * hidden * p_bytes / ranks


def eviction_rate(requests: pd.DataFrame, seconds: float) -> float:
    """Evictions per second (kv_tiers: a request's KV pushed out of HBM)."""
    evicted = requests["evicted"].fillna(0).sum() if "evicted" in requests else 0
    return _rate(evicted, seconds)

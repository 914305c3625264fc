"""The draft's latency KPIs from requests.parquet, tokens.parquet and flows.parquet:
TTFT and its decomposition, TTFT_fabric, ITL, ITL_fabric, E2E latency, stalls.

Every latency is in ms as ``latency_stats`` gives it, plus ``p95`` (the draft reports
P50/P95/P99/P99.9). TTFT is split as the requests table records a request's life:

- T_prefill = ``prefill_end_ns`` − ``arrival_ns``: queueing, prefix fetch, compute;
- T_transfer (TTFT_fabric) = ``kv_exposed_ms``, the part of the KV transfer after
  prefill ended, which TTFT waits for (all of it when monolithic; a run that predates
  the column: ``kv_transfer_ms``);
- T_decode_init = TTFT − T_prefill − T_transfer: the first decode step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics import alltoall_step_ms, latency_stats
from experiments.analysis.metrics.flows import fct_ms, ok_mask
from experiments.analysis.metrics.stats import Stats, finite

STALL_MS = 100.0  # 10.2: a token whose ITL exceeds this is a stall


def draft_stats(values: Iterable[float] | None) -> Stats:
    """``latency_stats`` and ``p95``."""
    out = latency_stats(values)
    arr = finite(values)
    out["p95"] = float(np.percentile(arr, 95)) if arr.size else None
    return out


def ttft(requests: pd.DataFrame) -> Stats:
    """TTFT of served requests (unserved ones have no first token)."""
    return draft_stats(requests["ttft_ms"])


def e2e_latency(requests: pd.DataFrame) -> Stats:
    return draft_stats(requests["e2e_ms"])


def itl(tokens: pd.DataFrame) -> Stats:
    return draft_stats(tokens["itl_ms"])


def itl_stalls(tokens: pd.DataFrame, threshold_ms: float = STALL_MS) -> int:
    """Tokens whose inter-token gap exceeds ``threshold_ms``."""
    return int((tokens["itl_ms"].astype(float) > threshold_ms).sum())


def tail_spread(stats: Mapping[str, Any]) -> float | None:
    """P99 − P50 of a latency stats mapping (5.2)."""
    if stats.get("p99") is None or stats.get("p50") is None:
        return None
    return float(stats["p99"]) - float(stats["p50"])


def ttft_decomposition(requests: pd.DataFrame) -> pd.DataFrame:
    """Per served request: ``request_id, ttft_ms, t_prefill_ms, t_transfer_ms,
    t_decode_init_ms, fabric_fraction`` (NaN where a part was not measured: no
    transfer in a colocated run)."""
    served = requests[requests["ttft_ms"].astype(float).notna()]
    end = served["prefill_end_ns"].astype(float)
    prefill = ((end - served["arrival_ns"].astype(float)) / 1e6).where(end >= 0)
    transfer = served["kv_transfer_ms"].astype(float)
    if "kv_exposed_ms" in served:
        transfer = served["kv_exposed_ms"].astype(float).fillna(transfer)
    total = served["ttft_ms"].astype(float)
    return pd.DataFrame(
        {
            "request_id": served["request_id"].to_numpy(),
            "ttft_ms": total.to_numpy(),
            "t_prefill_ms": prefill.to_numpy(),
            "t_transfer_ms": transfer.to_numpy(),
            "t_decode_init_ms": (total - prefill - transfer).to_numpy(),
            "fabric_fraction": (transfer / total.where(total > 0)).to_numpy(),
        }
    )


def ttft_fabric(requests: pd.DataFrame) -> Stats:
    """TTFT_fabric: the KV transfer time TTFT waits for."""
    return draft_stats(ttft_decomposition(requests)["t_transfer_ms"])


def fabric_fraction(requests: pd.DataFrame) -> float | None:
    """Σ T_transfer ÷ Σ TTFT over requests with both (6.1, 10.1); None without."""
    parts = ttft_decomposition(requests).dropna(subset=["t_transfer_ms", "ttft_ms"])
    total = float(parts["ttft_ms"].sum())
    return float(parts["t_transfer_ms"].sum()) / total if total > 0 else None


def itl_fabric(flows: pd.DataFrame) -> Stats:
    """ITL_fabric: the fabric's time per decode step. With MoE all-to-all rows, each
    step's dispatch + combine span (``alltoall_step_ms``: the EP round trip); else the
    decode steps' TP all-reduce messages (kind ``collective``), each one's FCT."""
    if "step" in flows and (flows["kind"] == "alltoall").any():
        table, _ = alltoall_step_ms(flows)
        return draft_stats(table.loc[table["failed"] == 0, "step_ms"])
    collective = flows[(flows["kind"] == "collective") & ok_mask(flows)]
    return draft_stats(fct_ms(collective))

"""What a user of the served model feels: TTFT, TPOT, ITL, end-to-end latency, the KV
transfer's part in TTFT, SLO attainment and goodput, from requests.parquet and
tokens.parquet."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.stats import latency_stats, value_stats


def serving_metrics(
    requests: pd.DataFrame,
    tokens: pd.DataFrame | None,
    slo_ttft_ms: float,
    slo_tpot_ms: float,
    duration_s: float,
) -> dict[str, Any]:
    """Serving summary of one run.

    Returns ``{requests, served, unserved, ttft_ms, tpot_ms, itl_ms, e2e_ms, kv_transfer_ms,
    kv_transfer_share_of_ttft, slo, goodput_rps, throughput_rps}`` where the ``*_ms`` are
    latency stats, ``kv_transfer_share_of_ttft`` is ``{"aggregate", "per_request": value
    stats}`` (aggregate = sum kv_transfer / sum TTFT, so long requests weigh more), and
    ``slo`` is ``{ttft_ms, tpot_ms, ttft_attainment, tpot_attainment, attainment}``.

    A request is unserved when its ``ttft_ms`` is NaN; unserved requests stay in the
    denominators and fail every SLO (dropping them would flatter an overloaded system).
    A served request with NaN ``tpot_ms`` (a single output token, no inter-token gap)
    meets the TPOT SLO, as in vLLM's goodput benchmark.

    ``goodput_rps`` = requests meeting both SLOs / ``duration_s``: the per-run quantity
    DistServe's goodput is built from (DistServe reports the highest arrival rate whose
    attainment stays above a target such as 90%; find it with a sweep over the rate).
    Attainments are None when there are no requests.
    """
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    ttft = requests["ttft_ms"].astype(float)
    tpot = requests["tpot_ms"].astype(float)
    served = ttft.notna()
    meets_ttft = served & (ttft <= slo_ttft_ms)
    meets_tpot = served & (tpot.isna() | (tpot <= slo_tpot_ms))
    good = meets_ttft & meets_tpot
    n = len(requests)

    def share(mask: pd.Series) -> float | None:
        return float(mask.sum()) / n if n else None

    itl = tokens["itl_ms"] if tokens is not None and "itl_ms" in tokens else None
    return {
        "requests": n,
        "served": int(served.sum()),
        "unserved": int((~served).sum()),
        "ttft_ms": latency_stats(ttft),
        "tpot_ms": latency_stats(tpot[served]),
        "itl_ms": latency_stats(itl),
        "e2e_ms": latency_stats(requests["e2e_ms"]),
        "kv_transfer_ms": latency_stats(requests["kv_transfer_ms"]),
        "kv_transfer_share_of_ttft": kv_transfer_share(requests),
        "slo": {
            "ttft_ms": slo_ttft_ms,
            "tpot_ms": slo_tpot_ms,
            "ttft_attainment": share(meets_ttft),
            "tpot_attainment": share(meets_tpot),
            "attainment": share(good),
        },
        "goodput_rps": float(good.sum()) / duration_s,
        "throughput_rps": float(served.sum()) / duration_s,
    }


def kv_transfer_share(requests: pd.DataFrame) -> dict[str, Any]:
    """Fraction of TTFT spent moving the KV cache across the fabric: the number that says
    whether disaggregation's network cost matters. Only requests with both values and a
    positive TTFT count; colocated runs (no transfer, NaN) give ``aggregate`` None."""
    kv = requests["kv_transfer_ms"].astype(float)
    ttft = requests["ttft_ms"].astype(float)
    both = kv.notna() & ttft.notna() & (ttft > 0)
    total = float(ttft[both].sum())
    return {
        "aggregate": float(kv[both].sum()) / total if total > 0 else None,
        "per_request": value_stats(np.asarray(kv[both] / ttft[both])),
    }

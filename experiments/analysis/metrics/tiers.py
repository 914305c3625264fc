"""What tiered KV storage did in a serving run (``kv_tiers``): bytes moved per tier,
evictions, recomputes and the stall they cost, from requests.parquet (and, for the
bytes that crossed the fabric, flows.parquet).

Columns read (``traffic.serving.requests``): ``evicted``, ``recomputed_tokens``,
``tier_fetch_bytes_{cxl,flash}``, ``tier_offload_bytes_{cxl,flash}`` (real-equivalent
bytes), ``tier_stall_ms``, ``tier_hit_blocks``, ``request_id``; tokens.parquet's
``request_id`` and ``itl_ms``; flows.parquet's ``kind``, ``bytes_real`` (else ``bytes``)
and ``ok``. A run without these columns has no ``kv_tiers`` numbers (None).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from experiments.analysis.metrics.stats import latency_stats

TIERS = ("cxl", "flash")


def tier_metrics(
    requests: pd.DataFrame, tokens: pd.DataFrame | None = None, flows: pd.DataFrame | None = None
) -> dict[str, Any] | None:
    """``{requests_evicted, evictions, requests_recomputed, recomputed_tokens,
    bytes_by_tier: {cxl|flash: {offloaded, fetched, moved}}, tier_fetch_bytes_on_wire,
    tier_hit_blocks, stall_ms, stall_ms_total, itl_ms_never_evicted, itl_ms_evicted}``.

    ``moved`` = offloaded + fetched. ``tier_fetch_bytes_on_wire`` sums the ``tier_fetch``
    messages flows.parquet received (flash traffic as the fabric carried it). ``stall_ms``
    is the latency stats of each evicted request's time out of its batch;
    ``itl_ms_never_evicted`` the ITL of requests never evicted, which other members'
    evictions, recomputes and offload traffic slow. None without the columns."""
    if "evicted" not in requests:
        return None
    evicted = requests["evicted"].astype(int)
    out: dict[str, Any] = {
        "requests_evicted": int((evicted > 0).sum()),
        "evictions": int(evicted.sum()),
        "requests_recomputed": int((requests["recomputed_tokens"] > 0).sum()),
        "recomputed_tokens": int(requests["recomputed_tokens"].sum()),
        "bytes_by_tier": {},
        "tier_fetch_bytes_on_wire": None,
        "tier_hit_blocks": int(requests["tier_hit_blocks"].sum()),
        "stall_ms": latency_stats(requests.loc[evicted > 0, "tier_stall_ms"]),
        "stall_ms_total": float(requests["tier_stall_ms"].sum()),
        "itl_ms_never_evicted": None,
        "itl_ms_evicted": None,
    }
    for tier in TIERS:
        offloaded = int(requests[f"tier_offload_bytes_{tier}"].sum())
        fetched = int(requests[f"tier_fetch_bytes_{tier}"].sum())
        out["bytes_by_tier"][tier] = {
            "offloaded": offloaded,
            "fetched": fetched,
            "moved": offloaded + fetched,
        }
    if flows is not None and "kind" in flows and len(flows):
        tier_flows = flows[flows["kind"] == "tier_fetch"]
        if "ok" in tier_flows:
            tier_flows = tier_flows[tier_flows["ok"].astype(bool)]
        column = "bytes_real" if "bytes_real" in tier_flows else "bytes"
        out["tier_fetch_bytes_on_wire"] = int(tier_flows[column].sum())
    if tokens is not None and len(tokens) and "itl_ms" in tokens:
        ever = set(requests.loc[evicted > 0, "request_id"].tolist())
        hit = tokens["request_id"].isin(ever)
        out["itl_ms_never_evicted"] = latency_stats(tokens.loc[~hit, "itl_ms"])
        out["itl_ms_evicted"] = latency_stats(tokens.loc[hit, "itl_ms"])
    return out

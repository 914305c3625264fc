"""The analytic side of tiered KV storage (``kv_tiers``) for ``kvfabric estimate``: what
one eviction costs each way out of HBM for the mean victim, and what the fluid
simulation's evictions, recomputes and tier traffic add up to."""

from __future__ import annotations

from typing import Any

import pandas as pd

from experiments.analysis.metrics.tiers import tier_metrics
from traffic import compute
from traffic.serving.tiers import RECOMPUTE, eviction_costs


def victim_costs(driver: Any, requests: pd.DataFrame) -> dict[str, Any] | None:
    """Estimated ms of each way out of HBM (offload and fetch back, or recompute) for a
    victim halfway through its output: the mean prompt plus half the mean output."""
    tiers = getattr(driver, "kv_tiers", None)
    if tiers is None or not len(requests):
        return None
    e = driver.decode[0]
    tokens = int(round(requests["input_tokens"].mean() + requests["output_tokens"].mean() / 2))
    nbytes = tokens * driver.tier_bpt
    recompute_s = compute.prefill_time_s(
        driver.model, driver.gpu, tokens, e.inst.tp, driver.efficiency
    )
    out = {"victim_tokens": tokens, "victim_kv_bytes": int(nbytes)}
    costs = {RECOMPUTE: recompute_s}
    host = e.inst.hosts[0]
    if tiers.cxl is not None:
        costs |= eviction_costs(nbytes, recompute_s, "cxl", tiers.cxl.gbps, tiers.cxl.latency_us)
    if tiers.flash is not None:
        rate = driver.flash_gbps(e.inst.hosts, driver.tier_nearest[host][0])
        costs |= eviction_costs(nbytes, recompute_s, "flash", rate, tiers.flash.latency_us)
        out["flash_path_gbps"] = rate
    out["round_trip_ms"] = {way: s * 1e3 for way, s in costs.items()}
    out["cheapest"] = min(costs, key=lambda way: (costs[way], way == RECOMPUTE))
    return out


def tier_estimate(
    driver: Any, requests: pd.DataFrame, tokens: pd.DataFrame, flows: pd.DataFrame
) -> dict[str, Any] | None:
    """The fluid simulation's ``kv_tiers`` numbers (``metrics.tiers.tier_metrics``) and
    :func:`victim_costs`; None without ``kv_tiers``."""
    if getattr(driver, "kv_tiers", None) is None:
        return None
    m = tier_metrics(requests, tokens, flows) or {}
    return {
        "hbm_tokens_per_instance": driver.capacity,
        "evictions": m.get("evictions"),
        "requests_recomputed": m.get("requests_recomputed"),
        "recomputed_tokens": m.get("recomputed_tokens"),
        "bytes_moved_by_tier": {t: b["moved"] for t, b in (m.get("bytes_by_tier") or {}).items()},
        "stall_ms": m.get("stall_ms"),
        "itl_ms_never_evicted": m.get("itl_ms_never_evicted"),
        "victim": victim_costs(driver, requests),
    }

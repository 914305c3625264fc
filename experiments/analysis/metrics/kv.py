"""The numbers users quote about a serving run's KV cache: how much of the prompts the
prefix cache served (against what an infinite cache would have), and how much of the KV
transfer a layer-pipelined prefill hid, from requests.parquet.

Columns read (``traffic.serving.requests``): ``input_tokens``, ``cached_tokens``,
``local_hit_blocks``, ``remote_hit_blocks``, ``ideal_cached_tokens``,
``prefill_instance`` (None: the router never placed the request); ``kv_busy_ms``,
``kv_exposed_ms``. A column a run predates gives None for the numbers it feeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.stats import latency_stats, value_stats


def prefix_cache_metrics(requests: pd.DataFrame) -> dict[str, Any]:
    """Token hit rates of the prefix cache.

    Returns ``{requests, prompt_tokens, cached_tokens, hit_rate, local_hit_rate,
    remote_hit_rate, ideal_hit_rate}``: ``hit_rate`` = Σ cached ÷ Σ prompt tokens;
    ``local_hit_rate`` and ``remote_hit_rate`` split it (they sum to it) by where each
    request's hit blocks were held, its own prefill server or another one (fetched over
    the fabric); ``ideal_hit_rate`` = Σ ideal_cached ÷ Σ prompt tokens, an infinite cache
    on the same arrivals. Only requests the router placed count (one that can never fit
    an instance looks nothing up). Rates are None without prompt tokens.
    """
    placed = requests
    if "prefill_instance" in requests:
        placed = requests[requests["prefill_instance"].notna()]
    prompt = float(placed["input_tokens"].sum()) if "input_tokens" in placed else 0.0
    cached = placed["cached_tokens"].astype(float) if "cached_tokens" in placed else None
    out: dict[str, Any] = {
        "requests": len(placed),
        "prompt_tokens": int(prompt),
        "cached_tokens": None if cached is None else int(cached.sum()),
        "hit_rate": None,
        "local_hit_rate": None,
        "remote_hit_rate": None,
        "ideal_hit_rate": None,
    }
    if prompt <= 0 or cached is None:
        return out
    out["hit_rate"] = float(cached.sum()) / prompt
    if {"local_hit_blocks", "remote_hit_blocks"} <= set(placed):
        local = placed["local_hit_blocks"].astype(float).to_numpy()
        hits = local + placed["remote_hit_blocks"].astype(float).to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            local_tokens = np.where(hits > 0, cached.to_numpy() * local / hits, 0.0)
        out["local_hit_rate"] = float(local_tokens.sum()) / prompt
        out["remote_hit_rate"] = out["hit_rate"] - out["local_hit_rate"]
    if "ideal_cached_tokens" in placed:
        out["ideal_hit_rate"] = float(placed["ideal_cached_tokens"].astype(float).sum()) / prompt
    return out


def pipelining_metrics(requests: pd.DataFrame) -> dict[str, Any]:
    """How much of the KV transfer happened while prefill still ran.

    Per request, ``kv_busy_ms`` is the time some of its KV was on the way and
    ``kv_exposed_ms`` the part of it after prefill ended (what TTFT waits for). Returns
    ``{requests, hidden_fraction, hidden_fraction_per_request, kv_busy_ms,
    kv_exposed_ms}``: ``hidden_fraction`` = 1 − Σ exposed ÷ Σ busy (long transfers weigh
    more; None without a measured transfer), ``hidden_fraction_per_request`` the value
    stats of 1 − exposed ÷ busy, the ``*_ms`` latency stats. Only requests whose
    transfer arrived count.
    """
    if not {"kv_busy_ms", "kv_exposed_ms"} <= set(requests):  # a run that predates them
        requests = pd.DataFrame({"kv_busy_ms": [], "kv_exposed_ms": []})
    busy = requests["kv_busy_ms"].astype(float)
    exposed = requests["kv_exposed_ms"].astype(float)
    both = busy.notna() & exposed.notna() & (busy > 0)
    total = float(busy[both].sum())
    return {
        "requests": int(both.sum()),
        "hidden_fraction": 1 - float(exposed[both].sum()) / total if total > 0 else None,
        "hidden_fraction_per_request": value_stats(np.asarray(1 - exposed[both] / busy[both])),
        "kv_busy_ms": latency_stats(busy[both]),
        "kv_exposed_ms": latency_stats(exposed[both]),
    }

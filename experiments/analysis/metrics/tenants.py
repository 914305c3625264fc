"""Noisy-neighbour slowdown within one run: a victim tenant's latency while an
aggressor tenant has traffic in flight, against the same tenant's latency while the
aggressor is idle (a spec's ``noisy_neighbour: [{victim, aggressor}]``).

The victim's latency is its inter-token latency when it is a serving tenant (tokens
timestamped at ``t_ns``), otherwise its flows' FCT (by start instant). The aggressor
is active over the union of its flows' [start, end] intervals.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.stats import latency_stats, slowdown


def active_intervals(flows: pd.DataFrame, tenant: str) -> np.ndarray:
    """Merged, sorted ``[start_ns, end_ns]`` intervals in which ``tenant`` had a flow
    in flight (a flow without an end counts from its start to its start)."""
    mine = flows[flows["tenant"] == tenant]
    start = mine["t_start_ns"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    end = mine["t_end_ns"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    keep = np.isfinite(start)
    start, end = start[keep], np.where(np.isfinite(end[keep]), end[keep], start[keep])
    order = np.argsort(start)
    merged: list[list[float]] = []
    for s, e in zip(start[order], end[order], strict=True):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return np.asarray(merged, dtype=float).reshape(-1, 2)


def inside(times: np.ndarray, intervals: np.ndarray) -> np.ndarray:
    """For each instant, whether it falls in one of the (merged, sorted) intervals."""
    if not len(intervals):
        return np.zeros(len(times), dtype=bool)
    i = np.searchsorted(intervals[:, 0], times, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(times), dtype=bool)
    out[ok] = times[ok] <= intervals[i[ok], 1]
    return out


def noisy_neighbour(
    flows: pd.DataFrame,
    tokens: pd.DataFrame | None,
    requests: pd.DataFrame | None,
    victim: str,
    aggressor: str,
) -> dict[str, Any]:
    """The victim's latency with and without the aggressor active, and the slowdown
    (p99 and p50 ratios; 1.0 is perfect isolation, None without data on a side)."""
    intervals = active_intervals(flows, aggressor)
    serving = (
        tokens is not None
        and len(tokens)
        and requests is not None
        and len(requests)
        and (requests["tenant"] == victim).any()
    )
    if serving:
        ids = requests.loc[requests["tenant"] == victim, "request_id"]
        mine = tokens[tokens["request_id"].isin(ids)].dropna(subset=["itl_ms"])
        times, values, metric = mine["t_ns"].to_numpy(float), mine["itl_ms"], "itl_ms"
    else:
        mine = flows[(flows["tenant"] == victim) & flows["ok"].astype(bool)]
        times = mine["t_start_ns"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
        values, metric = mine["fct_ms"].astype(float), "fct_ms"
    hit = inside(times, intervals)
    with_active = latency_stats(values.to_numpy(float)[hit])
    without = latency_stats(values.to_numpy(float)[~hit])
    return {
        "victim": victim,
        "aggressor": aggressor,
        "metric": metric,
        "aggressor_active_s": float((intervals[:, 1] - intervals[:, 0]).sum() / 1e9),
        "with_aggressor": with_active,
        "without_aggressor": without,
        "slowdown_p99": slowdown(with_active, without, "p99"),
        "slowdown_p50": slowdown(with_active, without, "p50"),
    }

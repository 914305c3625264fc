"""What the repeats of one sweep point (``kvfabric run --repeat R``: the same point, seeds
seed..seed+R-1) say together: per primary metric, each run's value, their mean with its
95 % interval across seeds and their coefficient of variation. Written into each of
those runs' summary.json as ``repeats`` (the runner), so a figure is never read without
its spread.

    repeats_block([summary_seed1, summary_seed2, summary_seed3])
    # {"runs": [...], "seeds": [1, 2, 3], "interval": "...",
    #  "metrics": {"ttft_ms.p50": {"values": [...], "mean": ..., "cv": ...,
    #                              "ci95": {"low": ..., "high": ..., ...}}, ...}}

Partial or failed runs are left out (their numbers cover part of the traffic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from experiments.analysis.intervals import across_seeds, coefficient_of_variation

# The primary metrics (#29): name in the block -> path into summary.json's ``metrics``.
PRIMARY: dict[str, tuple[str, ...]] = {
    "ttft_ms.p50": ("ttft_ms", "p50"),
    "ttft_ms.p99": ("ttft_ms", "p99"),
    "itl_ms.p50": ("itl_ms", "p50"),
    "itl_ms.p99": ("itl_ms", "p99"),
    "kv_transfer_ms.p50": ("kv_transfer_ms", "p50"),
    "kv_transfer_ms.p99": ("kv_transfer_ms", "p99"),
    "fct_ms.p50": ("fct_ms", "p50"),
    "fct_ms.p99": ("fct_ms", "p99"),
    "goodput_real_gbps": ("goodput_real_gbps",),
    "serving.goodput_rps": ("serving", "goodput_rps"),
}


def _at(metrics: Any, path: tuple[str, ...]) -> float | None:
    for key in path:
        if not isinstance(metrics, Mapping):
            return None
        metrics = metrics.get(key)
    number = isinstance(metrics, int | float) and not isinstance(metrics, bool)
    return float(metrics) if number else None


def complete(summary: Mapping[str, Any]) -> bool:
    return not summary.get("partial") and not summary.get("error")


def repeats_block(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``repeats`` block of one sweep point's runs (``None`` with fewer than 2
    complete runs)."""
    runs = [s for s in summaries if complete(s)]
    if len(runs) < 2:
        return None
    metrics: dict[str, Any] = {}
    for name, path in PRIMARY.items():
        values = [_at(s.get("metrics"), path) for s in runs]
        if any(v is None for v in values):
            continue
        ci = across_seeds(values)
        metrics[name] = {
            "values": values,
            "mean": ci.estimate if ci else None,
            "cv": coefficient_of_variation(values),
            "ci95": ci.as_json() if ci else None,
        }
    return {
        "runs": [s.get("run_id") for s in runs],
        "seeds": [s.get("seed") for s in runs],
        "left_out": [s.get("run_id") for s in summaries if not complete(s)],
        "interval": "95 % interval of the mean across seeds (Student's t over the runs)",
        "metrics": metrics,
    }

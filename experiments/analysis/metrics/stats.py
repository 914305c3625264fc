"""Summary statistics shared by every metric: the latency-stats shape of summary.json,
fairness and the noisy-neighbour slowdown."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

LATENCY_KEYS = ("count", "mean", "p50", "p90", "p99", "p999", "max")
_QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
# The fewest samples that support each percentile: p99 needs 100 and p99.9 needs 1,000
# (#29), so that at least one sample lies beyond it; with fewer, "p99" is the maximum or
# an interpolation towards it, and says nothing of the tail. summary.json keeps every
# number (with its ``count``); the reports print only the supported ones.
MIN_SAMPLES = {"p50": 1, "p90": 10, "p99": 100, "p999": 1000}

Stats = dict[str, Any]


def finite(values: Iterable[float] | None) -> np.ndarray:
    """The finite values as float64: NaN and inf mark "not measured" (an unserved request,
    a failed flow) and must not drag a percentile around."""
    if values is None:
        return np.empty(0)
    arr = np.asarray(list(values) if not hasattr(values, "__array__") else values, dtype=float)
    return arr[np.isfinite(arr)].ravel()


def latency_stats(values: Iterable[float] | None) -> Stats:
    """``{count, mean, p50, p90, p99, p999, max}`` of latencies in ms, the shape every
    latency metric takes in summary.json.

    Non-finite values are ignored (they mean "not measured"). Empty input gives
    ``count 0`` and ``None`` for the rest rather than NaN, because summary.json is strict
    JSON (NaN is not valid JSON) and a reader should see "no data", not a fake number.
    Percentiles use linear interpolation between order statistics (numpy's default).
    """
    arr = finite(values)
    if arr.size == 0:
        return {"count": 0} | {k: None for k in LATENCY_KEYS[1:]}
    out: Stats = {"count": int(arr.size), "mean": float(arr.mean())}
    for key, q in _QUANTILES.items():
        out[key] = float(np.percentile(arr, q))
    out["max"] = float(arr.max())
    return out


def percentile_supported(key: str, n: int | None) -> bool:
    """Whether ``n`` samples support percentile ``key`` (``p50`` ... ``p999``); any other
    key, and an unknown ``n`` (a prediction states none), is not judged here: True."""
    return n is None or key not in MIN_SAMPLES or n >= MIN_SAMPLES[key]


def supported_percentiles(n: int) -> tuple[str, ...]:
    """The percentiles of :data:`LATENCY_KEYS` that ``n`` samples support, in order."""
    return tuple(key for key in MIN_SAMPLES if n >= MIN_SAMPLES[key])


def value_stats(values: Iterable[float] | None) -> Stats:
    """``{count, mean, min, p50, max}`` for non-latency quantities (goodput, shares) where
    the worst case is the minimum; same None convention as :func:`latency_stats`."""
    arr = finite(values)
    if arr.size == 0:
        return {"count": 0, "mean": None, "min": None, "p50": None, "max": None}
    return {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "p50": float(np.percentile(arr, 50)),
        "max": float(arr.max()),
    }


def jain_fairness(values: Iterable[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all equal, 1/n when one
    party gets everything. None for no values or all zeros (0/0, nobody got anything)."""
    arr = finite(values)
    if arr.size and arr.min() < 0:
        raise ValueError("jain_fairness needs non-negative values (throughputs, shares)")
    denom = arr.size * float(np.sum(arr**2))
    if denom == 0:
        return None
    return float(np.sum(arr)) ** 2 / denom


def slowdown(
    with_active: Iterable[float] | Mapping[str, Any],
    without: Iterable[float] | Mapping[str, Any],
    stat: str = "p99",
) -> float | None:
    """Noisy-neighbour slowdown of a victim tenant: its ``stat`` (p99 by default) latency
    with the other tenant of a declared pair active, divided by the same without it.

    Each side is either raw latencies (ms) or a latency_stats dict (so two runs' summary.json
    can be compared without their tables). None when either side has no data or the
    baseline is 0. 1.0 means perfect isolation.
    """
    num, den = _pick(with_active, stat), _pick(without, stat)
    if num is None or den is None or den == 0:
        return None
    return num / den


def _pick(side: Iterable[float] | Mapping[str, Any], stat: str) -> float | None:
    if stat not in LATENCY_KEYS[1:]:
        raise ValueError(f"unknown stat {stat!r}; allowed: {', '.join(LATENCY_KEYS[1:])}")
    stats = side if isinstance(side, Mapping) else latency_stats(side)
    value = stats.get(stat)
    return None if value is None else float(value)


def json_records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of a metric table as plain Python dicts for summary.json: numpy scalars become
    int/float and NaN becomes None, because strict JSON has no NaN."""
    out = []
    for row in table.to_dict(orient="records"):
        clean = {}
        for key, value in row.items():
            if isinstance(value, np.generic):
                value = value.item()
            if isinstance(value, float) and not np.isfinite(value):
                value = None
            clean[str(key)] = value
        out.append(clean)
    return out

"""95 % confidence intervals for the numbers a report compares, and the spread of repeats.

- :func:`over_requests`: a percentile (or the mean) of one run's samples (requests, tokens,
  flows), by the percentile bootstrap over those samples. Says how precisely this run
  measured its own distribution; not how another seed would come out.
- :func:`across_seeds`: the mean of one figure over the runs (seeds) of a sweep point,
  by Student's t. Not a bootstrap: with the 3 to 10 seeds a sweep point has, resampling
  seeds gives intervals that are too narrow (a bootstrap of 3 values covers the mean
  about three times in four), while t is exact for normal noise and close otherwise.
- :func:`ratio_over_requests`: ``statistic(a) / statistic(b)`` of two runs by bootstrapping
  each sample on its own; ``excludes_one`` is the "there is a difference" flag.
- :func:`coefficient_of_variation`: standard deviation over mean across repeats.

Every bootstrap draws from a ``numpy`` generator seeded by the caller's ``seed``: the same
inputs and seed give the same interval, so a report regenerated from its tables is
byte-identical. Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.analysis.metrics.stats import finite

LEVEL = 0.95
RESAMPLES = 1000
_CHUNK_CELLS = 2_000_000  # resampled values held at once
_PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
# Student's t, two-sided 95 %, by degrees of freedom (beyond 30: Cornish-Fisher from z)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
_T975 += (2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
_T975 += (2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95 % interval ``[low, high]`` from ``n`` samples."""

    estimate: float
    low: float
    high: float
    n: int
    method: str  # "bootstrap over requests", "t over seeds", ...

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def excludes_one(self) -> bool:
        """For a ratio: whether the interval says the two differ."""
        return not self.contains(1.0)

    def as_json(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "level": LEVEL,
            "method": self.method,
        }


def statistic_of(values: np.ndarray, statistic: str, axis: int | None = None) -> Any:
    """``mean`` or a percentile (``p50`` ... ``p999``, linear interpolation as in
    ``latency_stats``) of ``values`` along ``axis``."""
    if statistic == "mean":
        return np.mean(values, axis=axis)
    if statistic not in _PERCENTILES:
        raise ValueError(f"statistic {statistic!r}: allowed mean, {', '.join(_PERCENTILES)}")
    return np.percentile(values, _PERCENTILES[statistic], axis=axis)


def _replicates(arr: np.ndarray, statistic: str, rng: np.random.Generator, n_boot: int):
    """``n_boot`` bootstrap replicates of ``statistic`` of ``arr``, drawn in chunks."""
    out = np.empty(n_boot)
    per = max(1, _CHUNK_CELLS // max(arr.size, 1))
    for start in range(0, n_boot, per):
        stop = min(start + per, n_boot)
        draws = arr[rng.integers(0, arr.size, size=(stop - start, arr.size))]
        out[start:stop] = statistic_of(draws, statistic, axis=1)
    return out


def _tails(replicates: np.ndarray) -> tuple[float, float]:
    alpha = (1 - LEVEL) / 2
    low, high = np.percentile(replicates, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)


def over_requests(
    values: Iterable[float] | None, statistic: str, seed: int, n_boot: int = RESAMPLES
) -> Interval | None:
    """``statistic`` of one run's samples with its percentile-bootstrap 95 % interval
    (``None`` for fewer than 2 finite samples)."""
    arr = finite(values)
    if arr.size < 2:
        return None
    reps = _replicates(arr, statistic, np.random.default_rng(seed), n_boot)
    low, high = _tails(reps)
    estimate = float(statistic_of(arr, statistic))
    return Interval(estimate, low, high, int(arr.size), "bootstrap over requests")


def t_quantile(df: int) -> float:
    """Two-sided 95 % quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def across_seeds(per_seed: Iterable[float] | None) -> Interval | None:
    """The mean of one figure over the runs of a sweep point (one value per seed) with
    its Student-t 95 % interval (``None`` for fewer than 2 runs)."""
    arr = finite(per_seed)
    if arr.size < 2:
        return None
    mean = float(arr.mean())
    half = t_quantile(arr.size - 1) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return Interval(mean, mean - half, mean + half, int(arr.size), "t over seeds")


def ratio_over_requests(
    a: Iterable[float] | None,
    b: Iterable[float] | None,
    statistic: str,
    seed: int,
    n_boot: int = RESAMPLES,
) -> Interval | None:
    """``statistic(a) / statistic(b)`` of two runs' samples, each resampled on its own,
    with its 95 % interval; ``None`` when either has fewer than 2 samples or ``b``'s
    statistic is not positive."""
    xa, xb = finite(a), finite(b)
    if xa.size < 2 or xb.size < 2:
        return None
    base = float(statistic_of(xb, statistic))
    if base <= 0:
        return None
    rng = np.random.default_rng(seed)
    num = _replicates(xa, statistic, rng, n_boot)
    den = _replicates(xb, statistic, rng, n_boot)
    keep = den > 0
    low, high = _tails(num[keep] / den[keep])
    estimate = float(statistic_of(xa, statistic)) / base
    return Interval(estimate, low, high, int(min(xa.size, xb.size)), "bootstrap over requests")


def coefficient_of_variation(values: Iterable[float] | None) -> float | None:
    """Sample standard deviation over mean of repeats (``None`` for fewer than 2 values
    or a mean of 0)."""
    arr = finite(values)
    if arr.size < 2 or float(arr.mean()) == 0:
        return None
    return float(arr.std(ddof=1) / abs(arr.mean()))

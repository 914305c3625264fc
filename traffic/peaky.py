"""Production burstiness: arrivals whose busiest second absorbs a stated share of a window.

FineServe's 1.48 billion requests show peak seconds that absorb up to 18 % of an hour's
requests. ``peaky_times`` generates such a trace as a *heavy-tailed modulated Poisson
process*, one window of ``window_s`` seconds (rounded up to whole seconds) at a time:

1. The window holds M requests: M ~ Poisson(rate × window_s), at most the requests
   still wanted when a request count ``n`` ends the arrivals.
2. One whole second of the window, chosen uniformly, is its *peak second*; it receives
   round(peak_second_share × M) of them.
3. Every other second s gets an intensity w_s ~ Pareto(α = 1.5) (heavy-tailed, finite
   mean: a few busy seconds, many quiet ones), clipped so that no second expects more
   than half the peak second's requests; the remaining requests fall into those seconds
   multinomially in proportion to w_s. That is a Poisson process modulated per second by
   w_s, conditioned on its window count.
4. Inside a second, arrival instants are uniform (a Poisson process given its count).

So the busiest whole second of each window (seconds counted from the window's start)
holds peak_second_share of the window's requests up to rounding, and the mean rate stays
``rate_per_s``. A window cut short by ``duration_s`` keeps only the arrivals before the
cut, so its share holds only if its peak second falls before it.
"""

from __future__ import annotations

import math

import numpy as np

PARETO_ALPHA = 1.5  # tail index of the per-second intensities
QUIET_CAP = 0.5  # no other second expects more than this fraction of the peak's requests


def check_peaky(peak_second_share: float, window_s: float) -> None:
    """Refuse a share no window of ``window_s`` seconds can have as its busiest second."""
    if not window_s >= 2:
        raise ValueError(f"peaky needs window_s >= 2 seconds, got {window_s}")
    seconds = math.ceil(window_s)
    if not 1 / seconds < peak_second_share < 1:
        raise ValueError(
            f"peak_second_share must lie between 1/{seconds} (every second alike) and 1"
            f" (all in one second) for window_s={window_s}, got {peak_second_share}"
        )


def peaky_times(
    rng: np.random.Generator,
    rate_per_s: float,
    n: int | None,
    duration_s: float | None,
    peak_second_share: float,
    window_s: float,
) -> np.ndarray:
    """Sorted arrival instants (s) of the process in the module docstring, until ``n``
    arrivals or ``duration_s``, whichever comes first (at least one must be given)."""
    if n is None and duration_s is None:
        raise ValueError("peaky arrivals need n or duration_s")
    check_peaky(peak_second_share, window_s)
    seconds = math.ceil(window_s)
    out: list[np.ndarray] = []
    have, start = 0, 0.0
    while (n is None or have < n) and (duration_s is None or start < duration_s):
        count = int(rng.poisson(rate_per_s * seconds))
        if n is not None:
            count = min(count, n - have)
        times = start + _window(rng, count, seconds, peak_second_share)
        if duration_s is not None:
            times = times[times < duration_s]
        out.append(times)
        have += len(times)
        start += seconds
    return np.concatenate(out) if out else np.zeros(0)


def _window(rng: np.random.Generator, count: int, seconds: int, share: float) -> np.ndarray:
    """``count`` sorted instants in [0, seconds) with one peak second (steps 2-4)."""
    peak = round(share * count)
    rest = count - peak
    weights = rng.pareto(PARETO_ALPHA, size=seconds - 1) + 1.0
    cap = QUIET_CAP * peak / rest if rest else 0.0
    for _ in range(8):  # clipping moves weight to the others; a few passes settle it
        weights = weights / weights.sum()
        if cap * (seconds - 1) <= 1 or weights.max() <= cap:
            break  # (a cap below the uniform share cannot be met: stay near uniform)
        weights = np.minimum(weights, cap)
    quiet = rng.multinomial(rest, weights / weights.sum()) if rest else np.zeros(seconds - 1)
    peak_at = int(rng.integers(seconds))
    per_second = np.insert(quiet.astype(np.int64), peak_at, peak)
    second_of = np.repeat(np.arange(seconds), per_second)
    return np.sort(second_of + rng.random(len(second_of)))

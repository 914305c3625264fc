"""Numbers the draft's procedures derive from their runs' KPIs: penalties, the
inflection point and degradation factors, the scale limit, EP scaling efficiency,
convergence time and the coefficient of variation. Inputs are KPI values already
computed per run (or per sweep point), so each is a plain function of numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from experiments.analysis.metrics.stats import finite

SCALE_LIMIT_TOLERANCE = 0.10  # 12.1: > 10% worse than the smallest configuration


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return float(numerator) / float(denominator)


def contention_penalty(contended_p99: float | None, isolated_p99: float | None) -> float | None:
    """7.4: contended P99 ÷ isolated P99 of one traffic class (1.0: no contention)."""
    return ratio(contended_p99, isolated_p99)


def interference_penalty_pct(multi: float | None, single: float | None) -> float | None:
    """10.3: (multi-tenant − single-tenant) ÷ single-tenant × 100%."""
    r = ratio(multi, single)
    return None if r is None else (r - 1.0) * 100.0


def degradation_factors(
    p99_by_load: Mapping[float, float], at: Sequence[float] = (0.5, 0.75, 0.9)
) -> dict[float, float | None]:
    """10.4: P99 at each load of ``at`` ÷ P99 at the lowest load measured."""
    base = p99_by_load[min(p99_by_load)]
    return {load: ratio(p99_by_load.get(load), base) for load in at}


def inflection_point(p99_by_load: Mapping[float, float], tolerance: float = 0.10) -> float | None:
    """10.4: the lowest load whose P99 exceeds the lowest load's P99 by more than
    ``tolerance`` (the draft names the point without defining it: this is our rule,
    the same 10% as 12.1's). None when the curve never leaves the band."""
    loads = sorted(p99_by_load)
    base = p99_by_load[loads[0]]
    return next((x for x in loads[1:] if p99_by_load[x] > base * (1 + tolerance)), None)


def scale_limit(
    kpis_by_size: Mapping[int, Mapping[str, float]],
    higher_is_better: Iterable[str] = (),
    tolerance: float = SCALE_LIMIT_TOLERANCE,
) -> int | None:
    """12.1: the first size at which any KPI is more than ``tolerance`` worse than at
    the smallest size (latencies worse when higher; ``higher_is_better`` KPIs, such as
    throughputs, worse when lower). None when every size stays within it."""
    better_high = set(higher_is_better)
    sizes = sorted(kpis_by_size)
    base = kpis_by_size[sizes[0]]
    for size in sizes[1:]:
        for name, value in kpis_by_size[size].items():
            ref = base.get(name)
            if ref is None or value is None or ref == 0:
                continue
            change = (value - ref) / abs(ref)
            if (-change if name in better_high else change) > tolerance:
                return size
    return None


def ep_scaling_efficiency(latency_ep8: float, latency_epn: float, n: int) -> float | None:
    """7.3: (latency at EP 8 ÷ latency at EP N) × N/8, as the draft writes it (it can
    exceed 1: reported as is)."""
    r = ratio(latency_ep8, latency_epn)
    return None if r is None else r * n / 8


def convergence_time_s(
    t_s: Sequence[float], rate: Sequence[float], start_s: float, tolerance: float = 0.05
) -> float | None:
    """8.3: seconds from ``start_s`` until ``rate`` stays within ``tolerance`` of its
    steady state (the mean of the last quarter of samples after ``start_s``). None
    without samples after ``start_s`` or when it never settles."""
    t, r = np.asarray(t_s, dtype=float), np.asarray(rate, dtype=float)
    after = t >= start_s
    t, r = t[after], r[after]
    if r.size == 0:
        return None
    steady = float(r[-max(1, r.size // 4) :].mean())
    outside = np.abs(r - steady) > tolerance * abs(steady)
    if not outside.any():
        return float(t[0] - start_s)
    last = int(np.nonzero(outside)[0][-1])
    return float(t[last + 1] - start_s) if last + 1 < t.size else None


def coefficient_of_variation(values: Iterable[float]) -> float | None:
    """Standard deviation ÷ mean (9.1's balance of decode workers)."""
    arr = finite(values)
    return float(arr.std() / arr.mean()) if arr.size and arr.mean() > 0 else None


def slo_bounded_rate(
    p99_by_rate: Mapping[float, tuple[float, float]], ttft_ms: float = 500.0, itl_ms: float = 50.0
) -> float | None:
    """11.1 (Request_Rate): the highest arrival rate whose (TTFT P99, ITL P99) both
    meet the SLO (the draft's Appendix B values by default: reference criteria)."""
    ok = [r for r, (t, i) in p99_by_rate.items() if t < ttft_ms and i < itl_ms]
    return max(ok) if ok else None


def pareto_xpyd(
    points: Mapping[str, tuple[float, float, float]], ttft_ms: float = 500.0, itl_ms: float = 50.0
) -> str | None:
    """6.2: of ``{xPyD: (TTFT P99, ITL P99, TPS_output)}``, the ratio with the highest
    TPS_output whose P99s meet the SLO; None when none does."""
    ok = {k: tps for k, (t, i, tps) in points.items() if t < ttft_ms and i < itl_ms}
    return max(ok, key=ok.__getitem__) if ok else None


def trend(values: Sequence[float]) -> dict[str, float | bool | None]:
    """13.x: the least-squares slope per window of a KPI sampled window by window, its
    change first → last as a fraction, and whether it grew at every window (the
    draft's flag for a possible leak)."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        return {"slope": None, "change": None, "monotonic_growth": False}
    slope = float(np.polyfit(np.arange(arr.size), arr, 1)[0])
    change = float((arr[-1] - arr[0]) / arr[0]) if arr[0] else None
    return {"slope": slope, "change": change, "monotonic_growth": bool(np.all(np.diff(arr) > 0))}

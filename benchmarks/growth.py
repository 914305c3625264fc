"""Does anything grow with time? The soak benchmark's analysis, pure: memory samples
and the flows table in, fitted slopes, per-minute figures and the verdict out.

Units: time in minutes since the traffic's t0 (the agents' common start), memory in
MB (10^6 bytes), lateness in ms. A slope is the least-squares line
(``numpy.polyfit``, degree 1) through the samples after the warm-up minute, up to
the end of the traffic.

What is judged ("memory and lateness do not grow with time"):

- each component's memory: fitted RSS slope × minutes < max(5% of its RSS at the
  start, 5 MB), the start being its first sample after ``WARMUP_MIN``;
- the agents' lateness: slope of the per-minute p99 × minutes < 0.5 ms.

The lateness is the column and the rows the fidelity monitor's ``lateness`` check
judges (``experiments.analysis.fidelity.lateness_check``): ``issue_lateness_ms``
(else ``lateness_ms``) of flows not released by a completed group; a flow belongs to
the minute in which it was scheduled (``t_sched_ns``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

MB = 1e6
NS_PER_MIN = 60e9
WARMUP_MIN = 1.0
MEMORY_SHARE = 0.05  # of the start RSS a component may grow over the run
MEMORY_FLOOR_MB = 5.0  # ... but never less than this
LATENESS_GROWTH_MS = 0.5  # the per-minute p99 may rise this much over the run
MIN_FLOWS_PER_MINUTE = 100  # fewer and the minute's p99 is one flow's luck: not fitted


def slope_per_min(t_min: Iterable[float], values: Iterable[float]) -> float | None:
    """Least-squares slope of ``values`` against ``t_min`` (units per minute); None
    with fewer than 3 finite points or no spread in time."""
    t = np.asarray(list(t_min), dtype=np.float64)
    y = np.asarray(list(values), dtype=np.float64)
    keep = np.isfinite(t) & np.isfinite(y)
    t, y = t[keep], y[keep]
    if t.size < 3 or np.ptp(t) == 0:
        return None
    return float(np.polyfit(t, y, 1)[0])


def memory_limit_mb(start_mb: float) -> float:
    return max(MEMORY_SHARE * start_mb, MEMORY_FLOOR_MB)


@dataclass(frozen=True)
class MemoryGrowth:
    """One component's memory over the soak (RSS; USS where it could be read)."""

    component: str
    samples: int
    start_mb: float | None
    end_mb: float | None
    end_over_start: float | None
    slope_mb_per_min: float | None
    growth_mb: float | None  # slope × the run's minutes: what is judged
    limit_mb: float | None
    uss_start_mb: float | None
    uss_end_mb: float | None
    uss_slope_mb_per_min: float | None
    ok: bool


def memory_growth(
    samples: pd.DataFrame, minutes: float, warmup_min: float = WARMUP_MIN
) -> list[MemoryGrowth]:
    """Per component (``samples``: t_min, component, rss_mb, uss_mb), from the first
    sample at or after ``warmup_min`` on. A component with too few samples to fit
    fails: its growth is unknown, not zero."""
    out = []
    for component, group in samples.groupby("component", sort=True):
        g = group[group["t_min"] >= warmup_min].sort_values("t_min")
        rss, uss = g["rss_mb"].to_numpy(float), g["uss_mb"].to_numpy(float)
        slope = slope_per_min(g["t_min"], rss)
        start = float(rss[0]) if rss.size else None
        end = float(rss[-1]) if rss.size else None
        limit = memory_limit_mb(start) if start is not None else None
        growth = slope * minutes if slope is not None else None
        known_uss = np.isfinite(uss)
        out.append(
            MemoryGrowth(
                component=str(component),
                samples=int(rss.size),
                start_mb=start,
                end_mb=end,
                end_over_start=end / start if start else None,
                slope_mb_per_min=slope,
                growth_mb=growth,
                limit_mb=limit,
                uss_start_mb=float(uss[known_uss][0]) if known_uss.any() else None,
                uss_end_mb=float(uss[known_uss][-1]) if known_uss.any() else None,
                uss_slope_mb_per_min=slope_per_min(g["t_min"][known_uss], uss[known_uss]),
                ok=growth is not None and limit is not None and growth < limit,
            )
        )
    return out


def judged_lateness(flows: pd.DataFrame) -> pd.DataFrame:
    """t_sched_ns and lateness_ms of the flows the fidelity ``lateness`` check judges."""
    column = "issue_lateness_ms" if "issue_lateness_ms" in flows else "lateness_ms"
    if "after" in flows:
        flows = flows[flows["after"].fillna(-1).astype(int) < 0]
    out = pd.DataFrame(
        {
            "t_sched_ns": pd.to_numeric(flows["t_sched_ns"], errors="coerce"),
            "lateness_ms": pd.to_numeric(flows[column], errors="coerce"),
        }
    )
    return out.dropna().astype({"t_sched_ns": np.int64, "lateness_ms": np.float64})


def lateness_by_minute(flows: pd.DataFrame, t0_ns: int, minutes: int) -> pd.DataFrame:
    """One row per minute 0 … minutes-1 since ``t0_ns``: flows, p50_ms, p99_ms (None
    where none was scheduled). Flows scheduled outside the run's minutes are left out."""
    late = judged_lateness(flows)
    minute = (late["t_sched_ns"] - t0_ns) // int(NS_PER_MIN)
    late = late[(minute >= 0) & (minute < minutes)].assign(minute=minute)
    rows = []
    for m in range(minutes):
        x = late.loc[late["minute"] == m, "lateness_ms"].to_numpy()
        rows.append(
            {
                "minute": m,
                "flows": int(x.size),
                "p50_ms": float(np.median(x)) if x.size else None,
                "p99_ms": float(np.quantile(x, 0.99)) if x.size else None,
            }
        )
    return pd.DataFrame(rows, columns=["minute", "flows", "p50_ms", "p99_ms"])


@dataclass(frozen=True)
class LatenessGrowth:
    minutes_fitted: int
    first_p99_ms: float | None
    last_p99_ms: float | None
    slope_ms_per_min: float | None
    growth_ms: float | None  # slope × the run's minutes: what is judged
    limit_ms: float
    ok: bool


def lateness_growth(per_minute: pd.DataFrame, minutes: float) -> LatenessGrowth:
    """The slope of the per-minute p99 over the minutes with at least
    ``MIN_FLOWS_PER_MINUTE`` flows (each at its middle). Two such minutes suffice for a
    line; with fewer the growth is unknown and the check fails."""
    fitted = per_minute[per_minute["flows"] >= MIN_FLOWS_PER_MINUTE]
    t = fitted["minute"].to_numpy(float) + 0.5
    p99 = fitted["p99_ms"].to_numpy(float)
    slope = float(np.polyfit(t, p99, 1)[0]) if len(fitted) >= 2 else None
    growth = slope * minutes if slope is not None else None
    return LatenessGrowth(
        minutes_fitted=len(fitted),
        first_p99_ms=float(p99[0]) if p99.size else None,
        last_p99_ms=float(p99[-1]) if p99.size else None,
        slope_ms_per_min=slope,
        growth_ms=growth,
        limit_ms=LATENESS_GROWTH_MS,
        ok=growth is not None and growth < LATENESS_GROWTH_MS,
    )


def size_by_minute(t_min: Iterable[float], size_mb: Iterable[float]) -> list[dict]:
    """A folder's size at the end of each minute (its last sample in that minute) and
    what it grew in that minute."""
    frame = pd.DataFrame({"t_min": list(t_min), "mb": list(size_mb)}).dropna()
    frame = frame[frame["t_min"] >= 0].sort_values("t_min")
    last = frame.groupby(frame["t_min"].astype(int))["mb"].last()
    grown = last.diff().fillna(last.iloc[0] if len(last) else 0.0)
    rows = zip(last.index, last.to_numpy(), grown.to_numpy(), strict=True)
    return [{"minute": int(m), "mb": float(v), "grown_mb": float(g)} for m, v, g in rows]


def growth_failures(memory: list[MemoryGrowth], lateness: LatenessGrowth) -> list[str]:
    """What grew (or could not be judged), one phrase each; empty: nothing grew."""
    out = []
    for m in memory:
        if m.ok:
            continue
        if m.growth_mb is None:
            out.append(f"{m.component}: memory not judged ({m.samples} samples after warm-up)")
        else:
            out.append(
                f"{m.component}: memory grew {m.growth_mb:.1f} MB over the run "
                f"(limit {m.limit_mb:.1f} MB)"
            )
    if not lateness.ok:
        if lateness.growth_ms is None:
            out.append(
                f"lateness not judged ({lateness.minutes_fitted} minutes with "
                f"≥ {MIN_FLOWS_PER_MINUTE} flows)"
            )
        else:
            out.append(
                f"lateness p99 grew {lateness.growth_ms:.2f} ms over the run "
                f"(limit {lateness.limit_ms} ms)"
            )
    return out


def as_dicts(items: Iterable[MemoryGrowth | LatenessGrowth]) -> list[dict]:
    return [asdict(i) for i in items]

"""The KPIs a procedure derives across its points, seed by seed, with intervals. Pure.

A derived KPI (10.4's inflection point and degradation factors, 10.3's interference
penalty, 7.4's contention penalty, 12.1's scale limit, 11.1's SLO-bounded request rate,
6.2's best xPyD ratio, 7.3's EP scaling efficiency, 5.4's tier throughput ratio) compares
a test's points: it is
worked out once per seed, from that seed's run at each point (the same seed across
points: the same arrivals), and its estimate and 95 % interval are across the seeds
(``aggregate.cell``), as every other KPI's are. Only runs that count (faithful, no
error) are used; a seed missing a point it needs is left out, and ``n`` says how many
seeds gave a number. What is a word, not a number (6.2's choice of ratio; a limit the
points swept did not reach; no rate that met the SLO), is counted by seed: ``words``.

    derived_by_test(rows) -> {"10.4": {"Inflection_point TTFT p99 (load)": cell, ...}}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from experiments.analysis.bmwg.derived import (
    contention_penalty,
    degradation_factors,
    ep_scaling_efficiency,
    inflection_point,
    interference_penalty_pct,
    pareto_xpyd,
    ratio,
    scale_limit,
    slo_bounded_rate,
)
from experiments.bmwg.aggregate import cell, counted

Points = Mapping[str, Mapping[str, Any]]  # point -> that seed's row
NOT_REACHED = "not reached"  # a limit the points swept did not reach
NONE_MET = "none met the SLO"
Value = float | str | None  # a number; a word (a choice, or a limit not reached); None:
# the seed's runs lack what it needs
Derive = Callable[[Points], dict[str, Value]]

LATENCIES = ("TTFT p99 ms", "ITL p99 ms")


def _by_load(points: Points, column: str) -> dict[float, float]:
    """``bg50%`` → 0.5 for 10.4's points, each with its value of ``column``."""
    out = {}
    for point, row in points.items():
        m = re.fullmatch(r"bg(\d+)%", point.split(" ")[0])
        value = row.get(column)
        if m and value is not None:
            out[int(m.group(1)) / 100] = float(value)
    return out


def congestion_sensitivity(points: Points) -> dict[str, Value]:
    """10.4: the inflection point (the lowest load whose P99 is > 10 % above the
    unloaded one, as a load fraction) and the degradation factor at each loaded point."""
    out: dict[str, Value] = {}
    for column in LATENCIES:
        curve = _by_load(points, column)
        if 0.0 not in curve or len(curve) < 2:
            continue
        name = column.removesuffix(" ms")
        knee = inflection_point(curve)
        out[f"Inflection_point {name} (load)"] = NOT_REACHED if knee is None else knee
        loaded = sorted(x for x in curve if x > 0)
        for load, factor in degradation_factors(curve, loaded).items():
            out[f"Degradation_factor {name} at {load:.0%}"] = factor
    return out


def multi_tenant(points: Points) -> dict[str, Value]:
    """10.3: (multi − single) ÷ single tenant × 100 % for each other tenant's point."""
    alone = points.get("single")
    if alone is None:
        return {}
    out: dict[str, Value] = {}
    for other in ("+ep", "+kv"):
        if other in points:
            for column in LATENCIES:
                name = f"Interference_penalty {other} {column.removesuffix(' ms')} %"
                out[name] = interference_penalty_pct(points[other].get(column), alone.get(column))
    return out


def contention(points: Points) -> dict[str, Value]:
    """7.4: contended ÷ isolated P99 of each class: KV with the EP all-to-all beside it
    (``kv+ep@x`` ÷ ``kv@x``) and EP beside KV at x (``kv+ep@x`` ÷ ``ep``)."""
    out: dict[str, Value] = {}
    for point, row in points.items():
        m = re.fullmatch(r"kv\+ep@(\d+%)", point)
        if not m:
            continue
        at = m.group(1)
        kv, ep = points.get(f"kv@{at}"), points.get("ep")
        if kv is not None:
            out[f"Contention_penalty KV at {at}"] = contention_penalty(
                row.get("KV_xfer_latency p99 ms"), kv.get("KV_xfer_latency p99 ms")
            )
        if ep is not None:
            out[f"Contention_penalty EP at {at}"] = contention_penalty(
                row.get("EP_alltoall_latency p99 ms"), ep.get("EP_alltoall_latency p99 ms")
            )
    return out


SCALE_KPIS = ("TTFT p99 ms", "KV_xfer_latency p99 ms", "TPS_output tokens/s", "KV_BW Gbit/s")
HIGHER_IS_BETTER = ("TPS_output tokens/s", "KV_BW Gbit/s")


def scale_limits(points: Points) -> dict[str, Value]:
    """12.1: the first size (GPUs) at which a KPI is > 10 % worse than at the smallest."""
    by_size = {}
    for point, row in points.items():
        m = re.fullmatch(r"(\d+)gpus", point)
        if m:
            by_size[int(m.group(1))] = {k: row.get(k) for k in SCALE_KPIS if row.get(k) is not None}
    if len(by_size) < 2:
        return {}
    limit = scale_limit(by_size, HIGHER_IS_BETTER)
    return {"Scale_limit (GPUs)": NOT_REACHED if limit is None else float(limit)}


def _grid(point: str, key: str) -> float | None:
    """The value of ``key=`` in a point's label (``"2P6D rate_per_s=4"``)."""
    m = re.search(rf"(?:^| ){re.escape(key)}=([0-9.]+)", point)
    return float(m.group(1)) if m else None


def _meets(row: Mapping[str, Any]) -> tuple[float, float] | None:
    t, i = row.get("TTFT p99 ms"), row.get("ITL p99 ms")
    return None if t is None or i is None else (float(t), float(i))


def slo_rate(points: Points) -> dict[str, Value]:
    """11.1: the highest request rate whose TTFT and ITL P99 both meet the SLO (the
    draft's Appendix B: 500 ms, 50 ms)."""
    p99 = {}
    for point, row in points.items():
        rate, met = _grid(point, "rate_per_s"), _meets(row)
        if rate is not None and met is not None:
            p99[rate] = met
    if not p99:
        return {}
    best = slo_bounded_rate(p99)
    return {"Request_Rate (req/s)": NONE_MET if best is None else best}


def xpyd_choice(points: Points) -> dict[str, Value]:
    """6.2: at each request rate, the xPyD ratio with the highest TPS_output whose P99s
    meet the SLO."""
    by_rate: dict[float, dict[str, tuple[float, float, float]]] = {}
    for point, row in points.items():
        ratio_name, rate = point.split(" ")[0], _grid(point, "rate_per_s")
        met, tps = _meets(row), row.get("TPS_output tokens/s")
        if rate is not None and met is not None and tps is not None:
            by_rate.setdefault(rate, {})[ratio_name] = (*met, float(tps))
    return {
        f"Pareto_xPyD at {rate:g} req/s": pareto_xpyd(choices) or NONE_MET
        for rate, choices in sorted(by_rate.items())
    }


def ep_scaling(points: Points) -> dict[str, Value]:
    """7.3: (EP8 ÷ EPN all-to-all latency, P50) × N/8 for each N swept."""
    latency = {}
    for point, row in points.items():
        m = re.fullmatch(r"EP(\d+)", point)
        if m and row.get("EP_alltoall_latency p50 ms") is not None:
            latency[int(m.group(1))] = float(row["EP_alltoall_latency p50 ms"])
    if 8 not in latency:
        return {}
    return {
        f"EP_scaling_efficiency EP{n}": ep_scaling_efficiency(latency[8], value, n)
        for n, value in sorted(latency.items())
        if n != 8
    }


GPU_TO_GPU = "hbm-remote-hbm"


def tier_ratio(points: Points) -> dict[str, Value]:
    """5.4: each tier pair's KV transfer bandwidth ÷ GPU-to-GPU's at the same size."""
    out: dict[str, Value] = {}
    for point, row in points.items():
        tier, _, size = point.partition(" ")
        base = points.get(f"{GPU_TO_GPU} {size}".strip())
        if tier == GPU_TO_GPU or base is None:
            continue
        column = "KV_xfer_bandwidth Gbit/s"
        out[f"Tier_throughput_ratio {tier} {size}".strip()] = ratio(
            row.get(column), base.get(column)
        )
    return out


DERIVATIONS: dict[str, Derive] = {
    "5.4": tier_ratio,
    "6.2": xpyd_choice,
    "7.3": ep_scaling,
    "11.1": slo_rate,
    "7.4": contention,
    "10.3": multi_tenant,
    "10.4": congestion_sensitivity,
    "12.1": scale_limits,
}


def by_seed(rows: Sequence[Mapping[str, Any]], test: str) -> dict[Any, dict[str, Any]]:
    """seed → point → row, for the runs of ``test`` that count."""
    out: dict[Any, dict[str, Any]] = {}
    for row in rows:
        if row.get("test") == test and counted(row):
            out.setdefault(row.get("seed"), {})[row["point"]] = row
    return out


def derived_by_test(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """test → derived KPI → its cell across seeds: ``aggregate.cell`` of the seeds that
    gave a number, and ``words``: how many seeds gave each word (a choice such as 6.2's
    xPyD, or a limit not reached), most frequent first."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for test, derive in DERIVATIONS.items():
        per_seed = [derive(points) for points in by_seed(rows, test).values()]
        names = list(dict.fromkeys(k for d in per_seed for k in d))
        if not names:
            continue
        out[test] = {}
        for name in names:
            got = [d[name] for d in per_seed if name in d]
            words: dict[str, int] = {}
            for v in got:
                if isinstance(v, str):
                    words[v] = words.get(v, 0) + 1
            ranked = dict(sorted(words.items(), key=lambda kv: -kv[1]))
            numbers = [v for v in got if isinstance(v, float | int)]
            out[test][name] = cell(numbers) | {"words": ranked}
    return out

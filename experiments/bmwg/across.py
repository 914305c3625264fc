"""The KPIs a procedure derives across its points, seed by seed, with intervals. Pure.

A derived KPI (10.4's inflection point and degradation factors, 10.3's interference
penalty, 7.4's contention penalty, 12.1's scale limit) compares a test's points: it is
worked out once per seed, from that seed's run at each point (the same seed across
points: the same arrivals), and its estimate and 95 % interval are across the seeds
(``aggregate.cell``), as every other KPI's are. Only runs that count (faithful, no
error) are used; a seed missing a point it needs is left out, and ``n`` says how many
seeds gave a value. A limit that was not reached within the points swept (no
inflection, no scale limit) is no number: ``not_reached`` counts those seeds.

    derived_by_test(rows) -> {"10.4": {"Inflection_point TTFT p99 (load)": cell, ...}}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from experiments.analysis.bmwg.derived import (
    contention_penalty,
    degradation_factors,
    inflection_point,
    interference_penalty_pct,
    scale_limit,
)
from experiments.bmwg.aggregate import cell, counted

Points = Mapping[str, Mapping[str, Any]]  # point -> that seed's row
NOT_REACHED = "not reached"  # a limit the points swept did not reach
Value = float | str | None  # None: the seed's runs lack what it needs
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


DERIVATIONS: dict[str, Derive] = {
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
    """test → derived KPI → its cell across seeds (``aggregate.cell``, with
    ``not_reached``: seeds whose limit the points swept did not reach)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for test, derive in DERIVATIONS.items():
        per_seed = [derive(points) for points in by_seed(rows, test).values()]
        names = list(dict.fromkeys(k for d in per_seed for k in d))
        if not names:
            continue
        out[test] = {}
        for name in names:
            got = [d[name] for d in per_seed if name in d]
            c = cell([v for v in got if isinstance(v, float | int)])
            out[test][name] = c | {"not_reached": sum(v == NOT_REACHED for v in got)}
    return out

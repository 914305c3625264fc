"""A suite's per-run KPI rows → each test point's KPIs with 95 % intervals. Pure.

A row is one run: ``test, variant, point, seed, run_dir, faithful, error`` and one
column per KPI number (``per_run.kpi_values``). A point is a trial's variant and its
grid values (the run's label without its seed). Only runs judged faithful and without
error count: their mean over seeds with Student's t interval (``across_seeds``; one
run: its value, no interval). The others are the report's anomalies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from experiments.analysis.intervals import across_seeds

META = ("test", "variant", "point", "seed", "run_dir", "faithful", "error", "wall_s")
HEALTH_COLUMNS = (
    "cpu_max_core_pct",
    "failed_flows",
    "fault_events",
    "time_dilation",
    "above_edge_pct",
)
# each run's completed TCP messages: median fct and its parts (``latency_parts``)
LATENCY_PARTS = (
    "fct_p50_ms",
    "wire_p50_ms",
    "grain_p50_ms",
    "excess_p50_ms",
    "burst_p50_ms",
    "excess_p10_ms",
)
HEALTH_COLUMNS += LATENCY_PARTS
META += HEALTH_COLUMNS


def point_of(variant: str, label: str) -> str:
    """``"1MBx1qp"`` + ``"buffer_pkts=16,seed=3"`` → ``"1MBx1qp buffer_pkts=16"``."""
    grid = ",".join(p for p in label.split(",") if p and not p.startswith("seed="))
    return " ".join(x for x in (variant, grid) if x) or "(one)"


def kpi_columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The KPI columns of ``rows``, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key not in META:
                seen.setdefault(key)
    return list(seen)


def counted(row: Mapping[str, Any]) -> bool:
    return bool(row.get("faithful")) and not row.get("error")


def cell(values: Sequence[float]) -> dict[str, Any]:
    """One KPI at one point: estimate, 95 % interval (``None`` below 2 runs), n."""
    finite = [float(v) for v in values if v is not None and v == v]
    if not finite:
        return {"estimate": None, "low": None, "high": None, "n": 0}
    ci = across_seeds(finite)
    if ci is None:
        return {"estimate": finite[0], "low": None, "high": None, "n": 1}
    return {"estimate": ci.estimate, "low": ci.low, "high": ci.high, "n": ci.n}


def by_point(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """test → point → {"runs", "counted", "seeds", "kpis": {column: cell}, "values":
    {column: [per-run values]}} over the counted runs, in the rows' order (``seeds``: the
    seed of each counted run, in the same order as each column's values)."""
    out: dict[str, dict[str, Any]] = {}
    columns = kpi_columns(rows)
    for row in rows:
        point = out.setdefault(row["test"], {}).setdefault(
            row["point"], {"runs": 0, "counted": 0, "rows": []}
        )
        point["runs"] += 1
        if counted(row):
            point["counted"] += 1
            point["rows"].append(row)
    for points in out.values():
        for point in points.values():
            used = point.pop("rows")
            present = [c for c in columns if any(c in r for r in used)]
            point["seeds"] = [r.get("seed") for r in used]
            point["values"] = {c: [r.get(c) for r in used] for c in present}
            point["kpis"] = {c: cell(v) for c, v in point["values"].items()}
    return out


def anomalies(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Runs that failed or were judged unfaithful: test, point, seed, what."""
    out = []
    for row in rows:
        if row.get("error"):
            what = f"failed: {row['error']}"
        elif not row.get("faithful"):
            what = "judged not faithful (fidelity verdict): left out of the KPIs"
        else:
            continue
        out.append({k: row.get(k) for k in ("test", "point", "seed", "run_dir")} | {"what": what})
    return out

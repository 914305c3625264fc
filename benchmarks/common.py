"""What every benchmark shares: the result record (value against a baseline
measured in the same run, ratio, target), its JSON file and table, the M/D/1
reference, and one traffic trial (samplers + agents + fidelity verdict) on a
running fabric. Only ``trial`` and ``cpu_seconds`` touch the system."""

from __future__ import annotations

import json
import math
import resource
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from experiments.orchestration.trial import (  # noqa: F401  (the benchmarks' API)
    failed_checks,
    switch_ports,
    trial,
    trial_verdict,
)

RESULTS = Path(__file__).parent / "results"
REQUIRED = ("name", "value", "baseline", "ratio", "target", "target_met", "unit", "command")


# ----- pure parts (unit-tested) ------------------------------------------------------
def md1_lq(rho: float) -> float:
    """Mean number waiting (not in service) in an M/D/1 queue at load ``rho``."""
    if not 0 <= rho < 1:
        raise ValueError(f"rho={rho}: an M/D/1 queue is stable only for 0 <= rho < 1")
    return rho * rho / (2 * (1 - rho))


def ratio(value: float | None, baseline: float | None) -> float | None:
    """value ÷ baseline, None when either is missing or the baseline is zero."""
    if value is None or baseline is None or baseline == 0:
        return None
    if not (math.isfinite(value) and math.isfinite(baseline)):
        return None
    return value / baseline


def meets(measured: float | None, op: str, bound: float) -> bool | None:
    """Is ``measured op bound`` (op one of <=, >=)? None when nothing was measured."""
    if measured is None or not math.isfinite(measured):
        return None
    if op == "<=":
        return measured <= bound
    if op == ">=":
        return measured >= bound
    raise ValueError(f"op={op!r}; allowed <=, >=")


def relative_error(measured: float, reference: float) -> float:
    return abs(measured - reference) / reference


def command(name: str, quick: bool) -> str:
    return f"sudo .venv/bin/kvfabric bench {'--quick ' if quick else ''}{name}"


def result(
    name: str,
    *,
    value: float | None,
    baseline: float | None,
    unit: str,
    target: str,
    target_met: bool | None,
    quick: bool,
    limit: str = "",
    ratio_value: float | None = None,
    **detail: Any,
) -> dict[str, Any]:
    """One benchmark's record. ``ratio`` is value ÷ baseline unless the benchmark's
    target is stated over another ratio (``ratio_value``). ``limit`` says what keeps
    a missed target from being met (required then, so no miss goes unexplained)."""
    if target_met is False and not limit:
        raise ValueError(f"{name}: a missed target needs a 'limit' saying what limits it")
    r = ratio(value, baseline) if ratio_value is None else ratio_value
    out = {
        "name": name,
        "value": clean(value),
        "baseline": clean(baseline),
        "ratio": clean(r),
        "target": target,
        "target_met": None if target_met is None else bool(target_met),
        "unit": unit,
        "command": command(name, quick),
        "quick": quick,
        "limit": limit,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out.update({k: clean(v) for k, v in detail.items()})
    return out


def clean(x: Any) -> Any:
    """JSON-safe: NaN/inf become None, numpy scalars become Python numbers, recursively."""
    if isinstance(x, Mapping):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, str | bytes):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write(record: Mapping[str, Any], directory: Path = RESULTS) -> Path:
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise ValueError(f"result lacks {missing}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record['name']}.json"
    path.write_text(json.dumps(clean(record), indent=2) + "\n")
    return path


def fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return str(x)


def show(record: Mapping[str, Any], columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    """The benchmark's detail table, then its one-line verdict."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{record['name']}{' (quick)' if record.get('quick') else ''}")
    for c in columns:
        table.add_column(c, justify="right" if c != columns[0] else "left")
    for row in rows:
        table.add_row(*(fmt(v) for v in row))
    console = Console(width=130)
    console.print(table)
    met = {True: "[green]met[/]", False: "[red]MISSED[/]", None: "report"}[record["target_met"]]
    console.print(
        f"{record['name']}: {fmt(record['value'])} {record['unit']} vs baseline "
        f"{fmt(record['baseline'])} → ratio {fmt(record['ratio'])}; target {record['target']}: "
        f"{met}" + (f"\n  limit: {record['limit']}" if record.get("limit") else "")
    )


# ----- system parts --------------------------------------------------------------------
def children_cpu_s() -> float:
    """CPU seconds of this process's reaped children (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def process_cpu_s(pids: Iterable[int]) -> float:
    """CPU seconds (user + system, own and reaped children) of live processes and
    their live descendants."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            family = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
        for p in family:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
    return total


def shell_times_s(output: str) -> float:
    """Children's CPU seconds from the last line of bash's ``times`` ("0m1.5s 0m0.2s")."""
    line = output.strip().splitlines()[-1]
    total = 0.0
    for field in line.split():
        minutes, seconds = field.rstrip("s").split("m")
        total += int(minutes) * 60 + float(seconds)
    return total

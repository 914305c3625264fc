"""soak: endurance. A steady serving + background mix (``benchmarks/specs/soak.yaml``)
runs for ``--minutes`` (default 30) through the ordinary runner, as ``kvfabric run``
would run it, while a watcher samples every 5 s the memory (RSS, and USS) of the
coordinator (the runner's own process), the controller, the sampler process and each
agent worker, and the size on disk of the run's folder and scratch folder. After the
run the flows table gives the agents' lateness p99 per minute since t0.

    sudo .venv/bin/kvfabric bench soak --minutes 30      (python -m benchmarks soak ...)

What is judged, "memory and lateness do not grow with time" (``benchmarks.growth``):
each component's fitted RSS slope × minutes < max(5% of its RSS after the 1-minute
warm-up, 5 MB), and the per-minute lateness p99's slope × minutes < 0.5 ms. The
target is met only if that holds *and* the run's fidelity verdict is ok: an
unfaithful soak is reported as such, not as a pass. There is no alternative to
measure against; the record's value is the worst component's growth over the run
and its baseline that component's limit (ratio < 1: within it).

It is run only when named (``kvfabric bench`` without names leaves it out). The
run's folder is kept under ``benchmarks/results/runs/soak/`` (``quick``: under
``results/quick/runs/``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from . import growth
from .common import RESULTS, failed_checks, fmt, result, show
from .memwatch import ProcessWatch, disk_bytes

NAME = "soak"
SPEC = Path(__file__).parent / "specs" / "soak.yaml"
DEFAULT_MINUTES = 30
QUICK_MINUTES = 2
MIN_MINUTES = 2  # the warm-up minute and at least one judged minute
PERIOD_S = 5.0


def judge(
    memory: list[growth.MemoryGrowth],
    lateness: growth.LatenessGrowth,
    fidelity_ok: bool,
    failed: list[str],
    error: str | None,
) -> tuple[bool, str]:
    """(target met, what kept it from being met). Met: nothing grew, the fidelity
    verdict is ok and the run completed."""
    why = growth.growth_failures(memory, lateness)
    if not fidelity_ok:
        why.append(f"the run was not faithful (failed: {', '.join(failed) or 'not judged'})")
    if error:
        why.append(f"the run did not complete: {error}")
    return not why, "; ".join(why)


def worst(memory: list[growth.MemoryGrowth]) -> growth.MemoryGrowth | None:
    """The component whose growth is the largest share of its limit (unknown first)."""
    if not memory:
        return None
    return max(
        memory, key=lambda m: float("inf") if m.growth_mb is None else m.growth_mb / m.limit_mb
    )


def per_flow(m: growth.MemoryGrowth, flows_per_min: float) -> float | None:
    """A component's growth in bytes per message carried: what a process keeps of each
    message until the run ends shows here (the agents' records and the coordinator's
    flows did, about 210 and 310 bytes, before they were spilled and forgotten)."""
    if m.slope_mb_per_min is None or not flows_per_min:
        return None
    return m.slope_mb_per_min * growth.MB / flows_per_min


def samples_frame(
    watch: ProcessWatch, t0_ns: int, t_end_ns: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The watcher's samples taken while the traffic ran, in minutes since t0 and MB."""
    mem = pd.DataFrame(watch.memory, columns=["t_ns", "component", "rss", "uss"])
    mem = mem[(mem["t_ns"] >= t0_ns) & (mem["t_ns"] <= t_end_ns)]
    memory = pd.DataFrame(
        {
            "t_min": (mem["t_ns"] - t0_ns) / growth.NS_PER_MIN,
            "component": mem["component"],
            "rss_mb": mem["rss"] / growth.MB,
            "uss_mb": mem["uss"] / growth.MB,
        }
    )
    fold = pd.DataFrame(watch.folders, columns=["t_ns", "run", "scratch"])
    fold = fold[(fold["t_ns"] >= t0_ns) & (fold["t_ns"] <= t_end_ns)]
    folders = pd.DataFrame(
        {
            "t_min": (fold["t_ns"] - t0_ns) / growth.NS_PER_MIN,
            "run_mb": fold["run"] / growth.MB,
            "scratch_mb": fold["scratch"] / growth.MB,
        }
    )
    return memory, folders


def soak_spec(minutes: int) -> Any:
    """The bundled soak spec with its traffic held for ``minutes``."""
    from experiments.spec.load import load_spec

    if minutes < MIN_MINUTES:
        raise ValueError(
            f"--minutes {minutes}: at least {MIN_MINUTES} (the first minute is warm-up)"
        )
    return load_spec(SPEC, [f"duration_s={minutes * 60}"])


def run(quick: bool = False, minutes: int | None = None) -> dict:
    from experiments.orchestration.runner import run_spec
    from experiments.spec.load import expand

    minutes = minutes or (QUICK_MINUTES if quick else DEFAULT_MINUTES)
    spec = soak_spec(minutes)
    out_root = (RESULTS / "quick" if quick else RESULTS) / "runs"
    watch = ProcessWatch(out_root / spec.name, PERIOD_S)
    print(
        f"soak: {minutes} min of {SPEC.name}, sampling every {PERIOD_S:g} s → "
        f"{out_root / spec.name}/"
    )
    watch.start()
    try:
        (outcome,) = run_spec(spec, expand(spec), out_root)
    finally:
        watch.stop()
    summary = outcome.summary
    if not (outcome.path / "flows.parquet").exists():
        raise RuntimeError(
            f"the soak run recorded no flows ({outcome.path}): {summary.get('error')}"
        )
    events = json.loads((outcome.path / "events.json").read_text())
    flows = pd.read_parquet(outcome.path / "flows.parquet")
    memory_samples, folders = samples_frame(watch, events["t0_ns"], events["t_end_ns"])
    memory = growth.memory_growth(memory_samples, minutes)
    per_minute = growth.lateness_by_minute(flows, events["t0_ns"], minutes)
    lateness = growth.lateness_growth(per_minute, minutes)
    fidelity = summary.get("fidelity") or {}
    failed = failed_checks(fidelity)
    met, limit = judge(memory, lateness, bool(fidelity.get("ok")), failed, summary.get("error"))
    top = worst(memory)
    judged = top.component if top else "no component"
    run_size = growth.size_by_minute(folders["t_min"], folders["run_mb"])
    scratch_size = growth.size_by_minute(folders["t_min"], folders["scratch_mb"])
    flows_per_min = len(flows) / minutes
    record = result(
        NAME,
        value=top.growth_mb if top else None,
        baseline=top.limit_mb if top else None,
        unit=f"MB (memory growth over the run, fitted slope × minutes: {judged})",
        target="every component's slope × minutes < max(5% of start RSS, 5 MB); lateness p99 "
        "slope × minutes < 0.5 ms; fidelity ok",
        target_met=met,
        quick=quick,
        limit=limit,
        minutes=minutes,
        period_s=PERIOD_S,
        run_dir=str(outcome.path),
        fidelity_ok=bool(fidelity.get("ok")),
        failed_checks=failed,
        run_error=summary.get("error"),
        memory=growth.as_dicts(memory),
        lateness=growth.as_dicts([lateness])[0],
        lateness_by_minute=per_minute.to_dict("records"),
        run_folder_by_minute=run_size,
        scratch_folder_by_minute=scratch_size,
        run_folder_final_mb=disk_bytes(outcome.path) / growth.MB,
        memory_samples=memory_samples.round(4).to_dict("list"),
        flows=len(flows),
        bytes_per_flow={m.component: per_flow(m, flows_per_min) for m in memory},
    )
    report(record, memory, per_minute, lateness, run_size, scratch_size)
    return record


def report(
    record: dict,
    memory: list[growth.MemoryGrowth],
    per_minute: pd.DataFrame,
    lateness: growth.LatenessGrowth,
    run_size: list[dict],
    scratch_size: list[dict],
) -> None:
    from rich.console import Console
    from rich.table import Table

    run_mb = {r["minute"]: r["mb"] for r in run_size}
    scratch_mb = {r["minute"]: r["mb"] for r in scratch_size}
    table = Table(title="soak: per minute since t0")
    for c in (
        "minute",
        "flows",
        "lateness p50 ms",
        "lateness p99 ms",
        "run folder MB",
        "scratch MB",
    ):
        table.add_column(c, justify="right")
    for r in per_minute.to_dict("records"):
        m = r["minute"]
        row = (m, r["flows"], r["p50_ms"], r["p99_ms"], run_mb.get(m), scratch_mb.get(m))
        table.add_row(*(fmt(v) for v in row))
    console = Console(width=130)
    console.print(table)
    console.print(
        f"lateness p99: {fmt(lateness.first_p99_ms)} ms in the first judged minute, "
        f"{fmt(lateness.last_p99_ms)} in the last; slope {fmt(lateness.slope_ms_per_min)} "
        f"ms/min × {record['minutes']} min = {fmt(lateness.growth_ms)} ms (judged: < "
        f"{lateness.limit_ms} ms) → {'ok' if lateness.ok else 'GROWS'}"
    )
    failed = ", ".join(record["failed_checks"]) or "none"
    error = f"; run error: {record['run_error']}" if record["run_error"] else ""
    faithful = "ok" if record["fidelity_ok"] else "NOT FAITHFUL"
    console.print(f"fidelity verdict: {faithful} (failed checks: {failed}){error}")
    console.print(
        f"run folder: {record['run_dir']} ({fmt(record['run_folder_final_mb'])} MB after the run)"
    )
    console.print(
        "memory (MB; growth = fitted slope × minutes) judged: growth < limit = "
        "max(5% of the RSS at 1 min, 5 MB)"
    )
    show(
        record,
        [
            "process",
            "RSS 1 min",
            "RSS end",
            "end/start",
            "MB/min",
            "growth",
            "limit",
            "B/flow",
            "USS 1 min",
            "USS end",
            "ok",
        ],
        [
            [
                m.component,
                m.start_mb,
                m.end_mb,
                m.end_over_start,
                m.slope_mb_per_min,
                m.growth_mb,
                m.limit_mb,
                record["bytes_per_flow"][m.component],
                m.uss_start_mb,
                m.uss_end_mb,
                "ok" if m.ok else "GROWS",
            ]
            for m in memory
        ],
    )

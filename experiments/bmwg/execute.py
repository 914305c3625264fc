"""``kvfabric bmwg run``'s effectful part: a ``SuitePlan``'s trials through a
``run_spec``-like callable, then each run's KPIs, then the files.

    suite_dir = run_suite(plan, Path("results"), run_spec, now=datetime.now())

``DIR/bmwg-<YYYYmmdd-HHMMSS>/`` holds ``plan.json`` (fabric, profile, trials, misfits),
``runs/<test>/…`` (every run's own results directory, fidelity verdict included),
``<test>/kpis.json`` (each point's KPIs with 95 % intervals and trial counts) and
``<test>/kpis.csv`` (one row per run: its KPI numbers), ``suite.json`` (every row, and
the KPIs derived across points: ``across``) and the Section 14 report (``report.md``,
``report.html``, ``plots/``). A trial whose ``run_spec`` raises (the machine cannot
hold it, a run that would not start) is recorded as failed and the suite goes on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.analysis.bmwg.per_run import kpi_values
from experiments.analysis.fidelity import counter_growth
from experiments.analysis.jsonable import to_jsonable as jsonable
from experiments.analysis.latency_parts import fct_parts, parts_p50
from experiments.bmwg.across import derived_by_test
from experiments.bmwg.aggregate import LATENCY_PARTS, anomalies, by_point, point_of
from experiments.bmwg.catalog import BY_ID, DRAFT
from experiments.bmwg.run_tables import run_tables
from experiments.bmwg.suite import PlannedTrial, SuitePlan, measured_after_s, run_wall_s
from experiments.orchestration.retry import Outcome, failed_checks, until_kept
from experiments.output.results import Run, load_run
from experiments.spec.load import RunSpec, Spec
from experiments.spec.typed import fabric_of
from topologies import Fabric
from topologies.fabric import TIER
from topologies.scale import Scale

log = logging.getLogger("kvfabric.bmwg")

RETRIES = 2  # an unfaithful run is run again (same seed) up to this many more times


RunSpecFn = Callable[[Spec, list[RunSpec], Path], Sequence[Outcome]]


def plan_record(plan: SuitePlan) -> dict[str, Any]:
    """plan.json: what was asked and what the fabric could hold."""
    return {
        "draft": DRAFT,
        "fabric": {"name": plan.fabric.name, **plan.fabric.raw, "pools": plan.fabric.pools},
        "profile": plan.profile,
        "tests": plan.tests,
        "min_dilation": plan.min_dilation,
        "runs": plan.runs,
        "estimated_wall_s": round(plan.wall_s, 1),
        "trials": [
            {
                "test": t.test,
                "variant": t.trial.variant,
                "runs": [r.label for r in t.runs],
                "repetitions": t.trial.repetitions,
                "warmup_s": t.trial.warmup_s,
                "duration_s": t.spec.duration_s,
            }
            for t in plan.trials
        ],
        "misfits": [
            {"test": m.test, "variant": m.variant, "reason": m.reason} for m in plan.misfits
        ],
    }


def run_row(planned: PlannedTrial, outcome: Outcome, wall_s: float) -> dict[str, Any]:
    """One run's row: where it is, its verdict, and its KPI numbers."""
    summary = outcome.summary
    label = str(summary.get("label") or "")
    row: dict[str, Any] = {
        "test": planned.test,
        "variant": planned.trial.variant,
        "point": point_of(planned.trial.variant, label),
        "seed": summary.get("seed"),
        "run_dir": str(outcome.path),
        "faithful": bool((summary.get("fidelity") or {}).get("ok")),
        "error": summary.get("error") or ("partial" if summary.get("partial") else None),
        "wall_s": round(wall_s, 1),
    }
    try:
        run = load_run(Path(outcome.path))
        row |= health(run)
        skip = measured_after_s(planned.test, planned.trial.warmup_s)
        tables = run_tables(run, planned.test, skip)
        row |= kpi_values(BY_ID[planned.test].kpis, tables)
    except Exception as exc:  # a run whose tables cannot be read is an anomaly, not a crash
        log.debug("KPIs of %s failed", outcome.path, exc_info=True)
        row["error"] = row["error"] or f"KPIs not computed: {type(exc).__name__}: {exc}"
    return row


def health(run: Run) -> dict[str, Any]:
    """The fabric health indicators this emulator has of one run (``health.HEALTH``):
    the machine's busiest core, flows that failed (for QPs in error), fault events
    (for adjacency flaps), and the time dilation the run used; and where the traffic
    went (``above_edge_pct``); the medians of the completed TCP messages' fct and its
    parts (``latency_parts``: wire, grain, the emulator's excess)."""
    cpu, flows = run.cpu, run.flows
    failed = None if flows is None else int((~flows["ok"].astype(bool)).sum())
    try:
        above = above_edge_pct(run.links, fabric_of(run.config))
    except Exception:  # a run without a readable fabric or link table: not measured
        log.debug("above_edge_pct of %s failed", run.path, exc_info=True)
        above = None
    try:
        config = run.config
        assert config is not None
        scale = Scale(config.scale.bandwidth, config.scale.mtu)
        d = float(run.summary.get("time_dilation") or 1.0)
        parts = parts_p50(fct_parts(flows, fabric_of(config), scale, d))
    except Exception:  # as above: the latency's parts not measured
        log.debug("fct_parts of %s failed", run.path, exc_info=True)
        parts = dict.fromkeys(LATENCY_PARTS)
    return {
        "cpu_max_core_pct": None
        if cpu is None or not len(cpu)
        else float(cpu["max_core_pct"].max()),
        "failed_flows": failed,
        "fault_events": len(run.events.get("faults") or []),
        "time_dilation": run.summary.get("time_dilation"),
        "above_edge_pct": above,
        **parts,
    }


def above_edge_pct(links: pd.DataFrame | None, fabric: Fabric) -> float | None:
    """Percent of the switches' egress bytes sent by switches above the edge (spine,
    core: ``TIER`` >= 2) over the run's link table; ``None`` without a table, without
    switch traffic, or on a fabric with no such tier (a direct one).

    Why it is kept: a procedure's pair "across the spine" that lands under one leaf
    never loads a spine, and its KPIs then say nothing of the spine (the first
    datasheet: spines under 1 % in 21 of 28 tests). Traffic that all crosses one spine
    gives about a third (leaf, spine, leaf each send it once)."""
    if links is None or links.empty or not {"node", "t_ns", "tx_bytes"} <= set(links.columns):
        return None
    tiers = {n.name: TIER[n.kind] for n in fabric.nodes if not n.is_host}
    if not any(t >= 2 for t in tiers.values()):
        return None
    grown = counter_growth(links[links["node"].isin(tiers)], ["tx_bytes"])
    sent = grown["tx_bytes"].groupby(level="node").sum()
    total = float(sent.sum())
    if total <= 0:
        return None
    upper = float(sum(v for node, v in sent.items() if tiers[str(node)] >= 2))
    return 100.0 * upper / total


def failed_rows(planned: PlannedTrial, exc: Exception) -> list[dict[str, Any]]:
    why = f"{type(exc).__name__}: {exc}"
    return [
        {
            "test": planned.test,
            "variant": planned.trial.variant,
            "point": point_of(planned.trial.variant, run.label),
            "seed": run.seed,
            "run_dir": None,
            "faithful": False,
            "error": why,
            "wall_s": 0.0,
        }
        for run in planned.runs
    ]


def write_test(suite_dir: Path, test: str, rows: list[dict[str, Any]]) -> None:
    folder = suite_dir / test
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "kpis.csv", index=False)
    points = by_point(rows).get(test, {})
    record = {"test": test, "title": BY_ID[test].title, "kpis": list(BY_ID[test].kpis)}
    record["points"] = {p: {k: v for k, v in d.items() if k != "values"} for p, d in points.items()}
    (folder / "kpis.json").write_text(json.dumps(jsonable(record), indent=2, ensure_ascii=False))


def discarded_row(planned: PlannedTrial, outcome: Outcome) -> dict[str, Any]:
    """What the suite keeps of an attempt it ran again: where, and the checks it failed
    with their detail."""
    summary = outcome.summary
    return {
        "test": planned.test,
        "point": point_of(planned.trial.variant, str(summary.get("label") or "")),
        "seed": summary.get("seed"),
        "run_dir": str(outcome.path),
        "failed": failed_checks(summary),
    }


def carry_out(
    planned: PlannedTrial, run_spec: RunSpecFn, out_dir: Path, retries: int
) -> tuple[list[Outcome], list[dict[str, Any]], bool]:
    """One trial's runs, each unfaithful (or failed) one run again (same seed) up to
    ``retries`` times, as the references are (``orchestration.retry``). Returns the runs
    kept (in plan order), the attempts discarded, and whether a Ctrl-C stopped it."""

    def announce(n: int) -> None:
        log.warning(
            "%s %s: running %d unfaithful run(s) again", planned.test, planned.trial.variant, n
        )

    done = until_kept(
        lambda runs: run_spec(planned.spec, runs, out_dir), planned.runs, retries, announce
    )
    discarded = [discarded_row(planned, o) for o in done.discarded]
    return done.outcomes, discarded, done.stopped


def write_suite(
    suite_dir: Path,
    plan: SuitePlan,
    rows: list[dict[str, Any]],
    discarded: list[dict[str, Any]],
    not_run: list[str],
    report: bool = True,
) -> None:
    """Each test's KPI files, ``suite.json`` and (``report``) the report with its plots,
    from the rows so far: the files are written after every trial, so an interrupted
    suite keeps what it measured."""
    from experiments.bmwg.report import write_report

    done = [t for t in plan.tests if any(r["test"] == t for r in rows)]
    for test in done:
        write_test(suite_dir, test, [r for r in rows if r["test"] == test])
    record = {
        "tests": done,
        "complete": not not_run,
        "not_run": not_run,
        "rows": rows,
        "discarded": discarded,
        "derived": derived_by_test(rows),
        "anomalies": anomalies(rows),
    }
    (suite_dir / "suite.json").write_text(json.dumps(jsonable(record), indent=2))
    if report:
        write_report(suite_dir)


def run_suite(
    plan: SuitePlan,
    out_root: Path,
    run_spec: RunSpecFn,
    now: datetime,
    clock: Callable[[], float] | None = None,
    retries: int = RETRIES,
    say: Callable[[str], None] | None = None,
) -> Path:
    """Every trial of ``plan`` through ``run_spec(spec, runs, out_dir)`` (unfaithful runs
    run again up to ``retries`` times); returns the suite's directory. ``clock``
    (seconds) times the runs for the report. The results are rewritten after every
    trial; a Ctrl-C stops the suite after the run in progress, and what was measured is
    kept (``suite.json``: ``complete`` false, the trials ``not_run``). ``say``: told
    each trial as it starts, with the time spent and the plan's estimate of the rest."""
    suite_dir = Path(out_root) / f"bmwg-{now:%Y%m%d-%H%M%S}"
    suite_dir.mkdir(parents=True, exist_ok=False)
    (suite_dir / "plan.json").write_text(json.dumps(jsonable(plan_record(plan)), indent=2))
    rows: list[dict[str, Any]] = []
    discarded: list[dict[str, Any]] = []
    pending = list(plan.trials)
    try:
        while pending:
            planned = pending[0]
            out_dir = suite_dir / "runs" / planned.test
            started = clock() if clock else 0.0
            if say is not None:
                say(_progress_line(plan, pending, rows))
            try:
                outcomes, thrown, stopped = carry_out(planned, run_spec, out_dir, retries)
            except Exception as exc:
                log.warning("trial %s %s failed: %s", planned.test, planned.trial.variant, exc)
                rows += failed_rows(planned, exc)
                pending.pop(0)
                continue
            each = ((clock() - started) / max(1, len(outcomes))) if clock else 0.0
            rows += [
                run_row(planned, o, each or run_wall_s(r, dilation=planned.dilation))
                for o, r in zip(outcomes, planned.runs, strict=False)
            ]
            discarded += thrown
            if stopped:  # the trial cut short is not counted as run
                break
            pending.pop(0)
            write_suite(suite_dir, plan, rows, discarded, _names(pending), report=False)
    finally:
        write_suite(suite_dir, plan, rows, discarded, _names(pending))
    return suite_dir


def _progress_line(
    plan: SuitePlan,
    pending: Sequence[PlannedTrial],
    rows: Sequence[dict[str, Any]],
) -> str:
    t = pending[0]
    k = len(plan.trials) - len(pending) + 1
    spent = sum(float(r.get("wall_s") or 0.0) for r in rows)
    left = sum(p.wall_s for p in pending)
    return (
        f"trial {k} of {len(plan.trials)}: {t.test} {t.trial.variant or '(one)'}, "
        f"{len(t.runs)} runs; {spent / 60:.0f} min spent, ~{left / 60:.0f} min planned "
        "for the rest (a lower bound)"
    )


def _names(trials: Sequence[PlannedTrial]) -> list[str]:
    return [f"{t.test} {t.trial.variant}".strip() for t in trials]


def run_dir_of(suite_dir: Path, recorded: str | None) -> Path | None:
    """A row's run directory: as recorded, or under ``suite_dir``'s ``runs/`` (a suite
    moved or read from another working directory); None where neither exists."""
    if not recorded:
        return None
    path = Path(recorded)
    if (path / "summary.json").is_file():
        return path
    _, sep, tail = recorded.partition("/runs/")
    inside = suite_dir / "runs" / tail
    return inside if sep and (inside / "summary.json").is_file() else None


def refresh_suite(suite_dir: Path) -> tuple[int, int]:
    """Recompute every row's ``health`` columns from its run directory where it is here
    (new columns included), rewrite each test's KPI files, ``suite.json`` and the
    report. KPIs and verdicts are kept as recorded. Returns (rows refreshed, rows kept
    as they were: their run directory is not here, or could not be read)."""
    from experiments.bmwg.report import write_report

    path = suite_dir / "suite.json"
    record = json.loads(path.read_text())
    fresh = absent = 0
    for row in record["rows"]:
        run_dir = run_dir_of(suite_dir, row.get("run_dir"))
        try:
            if run_dir is None:
                raise FileNotFoundError(row.get("run_dir"))
            row |= health(load_run(run_dir))
        except Exception:  # one unreadable run keeps its recorded row, not the suite
            log.debug("health of %s not re-read", run_dir, exc_info=True)
            absent += bool(row.get("run_dir"))
            continue
        fresh += 1
    for test in record.get("tests") or []:
        write_test(suite_dir, test, [r for r in record["rows"] if r["test"] == test])
    path.write_text(json.dumps(jsonable(record), indent=2))
    write_report(suite_dir)
    return fresh, absent

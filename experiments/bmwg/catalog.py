"""Every test procedure of draft-calabria-bmwg-ai-fabric-inference-bench-02, in the
draft's order, and the rows ``kvfabric bmwg list`` prints."""

from __future__ import annotations

from typing import Any

from experiments.bmwg import (
    congestion_tests,
    disagg_tests,
    kv_tests,
    latency_tests,
    moe_tests,
    routing_tests,
    scale_tests,
    throughput_tests,
)
from experiments.bmwg.bases import MAX_MESSAGES
from experiments.bmwg.health import HEALTH
from experiments.bmwg.model import PROFILES, STATUSES, Procedure

DRAFT = "draft-calabria-bmwg-ai-fabric-inference-bench-02"
PROCEDURES: tuple[Procedure, ...] = (
    *kv_tests.PROCEDURES,
    *disagg_tests.PROCEDURES,
    *moe_tests.PROCEDURES,
    *congestion_tests.PROCEDURES,
    *routing_tests.PROCEDURES,
    *latency_tests.PROCEDURES,
    *throughput_tests.PROCEDURES,
    *scale_tests.PROCEDURES,
)
BY_ID = {p.id: p for p in PROCEDURES}


def procedure(test_id: str) -> Procedure:
    """The procedure of a section number such as ``"5.1"``."""
    if test_id not in BY_ID:
        raise ValueError(f"no test {test_id!r} in {DRAFT}; tests: {', '.join(BY_ID)}")
    return BY_ID[test_id]


def counts() -> dict[str, int]:
    """How many procedures have each status."""
    return {s: sum(p.status == s for p in PROCEDURES) for s in STATUSES}


def row(p: Procedure) -> dict[str, Any]:
    """One procedure as ``bmwg list --json`` gives it."""
    sweep = p.sweep
    return {
        "id": p.id,
        "title": p.title,
        "category": p.category,
        "status": p.status,
        "kpis": list(p.kpis),
        "substitutes": [{"draft": s.draft, "here": s.here} for s in p.substitutes],
        "why_not": p.why_not or None,
        "notes": p.notes or None,
        "sweep": None
        if sweep is None
        else {
            "base": sweep.base if "\n" not in sweep.base else "(procedure's own spec)",
            "axes": [a.name for a in sweep.axes],
            "fixed": dict(sweep.fixed),
            "quick_gives_up": sweep.quick_gives_up,
            "profiles": {
                prof: {
                    "points": sweep.points(prof),
                    "repetitions": sweep.budgets[prof].repetitions,
                    "runs": sweep.runs(prof),
                    "warmup_s": sweep.budgets[prof].warmup_s,
                    "trial_s": sweep.budgets[prof].trial_s,
                    "traffic_hours": round(sweep.wall_s(prof) / 3600, 2),
                }
                for prof in PROFILES
            },
        },
    }


def listing() -> dict[str, Any]:
    """Everything ``bmwg list --json`` prints: the tests, the health indicators, counts."""
    return {
        "draft": DRAFT,
        "counts": counts(),
        "tests": [row(p) for p in PROCEDURES],
        "health": [
            {"name": h.name, "threshold": h.threshold, "status": h.status, "here": h.here}
            for h in HEALTH
        ],
    }


def markdown() -> str:
    """The docs page mapping each test of the draft to what kvfabric measures for it
    (generated when the site is built: ``docs/hooks.py``)."""
    c = counts()
    lines = [
        f"# The BMWG inference-fabric tests here ({DRAFT})",
        "",
        f"Every test procedure of the draft, in its order: {c['implemented']} implemented as "
        f"specified, {c['substitute']} as labelled substitutes (what stands in for what is "
        f"said), {c['not_feasible']} not feasible on this kernel (and why). "
        "`kvfabric bmwg list` prints the same; `kvfabric bmwg show TEST --profile "
        "quick|standard|draft` prints one test's sweep.",
        "",
        "`sudo kvfabric bmwg run TEST… --fabric SPEC [--profile smoke|quick|standard|draft] "
        "[--out DIR]` runs tests on your fabric: SPEC is a YAML file with `fabric:` (and "
        "optionally `scale:`, `controller:` and a serving workload whose pools are used), "
        "one of `experiments/bmwg/fabrics/` (`spine-leaf-1to1`, `spine-leaf-2to1`, "
        "`rail-optimized`: 16 GPUs each) or a bundled experiment's name. A switch of "
        "the procedure's fabric keeps its tier and position, and a GPU its edge switch: "
        "a pair on two leaves there crosses the upper tier on yours, on two servers "
        "where it can (serving pools: those GPUs' servers); a trial the fabric cannot "
        "hold is listed, not run. `--dry-run` prints the plan and its wall-time "
        "estimate without root. "
        "The KPIs leave out each run's warm-up (the profile's; none for a test whose "
        "traffic is one finite burst from the start). A run holds at most "
        f"{MAX_MESSAGES:,} KV messages, so a stream of small messages can end before the "
        f"run does (at 100 Gbit/s, {MAX_MESSAGES:,} of 1 MB take "
        f"{MAX_MESSAGES * (1 << 20) * 8 / 100e9:.1f} s): its warm-up is then the "
        "profile's share of the stream's own span at line rate, so the measured part "
        "still holds messages. "
        "Every run is judged by the fidelity verdict, and one judged unfaithful is run "
        "again with its seed up to `--retries` times (default 2, as the references are; "
        "each discarded attempt is named in the report's anomalies). The results are "
        "rewritten after every trial: Ctrl-C stops the suite after the run in progress "
        "and keeps what it measured. `DIR/bmwg-<timestamp>/` holds each "
        "test's `kpis.json` (per point: mean, 95 % interval over seeds, n) and `kpis.csv` "
        "(per run), and the draft's Section 14 report (`report.md`, `report.html`). "
        "The KPIs a test derives across its points (5.4's tier throughput ratio, 6.2's "
        "best xPyD ratio, 7.3's EP scaling efficiency, 7.4's contention penalty, 10.3's "
        "interference penalty, 10.4's inflection point and degradation factors, 11.1's "
        "SLO-bounded request rate, 12.1's scale limit) are worked out seed by seed from "
        "each seed's run at every point, then given with their interval across seeds; a "
        "choice, a limit the points did not reach or no rate meeting the SLO is counted "
        "by seed, not made a number. "
        "`kvfabric bmwg compare DIR…` sets several fabrics side by side, each KPI's ratio "
        "to the first fabric paired by seed (a seed drives the same arrivals on every "
        "fabric; Student's t over the per-seed ratios), marking the differences whose "
        "interval excludes 1; several results of one fabric "
        "(its tests run a few at a time) make one column, from the tests each ran in full, "
        "and a test run again on a fabric is taken from its later result (named); each "
        "test names the points the fabrics ran at different time dilations. "
        "The report splits each message-latency point's median completion time into the "
        "real fabric's wire time, what the emulation's coarse packets add (grain) and "
        "the emulator's own excess, and names the points whose latency is this "
        "machine's (`experiments.analysis.latency_parts`); `kvfabric bmwg report DIR…` "
        "rewrites a suite's report, re-reading its runs' health and latency parts "
        "where the runs are on this machine.",
        "",
        "| test | title | status | KPIs | here | runs quick / standard / draft |",
        "| --- | --- | --- | --- | --- | ---: |",
    ]
    for p in PROCEDURES:
        here = "; ".join(f"{s.draft} → {s.here}" for s in p.substitutes) or p.why_not or ""
        runs = " / ".join(str(p.sweep.runs(prof)) for prof in PROFILES) if p.sweep else "–"
        cells = [p.id, p.title, p.status, ", ".join(p.kpis), here, runs]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    lines += [
        "",
        "## Fabric health indicators",
        "",
        "| indicator | threshold | status | here |",
        "| --- | --- | --- | --- |",
    ]
    for h in HEALTH:
        cells = [h.name, h.threshold, h.status, h.here]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    return "\n".join(lines) + "\n"

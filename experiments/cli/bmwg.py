"""``kvfabric bmwg list`` (every test of draft-calabria-bmwg-ai-fabric-inference-bench-02:
its status here, what stands in for what or why it cannot run, its sweep size per
profile), ``kvfabric bmwg show TEST`` (a test's trials as the spec overrides a run
applies), ``kvfabric bmwg run TEST… --fabric SPEC`` (the tests on a fabric, its Section
14 report; ``--dry-run``: the plan only, no root), ``kvfabric bmwg compare DIR…``
(several fabrics' results side by side, no root) and ``kvfabric bmwg report DIR…`` (a
suite's report rewritten, its runs' health re-read where they are here)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from experiments.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    console,
    dilation_arg,
    say,
)
from topologies.scale import DEFAULT_MAX_DILATION

PROFILE_NAMES = ("quick", "standard", "draft")
RUN_PROFILES = ("smoke", *PROFILE_NAMES)


def add_parsers(sub: Any) -> None:
    b = sub.add_parser("bmwg", help="the IETF BMWG inference-fabric benchmark (draft -02) here")
    bsub = b.add_subparsers(dest="bmwg_command", required=True)
    ls = bsub.add_parser("list", help="every test: status, stand-ins or why not, sweep sizes")
    ls.add_argument("--json", action="store_true", help="the whole list as JSON")
    show = bsub.add_parser("show", help="one test's trials: the spec overrides of each")
    show.add_argument("test", help="the draft's section number, e.g. 5.1")
    show.add_argument("--profile", choices=PROFILE_NAMES, default="quick")
    show.add_argument("--json", action="store_true", help="the trials as JSON")
    run = bsub.add_parser("run", help="run tests on a fabric; results and the Section 14 report")
    run.add_argument("tests", nargs="+", metavar="TEST", help="the draft's section numbers")
    run.add_argument(
        "--fabric",
        required=True,
        help="a fabric spec (YAML with fabric:, optional scale:, controller:, a serving "
        "workload's pools), a name of experiments/bmwg/fabrics or a bundled spec's name",
    )
    run.add_argument("--profile", choices=RUN_PROFILES, default="quick")
    run.add_argument("--out", default="results", help="where bmwg-<timestamp>/ goes")
    run.add_argument(
        "--retries",
        type=int,
        default=2,
        help="run an unfaithful run again (same seed) up to this many times; every "
        "discarded attempt is named in the report's anomalies (default 2, as references)",
    )
    run.add_argument(
        "--min-dilation",
        type=dilation_arg("--min-dilation", DEFAULT_MAX_DILATION),
        default=1.0,
        metavar="N",
        help="the smallest time dilation a procedure's time_dilation: auto may choose "
        f"(default 1, at most {DEFAULT_MAX_DILATION:g}): run each fabric of a comparison "
        "at one d, so a latency ratio does not mix the fabrics with the emulator's "
        "per-message cost, which d divides",
    )
    run.add_argument("--dry-run", action="store_true", help="print the plan and exit (no root)")
    run.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    cmp = bsub.add_parser("compare", help="several fabrics' bmwg results side by side")
    cmp.add_argument("dirs", nargs="+", metavar="DIR", help="bmwg-<timestamp> directories")
    cmp.add_argument("--out", default=None, help="write the comparison here (Markdown)")
    rep = bsub.add_parser(
        "report",
        help="rewrite suites' reports; where their runs are here, recompute each run's "
        "health and latency parts first (KPIs and verdicts kept)",
    )
    rep.add_argument("dirs", nargs="+", metavar="DIR", help="bmwg-<timestamp> directories")
    b.set_defaults(handler=cmd_bmwg)


def cmd_bmwg(args: argparse.Namespace) -> int:
    handlers = {
        "list": _list,
        "show": _show,
        "run": _run,
        "compare": _compare,
        "report": _report,
    }
    return handlers[args.bmwg_command](args)


def _plan(args: argparse.Namespace) -> Any:
    from experiments.bmwg.suite import Refused, plan_suite, read_fabric
    from experiments.spec.schema import SpecError

    try:
        return plan_suite(args.tests, read_fabric(args.fabric), args.profile, args.min_dilation)
    except Refused as exc:
        for reason in exc.reasons:
            say(f"refused: {reason}")
    except SpecError as exc:
        say(f"--fabric {args.fabric}: {exc}")
    return None


def plan_lines(plan: Any) -> list[str]:
    """The trial plan as ``--dry-run`` prints it."""
    from experiments.bmwg.catalog import BY_ID

    lines = [f"fabric {plan.fabric.name}, profile {plan.profile}: {plan.runs} runs"]
    if plan.min_dilation > 1:
        lines.append(f"time dilation: auto chooses {plan.min_dilation:g} or more (--min-dilation)")
    for t in plan.trials:
        lines.append(
            f"  {t.test} {t.trial.variant or '(one)'}: {len(t.runs)} runs × "
            f"{t.spec.duration_s:g} s (warm-up {t.trial.warmup_s:g} s), ~{t.wall_s / 60:.1f} min"
        )
    for m in plan.misfits:
        lines.append(f"  {m.test} {m.variant}: does not fit the fabric: {m.reason}")
    for test in plan.tests:
        p = BY_ID[test]
        for sub in p.substitutes:
            lines.append(f"  {test} substitute: {sub.draft} → {sub.here}")
    lines.append(
        f"estimated wall time: {plan.wall_s / 60:.1f} min (each run's duration × its time "
        "dilation, auto at least what its link rates need, + 5 s set-up)"
    )
    return lines


def _run(args: argparse.Namespace) -> int:
    plan = _plan(args)
    if plan is None:
        return EXIT_USAGE
    if args.dry_run:
        if args.json:
            from experiments.analysis.jsonable import to_jsonable
            from experiments.bmwg.execute import plan_record

            print(json.dumps(to_jsonable(plan_record(plan)), indent=2, ensure_ascii=False))
        else:
            for line in plan_lines(plan):
                say(line)
        return EXIT_OK
    import functools
    import time
    from datetime import datetime
    from pathlib import Path

    from experiments.bmwg.execute import run_suite
    from experiments.orchestration.runner import run_spec

    if args.retries < 0:
        say(f"--retries {args.retries}: give 0 or more")
        return EXIT_USAGE
    for line in plan_lines(plan):
        say(line)
    now = datetime.now()
    suite_dir = Path(args.out) / f"bmwg-{now:%Y%m%d-%H%M%S}"
    try:
        at_least = functools.partial(run_spec, min_dilation=plan.min_dilation)
        run_suite(plan, Path(args.out), at_least, now, time.monotonic, args.retries, say)
    except KeyboardInterrupt:
        say(f"interrupted: what was measured is in {suite_dir} (suite.json, report.md)")
        return EXIT_FAILED
    record = json.loads((suite_dir / "suite.json").read_text())
    say(f"results and report: {suite_dir / 'report.md'}")
    if record["not_run"]:
        say(f"interrupted: {len(record['not_run'])} trial(s) not run in full")
        return EXIT_FAILED
    return EXIT_OK


def _compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from experiments.bmwg.compare import compare_markdown, read_suite

    try:
        suites = [read_suite(Path(d)) for d in args.dirs]
    except (OSError, ValueError) as exc:
        say(f"cannot read: {exc}")
        return EXIT_USAGE
    try:
        text = compare_markdown(suites)
    except ValueError as exc:
        say(f"cannot compare: {exc}")
        return EXIT_USAGE
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        say(f"comparison: {args.out}")
    else:
        print(text)
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from experiments.bmwg.execute import refresh_suite

    for d in args.dirs:
        try:
            fresh, absent = refresh_suite(Path(d))
        except (OSError, ValueError, KeyError) as exc:
            say(f"{d}: cannot rewrite its report: {exc}")
            return EXIT_USAGE
        kept = f"; {absent} not here or unreadable, kept as recorded" if absent else ""
        say(f"{d}: report rewritten, {fresh} run(s) re-read{kept}")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from experiments.bmwg.catalog import DRAFT, listing

    data = listing()
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return EXIT_OK
    table = Table(title=f"{DRAFT}: its tests on this emulator")
    for column in ("test", "title", "status", "runs q/s/d", "traffic h q/s/d"):
        table.add_column(column, no_wrap=column != "title")
    for t in data["tests"]:
        prof = (t["sweep"] or {}).get("profiles")
        runs = "/".join(str(prof[p]["runs"]) for p in PROFILE_NAMES) if prof else "–"
        hours = "/".join(f"{prof[p]['traffic_hours']:g}" for p in PROFILE_NAMES) if prof else "–"
        table.add_row(t["id"], t["title"], t["status"], runs, hours)
    console.print(table)
    for t in data["tests"]:
        if t["why_not"]:
            say(f"{t['id']} not feasible: {t['why_not']}")
        for s in t["substitutes"]:
            say(f"{t['id']} substitute: {s['draft']} → {s['here']}")
    for h in data["health"]:
        say(f"health {h['name']} ({h['threshold']}): {h['status']}: {h['here']}")
    counts = data["counts"]
    say(
        f"{len(data['tests'])} tests: {counts['implemented']} implemented, "
        f"{counts['substitute']} as labelled substitutes, {counts['not_feasible']} not feasible"
    )
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    from experiments.bmwg.catalog import procedure
    from experiments.bmwg.plan import trials

    proc = procedure(args.test)
    planned = trials(proc, args.profile)
    if args.json:
        rows = [
            {"variant": t.variant, "overrides": list(t.overrides), "repetitions": t.repetitions}
            for t in planned
        ]
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return EXIT_OK
    say(f"{proc.id} {proc.title} ({proc.status}), profile {args.profile}: {len(planned)} trials")
    for t in planned:
        say(f"- {t.variant or '(one)'} × {t.repetitions} repetitions, warm-up {t.warmup_s:g} s")
        for item in t.overrides:
            say(f"    --set {item if len(item) < 160 else item[:157] + '...'}")
    return EXIT_OK

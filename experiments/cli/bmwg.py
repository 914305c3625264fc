"""``kvfabric bmwg list`` (every test of draft-calabria-bmwg-ai-fabric-inference-bench-02:
its status here, what stands in for what or why it cannot run, its sweep size per
profile) and ``kvfabric bmwg show TEST`` (a test's trials as the spec overrides a run
applies). No root: nothing is run."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from experiments.cli.common import EXIT_OK, console, say

PROFILE_NAMES = ("quick", "standard", "draft")


def add_parsers(sub: Any) -> None:
    b = sub.add_parser("bmwg", help="the IETF BMWG inference-fabric benchmark (draft -02) here")
    bsub = b.add_subparsers(dest="bmwg_command", required=True)
    ls = bsub.add_parser("list", help="every test: status, stand-ins or why not, sweep sizes")
    ls.add_argument("--json", action="store_true", help="the whole list as JSON")
    show = bsub.add_parser("show", help="one test's trials: the spec overrides of each")
    show.add_argument("test", help="the draft's section number, e.g. 5.1")
    show.add_argument("--profile", choices=PROFILE_NAMES, default="quick")
    show.add_argument("--json", action="store_true", help="the trials as JSON")
    b.set_defaults(handler=cmd_bmwg)


def cmd_bmwg(args: argparse.Namespace) -> int:
    return _list(args) if args.bmwg_command == "list" else _show(args)


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

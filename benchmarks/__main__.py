"""Run the fidelity and cost benchmarks, each against its alternative in the same run.

    sudo kvfabric bench [--quick] [NAME ...]      (or: python -m benchmarks ...)
    sudo kvfabric bench soak [--minutes N]       (endurance: only when named; default 30)

Each prints its table and writes benchmarks/results/<name>.json (``--quick``:
benchmarks/results/quick/<name>.json, never over a full run's figures); a summary
table of every benchmark run ends the output. ``--quick`` runs them all in a
few minutes (shorter transfers, fewer sizes and repeats); the numbers quoted
in benchmarks/README.md come from the full run (``make bench``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
import traceback

from .common import RESULTS, fmt, write

BENCHMARKS = {  # name -> module[:function] (run(quick) -> record unless named)
    "setup": "setup_time",
    "agent-cost": "agent_cost",
    "sampler": "sampler_cost",
    "link-rate": "link_rate",
    "queue-theory": "queue_theory",
    "capacity": "capacity",
    "fabric-size": "fabric_size",
    "lateness": "lateness",
    "reroute": "reroute",
    "controller-timing": "controller_timing",
    "scale-64": "scale",
    "soak": "soak",
    "dilation": "dilation",
    "dilation-invariance": "dilation:run_invariance",  # the dilation benchmark's parts
    "dilation-grain": "dilation:run_grain",
    "dilation-size": "dilation:run_size",
    "gate": "gate",
}
# too long for "all": run only when named
ON_REQUEST = {"soak", "dilation", "dilation-invariance", "dilation-grain", "dilation-size"}
TIMED = {"soak"}  # take --minutes


def summary(records: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="benchmarks")
    for c in ("benchmark", "value", "baseline", "ratio", "unit", "target", "met"):
        table.add_column(c, justify="right" if c in ("value", "baseline", "ratio") else "left")
    for r in records:
        met = {True: "yes", False: "NO", None: "report"}[r["target_met"]]
        table.add_row(
            r["name"],
            fmt(r["value"]),
            fmt(r["baseline"]),
            fmt(r["ratio"]),
            r["unit"],
            r["target"],
            met,
        )
    Console(width=160).print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few minutes in all")
    ap.add_argument(
        "--minutes",
        type=int,
        metavar="N",
        help="soak: traffic minutes (default 30, --quick 2; at least 2)",
    )
    ap.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default all but {', '.join(sorted(ON_REQUEST))}): "
        f"{', '.join(BENCHMARKS)}",
    )
    args = ap.parse_args(argv)
    problem = usage_problem(args.names, args.minutes)
    if problem:
        ap.error(problem)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    return run_benchmarks(args.names, quick=args.quick, minutes=args.minutes)


def usage_problem(names: list[str], minutes: int | None) -> str:
    """Why ``names`` and ``--minutes`` cannot be run, or "" when they can."""
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        return f"unknown benchmark(s) {unknown}; allowed: {', '.join(BENCHMARKS)}"
    if minutes is not None and not TIMED & set(names):
        return f"--minutes applies to {', '.join(sorted(TIMED))}: name it"
    if minutes is not None:
        from .soak import MIN_MINUTES

        if minutes < MIN_MINUTES:
            return f"--minutes {minutes}: at least {MIN_MINUTES} (the first minute is warm-up)"
    return ""


def run_benchmarks(names: list[str], quick: bool = False, minutes: int | None = None) -> int:
    """Run ``names`` (default all but ``ON_REQUEST``), write each record, print the
    summary table; exit 1 if any failed to run (``kvfabric bench`` and ``python -m
    benchmarks``). ``minutes``: the duration of the ``TIMED`` ones."""
    records, failed = [], []
    for name in names or [n for n in BENCHMARKS if n not in ON_REQUEST]:
        module_name, _, function = BENCHMARKS[name].partition(":")
        module = importlib.import_module(f"benchmarks.{module_name}")
        options = {"minutes": minutes} if name in TIMED and minutes is not None else {}
        t0 = time.monotonic()
        try:
            record = getattr(module, function or "run")(quick=quick, **options)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        record["wall_s"] = round(time.monotonic() - t0, 1)
        path = write(record, RESULTS / "quick" if quick else RESULTS)
        print(f"wrote {path} ({record['wall_s']} s)\n")
        records.append(record)
    summary(records)
    if failed:
        print(f"failed to run: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

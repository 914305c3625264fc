"""The engineer's tools around runs: ``kvfabric estimate`` (what theory predicts
for a spec, no root), ``kvfabric references`` (rerun the bundled experiments into
``results/reference/``, or only rewrite their reports) and ``kvfabric bench`` (the
fidelity and cost benchmarks, each against its alternative in the same run)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import UsageError
from experiments.orchestration.reference import REFERENCE_REPEATS, REFERENCE_RETRIES


def bench_names() -> list[str]:
    """The benchmarks of the checkout (none when kvfabric is installed without it)."""
    try:
        from benchmarks.__main__ import BENCHMARKS
    except ImportError:
        return []
    return list(BENCHMARKS)


def bench_default_help() -> str:
    try:
        from benchmarks.__main__ import ON_REQUEST
    except ImportError:
        return "default all"
    return f"default all but {', '.join(sorted(ON_REQUEST))}"


def add_parsers(sub: Any) -> None:
    e = sub.add_parser("estimate", help="what theory predicts for each run of a spec (no root)")
    e.add_argument("spec", help="SPEC.yaml or the name of a bundled spec (kvfabric list)")
    e.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key, as for kvfabric run (repeatable)",
    )
    e.add_argument("--json", action="store_true", help="the whole estimate as JSON")
    e.set_defaults(handler=cmd_estimate)

    r = sub.add_parser("references", help="rerun bundled experiments into results/reference/")
    r.add_argument("names", nargs="*", metavar="NAME", help="default: every one with a reference")
    r.add_argument(
        "--reports-only",
        action="store_true",
        help="run nothing: rewrite the committed references' reports and plots "
        "from their own tables (no root)",
    )
    r.add_argument(
        "--repeat",
        type=int,
        default=REFERENCE_REPEATS,
        metavar="N",
        help="seeds per sweep point: the spec's seed, seed+1, ... (each headline then "
        "has an interval across seeds)",
    )
    r.add_argument(
        "--retries",
        type=int,
        default=REFERENCE_RETRIES,
        metavar="N",
        help="run an unfaithful run again (same seed) up to N times; the index names "
        "every discarded attempt and the checks it failed",
    )
    r.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the references under DIR/NAME/ instead of the checkout's "
        "results/reference/ (--reports-only reads them from there too)",
    )
    r.set_defaults(handler=cmd_references)

    b = sub.add_parser("bench", help="fidelity and cost benchmarks (benchmarks/README.md)")
    b.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"{bench_default_help()}: {', '.join(bench_names())}",
    )
    b.add_argument(
        "--quick",
        action="store_true",
        help="a few minutes in all (writes benchmarks/results/quick/)",
    )
    b.add_argument(
        "--minutes",
        type=int,
        metavar="N",
        help="soak: how long the traffic runs (default 30, --quick 2)",
    )
    b.set_defaults(handler=cmd_bench)


def cmd_estimate(args: argparse.Namespace) -> int:
    from experiments.analysis.estimates import print_estimates

    return print_estimates(args.spec, args.set, as_json=args.json)


def cmd_references(args: argparse.Namespace) -> int:
    from experiments.orchestration.reference import regenerate_references

    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: allowed an integer >= 1")
    if args.retries < 0:
        raise UsageError(f"--retries {args.retries}: allowed an integer >= 0")
    dest = {"dest": args.out} if args.out else {}
    return regenerate_references(
        args.names, reports_only=args.reports_only, repeat=args.repeat, retries=args.retries, **dest
    )


def cmd_bench(args: argparse.Namespace) -> int:
    names = bench_names()
    if not names:
        raise UsageError(
            "the benchmarks live in the kvfabric checkout (benchmarks/): run "
            "kvfabric bench from an editable install of it"
        )
    unknown = [n for n in args.names if n not in names]
    if unknown:
        raise UsageError(f"no benchmark {unknown[0]!r}: allowed {', '.join(names)}")
    from benchmarks.__main__ import run_benchmarks, usage_problem

    problem = usage_problem(args.names, args.minutes)
    if problem:
        raise UsageError(problem)
    return run_benchmarks(args.names, quick=args.quick, minutes=args.minutes)

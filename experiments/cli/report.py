"""``kvfabric report RUN_DIR ...``: report.md and plots of one run, or of several
side by side, recomputed from the stored tables (no root)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import EXIT_OK, UsageError


def add_parsers(sub: Any) -> None:
    rep = sub.add_parser("report", help="report.md and plots of runs; several side by side")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="results/<experiment>/<id>")
    rep.add_argument(
        "--out",
        metavar="DIR",
        help="where to write (default: the run, or "
        "<first run's parent>/compare-<timestamp> for several)",
    )
    rep.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from experiments.output.report import write_report
    from experiments.output.results import NotARunError

    try:
        path = write_report([Path(d) for d in args.run_dirs], Path(args.out) if args.out else None)
    except NotARunError as exc:
        raise UsageError(str(exc)) from None
    print(path)
    return EXIT_OK

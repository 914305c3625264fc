"""``kvfabric report RUN_DIR ...``: report.md and plots of one run, or of several
side by side, recomputed from the stored tables (no root)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import EXIT_OK, UsageError, print_json


def add_parsers(sub: Any) -> None:
    rep = sub.add_parser("report", help="report.md and plots of runs; several side by side")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="results/<experiment>/<id>")
    rep.add_argument(
        "--out",
        metavar="DIR",
        help="where to write (default: the run, or "
        "<first run's parent>/compare-<timestamp> for several)",
    )
    rep.add_argument(
        "--json",
        action="store_true",
        help="print the report's path and the comparison rows (one per run, labelled as "
        "the report labels them: label, verdict, p50/p99 of each latency, key values) as JSON",
    )
    rep.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from experiments.output.report import write_report
    from experiments.output.results import NotARunError

    try:
        path = write_report([Path(d) for d in args.run_dirs], Path(args.out) if args.out else None)
    except NotARunError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print_json(report_json(path, [Path(d) for d in args.run_dirs]))
    else:
        print(path)
    return EXIT_OK


def report_json(report: Path, run_dirs: list[Path]) -> dict[str, Any]:
    """``kvfabric report --json``: where the report went and one row per run, as the
    comparison's table has them (``metric_rows.key_metrics``) plus the run's path."""
    from experiments.output.metric_rows import key_metrics
    from experiments.output.results import load_run
    from experiments.output.run_labels import labelled

    runs = [load_run(d) for d in run_dirs]
    runs = labelled(runs) if len(runs) > 1 else runs
    return {
        "report": report,
        "html": report.with_suffix(".html"),
        "rows": [{**key_metrics(r), "path": r.path} for r in runs],
    }

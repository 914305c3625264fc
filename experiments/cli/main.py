"""The ``kvfabric`` command line. Exit codes, the same for every command: 0 ok; 1 a
failed run or a missing capability; 2 bad input (a spec, an argument argparse
rejects, a fabric parameter or scale out of range, a run directory: one line naming
it and what is allowed); 3 a run this machine's envelope refuses (``run`` without
``--force``, and ``run --dry-run`` of such a run)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.markup import escape

from experiments.cli import bmwg, calc, cluster, machine, report, run, spec, tools, topo
from experiments.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    UsageError,
    err,
)
from experiments.output.ownership import handed_back
from topologies import FabricError

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "UsageError", "main"]
ROOMS = (machine, cluster, topo, calc, run, report, spec, tools, bmwg)  # each adds its subcommands


class _Version(argparse.Action):
    """``--version``: the version and git revision, asked of git only when wanted."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kw: object) -> None:
        from experiments.orchestration.provenance import version_line

        print(version_line())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvfabric", description=__doc__)
    p.add_argument("--verbose", "-v", action="store_true", help="log what is being done")
    p.add_argument("--version", action=_Version, nargs=0, help="print the version and git revision")
    sub = p.add_subparsers(dest="command", required=True)
    for room in ROOMS:
        room.add_parsers(sub)
    return p


def _written_roots(args: argparse.Namespace) -> list[Path]:
    """Where a command may write: ``results/`` here and in the checkout (references),
    the benchmarks' results, any ``--out`` and the run folders it names. Never a whole
    working folder: a home directory would take minutes to walk."""
    from experiments.spec.load import REFERENCE_DIR

    repo = REFERENCE_DIR.parents[1]
    roots = [Path("results"), repo / "results", repo / "benchmarks" / "results"]
    out = getattr(args, "out", None)
    return [*roots, *([Path(out)] if out else []), *map(Path, getattr(args, "run_dirs", []))]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt(os.getpid()))
    try:
        with handed_back(_written_roots(args)):
            return args.handler(args)
    except (FabricError, UsageError, ValueError) as exc:
        return _error("error", exc, EXIT_USAGE)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/yellow]: everything this run created was removed")
        return EXIT_FAILED
    except Exception as exc:  # a failed run: one clear line, the cause logged with -v
        from topologies.machine import EnvironmentProblem

        logging.getLogger("kvfabric").debug("failure", exc_info=True)
        label = "cannot run" if isinstance(exc, EnvironmentProblem) else "failed"
        return _error(label, exc, EXIT_FAILED)


def _error(label: str, exc: BaseException, code: int) -> int:
    err.print(f"[red]{label}:[/red] {escape(str(exc))}", highlight=False)
    return code


def _sigterm_as_interrupt(main_pid: int) -> Callable[[int, object], None]:
    def handle(signum: int, frame: object) -> None:
        if os.getpid() != main_pid:  # a forked copy of this process (a library's helper)
            os._exit(128 + signum)  # ends, instead of unwinding a copy of our stack
        raise KeyboardInterrupt

    return handle


if __name__ == "__main__":
    sys.exit(main())

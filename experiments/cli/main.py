"""The ``kvfabric`` command line. Exit codes: 0 ok; 1 a failed run, a missing
capability, or a fabric parameter or scale out of range in ``topo show`` (one
line naming it and the command that shows what is allowed); 2 bad input to
``run``, ``cli``, ``report``, ``estimate`` or ``calc`` (a spec, an argument, a run
directory) and arguments argparse rejects."""

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
from experiments.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, err
from experiments.output.ownership import handed_back
from topologies import FabricError

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "UsageError", "main"]

# Commands whose FabricError is "a parameter out of range" (exit 1); for the
# others (run, cli, report, ...) it is bad input (exit 2).
FABRIC_COMMANDS = ("topo",)
ROOMS = (machine, cluster, topo, calc, run, report, spec, tools, bmwg)  # each adds its subcommands


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvfabric", description=__doc__)
    p.add_argument("--verbose", "-v", action="store_true", help="log what is being done")
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
    except FabricError as exc:
        return _error("error", exc, EXIT_FAILED if args.command in FABRIC_COMMANDS else EXIT_USAGE)
    except (UsageError, ValueError) as exc:
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

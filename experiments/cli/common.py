"""What every ``kvfabric`` command shares: the exit codes, the two consoles, the
error for bad input, and the checks of ``--scale`` the builder would make."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console

from topologies import Fabric, FabricError
from topologies.scale import DEFAULT_MTU, Scale, check_bandwidth
from topologies.shaping import egress_plan

# 0 ok; 1 a failed run or a missing capability; 2 bad input (a spec, an argument, a
# fabric parameter, a run directory); 3 a run this machine's envelope refuses
# (``kvfabric run`` without --force, and ``--dry-run`` of such a run)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3
console = Console(stderr=False)
err = Console(stderr=True, soft_wrap=True)  # an error is one line, however long


class UsageError(Exception):
    """Bad input from the user: exit code 2."""


def say(line: str) -> None:
    """One message line on stdout, never wrapped (tables still wrap)."""
    console.print(line, soft_wrap=True, highlight=False)


def print_json(obj: Any) -> None:
    """``obj`` on stdout as JSON (``--json``): plain data as summary.json writes it,
    2-space indent, nothing else on the line, so ``| jq`` reads it."""
    from experiments.analysis.jsonable import to_jsonable

    print(json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False))


def dilation_arg(option: str, high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type`` for ``--max-dilation``/``--min-dilation``: a number from 1
    to ``high`` (default ``MAX_TIME_DILATION``), else bad input (exit 2)."""
    from experiments.orchestration.dilation import check_dilation
    from topologies.scale import MAX_TIME_DILATION

    def checked(text: str) -> float:
        try:
            return check_dilation(float(text), option, high or MAX_TIME_DILATION)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option} ")) from None

    return checked


def scale_arg(text: str, mtu: int = DEFAULT_MTU) -> Scale:
    """``--scale`` as a ``Scale`` at ``mtu``, its bandwidth checked as a spec's is, as one
    line with the fix."""
    try:
        bandwidth = check_bandwidth(float(text), "--scale")
    except (ValueError, FabricError):
        raise FabricError(
            f"--scale {text} is not allowed: must be a number in (0, 1], "
            "e.g. --scale 1e-4 (the default: a 400 Gbit/s link runs at 40 Mbit/s)"
        ) from None
    return Scale(bandwidth, mtu)


def unhonoured(fabric: Fabric, scale: Scale) -> str | None:
    """The builder's refusal for the first link it cannot shape at ``scale``, or None."""
    try:
        egress_plan(fabric, scale)
    except FabricError as exc:
        return str(exc).replace("scale.bandwidth", "--scale")  # the builder speaks spec
    return None

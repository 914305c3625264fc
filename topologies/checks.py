"""Checks of fabric generator parameters: each refusal names the generator, the
parameter, its value and what is allowed (``FabricError.param`` names the key)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from .fabric import FabricError


def check_int(gen: str, name: str, value: Any, low: int, high: int | None = None) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    ok = ok and (high is None or value <= high)
    if not ok:
        allowed = f"an integer from {low} to {high}" if high else f"an integer >= {low}"
        raise FabricError(f"{gen}: {name}={value!r} is not allowed: must be {allowed}", name)
    return value


def check_gbps(gen: str, name: str, value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise FabricError(
            f"{gen}: {name}={value!r} is not allowed: must be a rate in Gbit/s > 0", name
        )
    return float(value)


def check_choice(gen: str, name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise FabricError(
            f"{gen}: {name}={value!r} is not allowed: must be one of {', '.join(allowed)}", name
        )
    return value


def refuse(gen: str, name: str, value: Any, allowed: str, why: str = "") -> FabricError:
    """The error for a parameter outside a rule that spans parameters."""
    tail = f" ({why})" if why else ""
    return FabricError(f"{gen}: {name}={value!r} is not allowed: must be {allowed}{tail}", name)


def params_of(gen: Callable[..., Any], local: dict[str, Any]) -> dict[str, Any]:
    """The generator's parameters as given (its ``locals()`` at entry)."""
    return {name: local[name] for name in inspect.signature(gen).parameters}

"""Ties among equal candidates, broken at random from the run's seed (``params["seed"]``).

An index tie-break is not neutral: the lowest-numbered port is the same spine on every
switch, so a baseline that "picks one of the equal paths" would always load that one.
A choice here is a function of the seed and of what is being chosen (a switch, a
flow's 5-tuple), not of the order of events: the same seed gives the same rules, a
recomputation after a link failure keeps every choice the failure did not take away,
and ``random.Random`` seeded from text is the same in every process.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from functools import lru_cache
from typing import Any, TypeVar

from .core import PolicyError

T = TypeVar("T")
DEFAULT_SEED = 0  # a policy computed outside a run (tests, kvfabric cli without a spec)


def seed_of(params: dict[str, Any]) -> int:
    """``params["seed"]`` checked: the run's seed, a non-negative integer."""
    seed = params.get("seed", DEFAULT_SEED)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PolicyError(f"seed={seed!r} is not allowed: must be an integer >= 0")
    return seed


def tie_rng(seed: int, *what: Hashable) -> random.Random:
    """A generator for the choices about ``what``, derived from ``seed`` alone."""
    return random.Random(":".join(["kvfabric-controller", str(seed), *map(repr, what)]))


def pick(seed: int, what: Hashable, candidates: Sequence[T]) -> T:
    """One of ``candidates`` (equally good), at random for ``what`` under ``seed``."""
    if len(candidates) == 1:
        return candidates[0]
    return tie_rng(seed, what).choice(candidates)


def preferred(seed: int, switch: str, ports: Sequence[int]) -> int:
    """The port ``switch`` prefers among equal-cost ``ports``. Each port of a switch has
    a random rank under ``seed``, the same whichever set it is among, so a switch prefers
    the same port for every destination (the traffic it carries concentrates on one path,
    as a single-path baseline should) but which port is not set by its number."""
    return min(ports, key=lambda port: (_rank(seed, switch, port), port))


@lru_cache(maxsize=65536)
def _rank(seed: int, switch: str, port: int) -> float:
    return tie_rng(seed, switch, port).random()

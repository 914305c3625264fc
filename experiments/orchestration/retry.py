"""Running unfaithful runs again with their seeds: the one rule the references
(``reference.regenerate``) and the BMWG suite (``bmwg.execute``) share (pure: the
runs go through the caller's ``run``).

On a shared 2-CPU VM a burst of steal or a scheduler stall fails the ``lateness`` or
``cpu`` check of whichever run it lands on; the same run again (same spec, same seed)
is the fair test of whether the plan, not the moment, was at fault. A run is kept when
the verdict judged it faithful and it ended without error; each attempt run again is
discarded, and its failed checks are what the caller records of it.

    done = until_kept(lambda runs: run_spec(spec, runs, out), runs, retries=2)
    done.outcomes, done.discarded, done.stopped
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger("kvfabric.retry")


class Outcome(Protocol):
    path: Path
    summary: dict[str, Any]


O = TypeVar("O", bound=Outcome)  # noqa: E741
R = TypeVar("R")


def kept(summary: Mapping[str, Any]) -> bool:
    """A run its results may count: judged faithful, and ended without error."""
    return bool((summary.get("fidelity") or {}).get("ok")) and not summary.get("error")


def interrupted(summary: Mapping[str, Any]) -> bool:
    """Did a Ctrl-C (or SIGTERM) cut the run short (``summary.json``'s ``interrupted``)."""
    return bool(summary.get("interrupted"))


def failed_checks(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The checks a run failed, each with its detail; ``error`` too when the run or its
    verdict ended in one (or nothing else says why it was not kept)."""
    fidelity = summary.get("fidelity") or {}
    checks = fidelity.get("checks") or {}
    failed = {k: c.get("detail") for k, c in checks.items() if not c.get("ok")}
    why = summary.get("error") or fidelity.get("error")
    if why or not failed:
        failed["error"] = why
    return failed


@dataclass
class Attempts(Generic[O]):
    """What ``until_kept`` ends with."""

    outcomes: list[O]  # one per run asked, in that order (fewer if stopped)
    discarded: list[O] = field(default_factory=list)  # the attempts run again
    stopped: bool = False  # a Ctrl-C stopped it: a run not started, or one cut short


def until_kept(
    run: Callable[[list[R]], Sequence[O]],
    runs: Sequence[R],
    retries: int,
    announce: Callable[[int], None] | None = None,
) -> Attempts[O]:
    """``run(runs)``, then each run not ``kept`` again (same run, so same seed) up to
    ``retries`` times. ``announce(n)`` is told before each round of ``n``. A round that
    raises ends the retries (the attempts before it stand); a Ctrl-C ends everything."""
    runs = list(runs)
    done = Attempts(list(run(runs)))
    done.stopped = _stopped(done.outcomes, len(runs))
    for _ in range(0 if done.stopped else retries):
        again = [i for i, o in enumerate(done.outcomes) if not kept(o.summary)]
        if not again:
            break
        if announce is not None:
            announce(len(again))
        try:
            redone = list(run([runs[i] for i in again]))
        except Exception as exc:  # the first attempts stand
            log.warning("running %d run(s) again failed: %s", len(again), exc)
            break
        for i, o in zip(again, redone, strict=False):
            done.discarded.append(done.outcomes[i])
            done.outcomes[i] = o
        if _stopped(redone, len(again)):
            done.stopped = True
            break
    return done


def _stopped(outcomes: Sequence[Outcome], asked: int) -> bool:
    return len(outcomes) < asked or any(interrupted(o.summary) for o in outcomes)

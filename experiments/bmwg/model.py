"""A benchmark procedure of draft-calabria-bmwg-ai-fabric-inference-bench-02 as data.

A ``Procedure`` says what the draft's test is (id, title, category, KPIs), whether it
runs here (``implemented``; ``substitute``, naming each thing that stands in for
what the draft has; ``not_feasible``, with why on this kernel), and, when it runs,
its ``Sweep``: a base spec of the existing spec language, the keys fixed for the
test, the axes the draft varies (each a list of points per profile) and, per profile,
the repetitions, warm-up and trial duration.

Profiles: ``quick`` (minutes: fewest points, two repetitions, short trials),
``standard`` (an hour or so) and ``draft`` (the draft's own counts and durations
where the emulator can hold them: hours to days per test). A sweep's size is its
points × repetitions; its wall time adds warm-up + trial per run (time dilation
and set-up excluded).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["implemented", "substitute", "not_feasible"]
STATUSES: tuple[Status, ...] = ("implemented", "substitute", "not_feasible")
PROFILES = ("quick", "standard", "draft")
RUNNABLE = ("implemented", "substitute")


@dataclass(frozen=True)
class Point:
    """One value of an axis: a label and the spec keys it sets (key path → value);
    ``warmup_s``: a shorter warm-up for this point (traffic that ends sooner than the
    run, whose measured part must still hold some of it), else the profile's."""

    label: str
    values: Mapping[str, Any]
    warmup_s: float | None = None


@dataclass(frozen=True)
class Axis:
    """What the draft varies, in its words, and its points per profile."""

    name: str
    points: Mapping[str, tuple[Point, ...]]

    def keys(self, profile: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for p in self.points[profile] for k in p.values))

    def on_grid(self, profile: str) -> bool:
        """Whether the spec's own ``sweep:`` grid can hold it: one key, scalar values."""
        points = self.points[profile]
        scalar = (str, int, float, bool, type(None))
        return len(self.keys(profile)) == 1 and all(
            isinstance(v, scalar) for p in points for v in p.values.values()
        )


def axis(
    name: str, key: str, quick: Iterable[Any], standard: Iterable[Any], draft: Iterable[Any]
) -> Axis:
    """An axis that sets one spec key to each value."""
    return joint(name, lambda v: {key: v}, quick, standard, draft)


def joint(
    name: str,
    make: Callable[[Any], Mapping[str, Any]],
    quick: Iterable[Any],
    standard: Iterable[Any],
    draft: Iterable[Any],
    label: Callable[[Any], str] = lambda v: f"{v:g}" if isinstance(v, float) else str(v),
) -> Axis:
    """An axis whose value ``v`` sets the keys ``make(v)`` (several keys move together)."""
    by_profile = dict(zip(PROFILES, (quick, standard, draft), strict=True))
    return Axis(
        name,
        {p: tuple(Point(label(v), dict(make(v))) for v in vs) for p, vs in by_profile.items()},
    )


@dataclass(frozen=True)
class Budget:
    """One profile's trial budget; ``fixed``: keys set at this profile only (a larger
    fabric for the draft's counts)."""

    repetitions: int
    trial_s: float
    warmup_s: float
    fixed: Mapping[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        """The spec's ``duration_s``: warm-up, then the trial that is measured."""
        return self.warmup_s + self.trial_s


def budgets(quick: Budget, standard: Budget, draft: Budget) -> dict[str, Budget]:
    return dict(zip(PROFILES, (quick, standard, draft), strict=True))


QUICK = Budget(2, 8.0, 2.0)
STANDARD = Budget(5, 30.0, 5.0)
DRAFT = Budget(20, 60.0, 10.0)  # the draft: >= 20 trials of >= 60 s, >= 10 s warm-up
DEFAULT_BUDGETS = budgets(QUICK, STANDARD, DRAFT)


@dataclass(frozen=True)
class Sweep:
    """A procedure's runs over the spec language: ``base`` (a bundled spec's name or a
    YAML spec text), ``fixed`` keys, ``axes`` (Cartesian product) and ``budgets``;
    ``quick_gives_up``: what the quick profile leaves out of the draft."""

    base: str
    axes: tuple[Axis, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    budgets: Mapping[str, Budget] = field(default_factory=lambda: DEFAULT_BUDGETS)
    quick_gives_up: str = "repetitions (2 of 20), trial length and most sweep points"

    def points(self, profile: str) -> int:
        return math.prod(len(a.points[profile]) for a in self.axes)

    def runs(self, profile: str) -> int:
        return self.points(profile) * self.budgets[profile].repetitions

    def wall_s(self, profile: str) -> float:
        """Traffic time of every run (set-up, tear-down and time dilation excluded)."""
        return self.runs(profile) * self.budgets[profile].duration_s


@dataclass(frozen=True)
class Substitute:
    """What the draft measures or uses, and what stands in for it here."""

    draft: str
    here: str


@dataclass(frozen=True)
class Procedure:
    """One test procedure of the draft (``id`` is its section, e.g. ``"5.1"``)."""

    id: str
    title: str
    category: str
    status: Status
    kpis: tuple[str, ...]
    sweep: Sweep | None = None
    substitutes: tuple[Substitute, ...] = ()
    why_not: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"{self.id}: status {self.status!r}; allowed: {STATUSES}")
        if self.status == "not_feasible" and (self.sweep is not None or not self.why_not):
            raise ValueError(f"{self.id}: not_feasible needs why_not and no sweep")
        if self.status in RUNNABLE and self.sweep is None:
            raise ValueError(f"{self.id}: a runnable procedure needs a sweep")
        if self.status == "substitute" and not self.substitutes:
            raise ValueError(f"{self.id}: a substitute names what stands in for what")

    @property
    def runnable(self) -> bool:
        return self.status in RUNNABLE


@dataclass(frozen=True)
class HealthIndicator:
    """A fabric health indicator of the draft's Table 6 and what this emulator has."""

    name: str
    threshold: str
    status: Status
    here: str

"""A procedure's runs at a profile, as the spec language's own calls.

    for trial in trials(procedure, "quick"):
        spec = load_trial(trial)                       # load_spec(base, overrides)
        for run in expand(spec, repeat=trial.repetitions):
            ...                                        # run_spec(run), then its KPIs

Axes the spec's ``sweep:`` grid can hold (one key, scalar values) become
``sweep.<key>=[...]`` overrides, so their runs are labelled by the runner as any
sweep's; the others (several keys moving together, or a whole workload list) are
enumerated here as variants, one ``load_spec`` each. Every trial's spec is named
``bmwg-<id>`` (``bmwg-5-1``), its bundled sweep cleared, and its ``duration_s`` is
the profile's warm-up + trial: the KPIs discard the first ``warmup_s`` (the
profile's, or a shorter one a point asks for: traffic that ends sooner than the run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

from experiments.bmwg.model import PROFILES, Axis, Budget, Point, Procedure
from experiments.spec.load import (
    SPECS_DIR,
    RunSpec,
    Spec,
    bundled_names,
    expand,
    find_bundled,
    load_spec,
)


@dataclass(frozen=True)
class Trial:
    """One ``load_spec`` of a procedure: its variant (the points of the axes off the
    spec's grid) and every ``--set`` override, in order."""

    procedure: str
    profile: str
    variant: str
    base: str
    overrides: tuple[str, ...]
    repetitions: int
    warmup_s: float


def experiment_name(procedure: Procedure) -> str:
    return "bmwg-" + procedure.id.replace(".", "-")


def _set(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value)}"


SMOKE = "smoke"  # the root tests' profile: quick's first point, one run, <= SMOKE_S
SMOKE_S, SMOKE_WARMUP_S = 10.0, 1.0
RUN_PROFILES = (SMOKE, *PROFILES)


def _smoke(axis: Axis, factor: float) -> Axis:
    """Quick's first point; a fault timeline's instants × ``factor`` (smoke ÷ quick
    duration), so a fault at a third of the run stays at a third of it."""
    first = axis.points["quick"][0]
    values = dict(first.values)
    if isinstance(values.get("faults"), list):
        values["faults"] = [
            f | {"at_s": round(f["at_s"] * factor, 3)} if isinstance(f, dict) and "at_s" in f else f
            for f in values["faults"]
        ]
    return Axis(axis.name, {SMOKE: (Point(first.label, values, first.warmup_s),), **axis.points})


def smoke_budget(quick: Budget) -> Budget:
    """One run of at most ``SMOKE_S`` (warm-up included), quick's fixed keys."""
    trial_s = min(quick.trial_s, SMOKE_S - SMOKE_WARMUP_S)
    return Budget(1, trial_s, min(quick.warmup_s, SMOKE_WARMUP_S), quick.fixed)


def _warmup(budget: Budget, points: list[Point]) -> float:
    """The profile's warm-up, or the shortest a point of the trial asks for."""
    return min([budget.warmup_s, *(p.warmup_s for p in points if p.warmup_s is not None)])


def trials(procedure: Procedure, profile: str) -> list[Trial]:
    """The trials of ``procedure`` at ``profile`` (none for a test not feasible here).
    ``smoke``: the first point of each axis at ``quick``, once, for at most
    ``SMOKE_S`` (a check that the procedure runs, not a measurement)."""
    if profile not in RUN_PROFILES:
        raise ValueError(f"profile {profile!r}; allowed: {', '.join(RUN_PROFILES)}")
    sweep = procedure.sweep
    if sweep is None:
        return []
    if profile == SMOKE:
        quick = sweep.budgets["quick"]
        smoke = smoke_budget(quick)
        factor = smoke.duration_s / quick.duration_s
        axes = tuple(_smoke(a, factor) for a in sweep.axes)
        sweep = replace(sweep, axes=axes, budgets={**sweep.budgets, SMOKE: smoke})
    budget = sweep.budgets[profile]
    common = [_set("name", experiment_name(procedure)), "sweep={}"]
    common += [_set(k, v) for k, v in {**sweep.fixed, **budget.fixed}.items()]
    common.append(_set("duration_s", budget.duration_s))
    grid = [a for a in sweep.axes if a.on_grid(profile)]
    grid_sets = [
        _set(
            f"sweep.{a.keys(profile)[0]}",
            [next(iter(p.values.values())) for p in a.points[profile]],
        )
        for a in grid
    ]
    off_grid = [a.points[profile] for a in sweep.axes if not a.on_grid(profile)]
    out = []
    for points in product(*off_grid):
        sets = [_set(k, v) for p in points for k, v in p.values.items()]
        out.append(
            Trial(
                procedure.id,
                profile,
                ",".join(p.label for p in points),
                sweep.base,
                tuple(common + sets + grid_sets),
                budget.repetitions,
                _warmup(budget, [*points, *(p for a in grid for p in a.points[profile])]),
            )
        )
    return out


def load_trial(trial: Trial, seed: int | None = None) -> Spec:
    """The trial's spec, validated: ``base`` is a bundled spec's name or YAML text."""
    if trial.base in bundled_names():
        return load_spec(find_bundled(trial.base), trial.overrides, seed)
    return load_spec(trial.base, trial.overrides, seed, base_dir=SPECS_DIR)


def runs(trial: Trial, seed: int | None = None) -> list[RunSpec]:
    """Every run of the trial: its grid × its repetitions (seeds seed..seed+R-1)."""
    return expand(load_trial(trial, seed), repeat=trial.repetitions)

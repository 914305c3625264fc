"""``kvfabric bmwg run``'s plan: test ids + a fabric spec + a profile → every run, as
data, before anything is built.

    fabric = read_fabric("spine-leaf-1to1")         # its fabric:, scale:, controller:,
    plan = plan_suite(["5.1", "10.1"], fabric, "quick")  # and serving pools
    plan.trials      # (test, trial, spec, runs) on that fabric, each RunSpec ready
    plan.misfits     # trials the fabric cannot hold, and why

A test id not in the draft, or a test not feasible here, raises ``Refused`` naming
every such id. Each trial is the procedure's own (``plan.trials``); its spec takes the
user's fabric and scale (``fabric_map.onto_fabric``): what the procedure sizes itself
(hosts per leaf, a whole fabric) is dropped, what it varies on any fabric (the queue
limit, storage nodes it needs) is kept. Wall time: each run's ``duration_s`` × its time
dilation (``auto``: at least 1) + ``SETUP_S`` for building and tearing down.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from experiments.bmwg.catalog import BY_ID
from experiments.bmwg.fabric_map import DoesNotFit, HostMap, onto_fabric
from experiments.bmwg.model import Substitute
from experiments.bmwg.plan import Trial, load_trial, trials
from experiments.orchestration.demand import Demand
from experiments.orchestration.dilation import choose_dilation, shaped_rates
from experiments.orchestration.envelope import DEFAULT
from experiments.spec.load import SPECS_DIR, RunSpec, Spec, expand, load_spec, locate
from experiments.spec.schema import SpecError
from topologies.shaping import max_rate_bps

SETUP_S = 5.0  # building the fabric, starting the controller and agents, tearing down
KEPT_FABRIC_KEYS = ("buffer_pkts",)  # what a procedure varies on any fabric
STORAGE_KEYS = ("storage_nodes", "storage_gbps")
FABRIC_DIR = Path(__file__).resolve().parent / "fabrics"
# tests whose traffic is a finite burst from the start (incast rounds, a fixed set of KV
# transfers): it may be over before any warm-up ends, so they are measured whole
ONE_SHOT = ("8.1", "8.2", "9.3")


def measured_after_s(test: str, warmup_s: float) -> float:
    """Seconds of a run the KPIs leave out: the warm-up, none for a ``ONE_SHOT`` test."""
    return 0.0 if test in ONE_SHOT else warmup_s


class Refused(ValueError):
    """Tests that cannot run: not in the draft, or not feasible here."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class FabricSpec:
    """The user's fabric: ``fabric`` (required), ``scale``, ``controller`` and the
    serving ``pools`` of its first serving workload (``{"prefill": …, "decode": …}``)."""

    name: str
    raw: dict[str, Any]
    pools: dict[str, Any] | None = None


def read_fabric(argument: str) -> FabricSpec:
    """A fabric spec: a YAML file, one of ``experiments/bmwg/fabrics``, or a bundled
    experiment's name (its fabric, scale, controller and pools are taken)."""
    own = FABRIC_DIR / f"{argument.removesuffix('.yaml')}.yaml"
    path = own if "/" not in argument and own.is_file() else locate(argument)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    return fabric_of(path.stem, raw)


def fabric_of(name: str, raw: Any) -> FabricSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("fabric"), dict):
        raise SpecError(f"{name}: a fabric spec needs a fabric: section", "fabric", None)
    kept = {k: raw[k] for k in ("fabric", "scale", "controller") if k in raw}
    serving = next(
        (
            w
            for w in raw.get("workloads") or []
            if isinstance(w, dict) and w.get("kind") == "serving"
        ),
        None,
    )
    pools = {r: serving[r] for r in ("prefill", "decode") if serving.get(r)} if serving else None
    probe = load_spec(yaml.safe_dump({"name": name, "duration_s": 1} | kept), base_dir=SPECS_DIR)
    probe.fabric()  # a fabric that does not build is an error now, not per trial
    return FabricSpec(name, kept, pools or None)


@dataclass(frozen=True)
class PlannedTrial:
    test: str
    trial: Trial
    spec: Spec
    runs: tuple[RunSpec, ...]
    dilation: float = 1.0  # the time dilation its runs are planned at (auto resolved)

    @property
    def wall_s(self) -> float:
        return sum(run_wall_s(r, dilation=self.dilation) for r in self.runs)


@dataclass(frozen=True)
class Misfit:
    test: str
    variant: str
    reason: str


@dataclass
class SuitePlan:
    fabric: FabricSpec
    profile: str
    tests: list[str]
    trials: list[PlannedTrial] = field(default_factory=list)
    misfits: list[Misfit] = field(default_factory=list)
    min_dilation: float = 1.0  # auto's floor (``bmwg run --min-dilation``)

    @property
    def runs(self) -> int:
        return sum(len(t.runs) for t in self.trials)

    @property
    def wall_s(self) -> float:
        return sum(t.wall_s for t in self.trials)

    def substitutes(self) -> dict[str, tuple[Substitute, ...]]:
        return {t: BY_ID[t].substitutes for t in self.tests if BY_ID[t].substitutes}


def run_wall_s(run: RunSpec, setup_s: float = SETUP_S, dilation: float | None = None) -> float:
    """Wall seconds of one run: its duration at its time dilation + set-up. ``dilation``:
    the one planned for it (``planned_dilation``); by default the spec's number, or 1 for
    ``auto`` (``planned_dilation`` is the bound its link rates set)."""
    scale = run.config.scale
    d = dilation if dilation is not None else (1.0 if scale.auto else scale.d)
    return run.duration_s * d + setup_s


def planned_dilation(run: RunSpec, min_dilation: float = 1.0) -> float:
    """The time dilation ``run`` is planned at: the spec's number; for ``auto``, the
    smallest from ``min_dilation`` on that its link rates need on this machine
    (``dilation.choose_dilation`` with the traffic left out: its full plan costs seconds
    per trial, and a suite has hundreds). The traffic can ask for more: for ``auto`` the
    estimate is a lower bound."""
    scale = run.config.scale
    if not scale.auto:
        return scale.d
    rates = shaped_rates(run.fabric(), run.config.faults)
    return choose_dilation(
        Demand(),
        DEFAULT,
        scale,
        rates,
        run.duration_s,
        max_rate_bps=max_rate_bps(),
        min_dilation=min_dilation,
    ).d


def check_tests(test_ids: Sequence[str]) -> list[str]:
    """``test_ids`` in order without repeats; ``Refused`` for unknown or infeasible ones."""
    reasons = []
    for t in test_ids:
        if t not in BY_ID:
            reasons.append(f"{t}: no such test in the draft")
        elif not BY_ID[t].runnable:
            reasons.append(f"{t}: not feasible here: {BY_ID[t].why_not}")
    if reasons:
        raise Refused(reasons)
    return list(dict.fromkeys(test_ids))


def _set_keys(trial: Trial) -> list[str]:
    return [o.partition("=")[0] for o in trial.overrides]


def on_fabric(trial: Trial, fabric: FabricSpec) -> Spec:
    """The trial's spec on ``fabric`` (``DoesNotFit`` or ``SpecError`` if it cannot be)."""
    ref = load_trial(trial)
    keys = _set_keys(trial)
    ref_fabric = ref.raw.get("fabric") or {}
    kept = {k: ref_fabric[k] for k in KEPT_FABRIC_KEYS if f"fabric.{k}" in keys}
    user_fabric = fabric.raw["fabric"]
    if ref_fabric.get("storage_nodes") and not user_fabric.get("storage_nodes"):
        kept |= {k: ref_fabric[k] for k in STORAGE_KEYS if k in ref_fabric}
        kept["storage_attach"] = "spine"
    varies_pools = any(".prefill" in k or ".decode" in k for k in keys)
    probe = load_spec(
        yaml.safe_dump({"name": "probe", "duration_s": 1, **fabric.raw}), base_dir=SPECS_DIR
    )
    hosts = HostMap(ref.fabric(), probe.fabric())
    raw = onto_fabric(ref.raw, hosts, fabric.raw, kept, None if varies_pools else fabric.pools)
    # the grid's first values in the spec itself, so a base value the grid replaces
    # (8.1's 8 senders) is not judged against this fabric
    firsts = [f"{k}={json.dumps(vs[0])}" for k, vs in ref.sweep.items() if vs]
    return load_spec(yaml.safe_dump(raw, sort_keys=False), firsts, base_dir=ref.base_dir)


def plan_suite(
    test_ids: Sequence[str], fabric: FabricSpec, profile: str, min_dilation: float = 1.0
) -> SuitePlan:
    """Every trial of ``test_ids`` at ``profile`` on ``fabric``, each at the time
    dilation it is planned at (``planned_dilation``, ``auto`` from ``min_dilation``);
    trials it cannot hold are ``misfits``. ``Refused`` for unknown or infeasible tests,
    and for a test none of whose trials fits."""
    tests = check_tests(test_ids)
    plan = SuitePlan(fabric, profile, tests, min_dilation=min_dilation)
    empty = []
    for test in tests:
        fitted = 0
        for trial in trials(BY_ID[test], profile):
            try:
                spec = on_fabric(trial, fabric)
                runs = expand(spec, repeat=trial.repetitions)
            except (DoesNotFit, SpecError) as exc:
                plan.misfits.append(Misfit(test, trial.variant, str(exc)))
                continue
            d = planned_dilation(runs[0], min_dilation) if runs else 1.0  # seeds alone differ
            plan.trials.append(PlannedTrial(test, trial, spec, tuple(runs), d))
            fitted += 1
        if not fitted:
            empty.append(test)
    if empty:
        why = {m.test: m.reason for m in plan.misfits}
        raise Refused([f"{t}: no trial fits fabric {fabric.name}: {why.get(t)}" for t in empty])
    return plan

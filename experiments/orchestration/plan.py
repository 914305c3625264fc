"""A run configuration's traffic as data: the network workloads' schedule, the
serving workload's live driver, and what they will ask of this machine (pure; no
root, no network).

Each workload gets its own seed, derived from the run's seed and the
workload's position, so adding a workload does not reshuffle the others.
Flow ids: the schedule's rows first, then the driver allocates from the next id.
The serving driver is built once per plan: what runs a driver to its end before or
beside the run (the demand's fluid simulation, the traffic across a placement, the
estimate) runs an unused copy of it (``TrafficPlan.spare_driver``).

A ``background`` workload whose ``flow_size_scale`` is ``auto`` is fitted into
the envelope: the smallest k of ``FLOW_SIZE_LADDER`` whose plan fits is taken, found by
bisection (``smallest_fitting``; ``TrafficPlan.flow_size_scale`` records it); when none
fits, the largest. The ladder is
judged at the spec's time dilation, at 1 when it is ``auto``: a coarser flow size is
tried before a slower run, and the dilation (``experiments.orchestration.dilation``)
takes what the largest k leaves over.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.orchestration.demand import Demand, driver_demand, schedule_demand
from experiments.orchestration.envelope import DEFAULT, Envelope, exceeded
from experiments.spec.config import BackgroundWorkload, Controller, RunConfig, ServingWorkload
from experiments.spec.typed import resolved_of
from experiments.spec.workloads import NETWORK_KINDS, workload_seed
from topologies import Fabric
from traffic.driver import Driver
from traffic.workloads import concat_schedules, empty_schedule

FLOW_SIZE_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class TrafficPlan:
    schedule: pd.DataFrame  # real-equivalent bytes (the fleet scales them)
    driver: Driver | None  # the run's: numbered after the schedule, not yet used
    demand: Demand = field(default_factory=Demand)
    flow_size_scale: dict[int, float] = field(default_factory=dict)  # workload -> k
    exceeded: list[str] = field(default_factory=list)  # figures over the envelope
    fabric: Fabric | None = None  # the driver's (shared by its copies)
    _unused: Driver | None = field(default=None, repr=False)  # a copy of driver, never run

    def spare_driver(self) -> Driver | None:
        """A new copy of the plan's driver as built, numbered as the run's, never run:
        for what runs a driver to its end without the run (``plan_cross_traffic``, the
        estimate). None without a serving workload."""
        return None if self._unused is None else unused_copy(self._unused, self.fabric)


def unused_copy(driver: Driver, fabric: Fabric | None) -> Driver:
    """A copy of a driver no one has run yet, sharing its fabric (a driver is pure: the
    copy sends what the original would)."""
    memo = {} if fabric is None else {id(fabric): fabric}
    return copy.deepcopy(driver, memo)


def controller_params(controller: Controller, seed: int | None = None) -> dict[str, Any]:
    """The controller section as policy parameters (only what the spec gives), and the
    run's ``seed``, from which the policy breaks ties among equal paths (and ``valiant``
    and ``ugal`` draw their intermediates)."""
    params: dict[str, Any] = {} if seed is None else {"seed": seed}
    if controller.tenants:
        params["tenants"] = resolved_of(controller.tenants)
    if controller.spines and controller.policy == "tenant_paths":  # so a policy sweep can keep it
        params["spines"] = resolved_of(controller.spines)
    if controller.qos.classes:
        params["qos"] = resolved_of(controller.qos)
    return params


def network_schedule(
    config: RunConfig, fabric: Fabric, flow_size_scale: dict[int, float] | None = None
) -> pd.DataFrame:
    """Every network workload of the run (all but ``serving``) as one schedule;
    ``flow_size_scale`` gives the k of workloads whose spec says ``auto``."""
    return _network_parts(config, fabric, flow_size_scale or {})[0]


def _network_parts(
    config: RunConfig, fabric: Fabric, ks: dict[int, float]
) -> tuple[pd.DataFrame, dict[int, int]]:
    """The schedule and flow id -> workload index. Workloads that take every host by
    default take the GPUs (storage nodes send only the serving workload's tier traffic)."""
    hosts = [h.name for h in fabric.gpus]
    autos = set(auto_scaled(config))
    parts, index, first_request = [], [], 0
    for i, workload in enumerate(config.workloads):
        kind = NETWORK_KINDS.get(workload.kind)
        if kind is None:
            continue
        # the generator's keyword arguments: the workload's keys as the spec resolves them
        params = {k: v for k, v in resolved_of(workload).items() if k != "kind"}
        if i in autos:
            params["flow_size_scale"] = ks.get(i, 1.0)
        accepted = inspect.signature(kind.fn).parameters
        runtime = {
            "hosts": hosts,
            "seed": workload_seed(config.seed, i),
            "first_request_id": first_request,
        }
        for name, value in runtime.items():
            if name in accepted and name not in params:
                params[name] = value
        part = kind.fn(**params)
        if len(part) and (part["request_id"] >= 0).any():
            first_request = int(part["request_id"].max()) + 1
        parts.append(part)
        index += [i] * len(part)
    if not parts:
        return empty_schedule(), {}
    schedule = concat_schedules(parts)
    return schedule, dict(zip(schedule["flow_id"].tolist(), index, strict=True))


def auto_scaled(config: RunConfig) -> list[int]:
    """Workloads whose flow_size_scale the plan chooses."""
    return [
        i
        for i, w in enumerate(config.workloads)
        if isinstance(w, BackgroundWorkload) and w.flow_size_scale == "auto"
    ]


def smallest_fitting(ladder: tuple[int, ...], over: Callable[[int], list[str]]) -> int:
    """The smallest k of ``ladder`` for which ``over(k)`` is empty, or its largest when
    none is; searched by bisection (a coarser flow size asks less of every figure: fewer
    messages for the same bytes), so 11 steps cost at most 6 plans, not 11. ``over`` is
    called at least once for the k returned."""
    if not over(ladder[0]) or len(ladder) == 1:
        return ladder[0]
    lo, hi = 0, len(ladder) - 1  # ladder[lo] over; ladder[hi] not yet judged
    if over(ladder[hi]):
        return ladder[hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if over(ladder[mid]):
            lo = mid
        else:
            hi = mid
    return ladder[hi]


def traffic_plan(
    config: RunConfig,
    fabric: Fabric,
    base_dir: Path | None,
    envelope: Envelope | None = None,
    dilation: float = 1.0,
) -> TrafficPlan:
    """The schedule, the serving workload's driver (if any), the run's demand, and
    the flow-size scale of ``auto`` background workloads fitted into ``envelope``
    (default: ``envelope.DEFAULT``) at time dilation ``dilation``; ``exceeded`` is the
    plan judged at it."""
    env = envelope or DEFAULT
    scale = config.scale.bandwidth
    connection = config.agents.connection
    serving_demand = Demand()
    serving = _serving(config, fabric, base_dir)
    if serving is not None:
        i, built = serving
        serving_demand = driver_demand(
            unused_copy(built, fabric), fabric, scale, connection, workload=i
        )
    autos = auto_scaled(config)
    tried: dict[float, tuple[pd.DataFrame, Demand, list[str]]] = {}

    def judged(k: float) -> list[str]:
        chosen = dict.fromkeys(autos, float(k))
        schedule, workload_of = _network_parts(config, fabric, chosen)
        demand = schedule_demand(schedule, fabric, scale, connection, workload_of) + serving_demand
        tried[k] = (schedule, demand, exceeded(demand, env, dilation))
        return tried[k][2]

    k = float(smallest_fitting(FLOW_SIZE_LADDER if autos else (1,), judged))
    chosen = dict.fromkeys(autos, k)
    schedule, demand, over = tried[k]
    if serving is None:
        return TrafficPlan(schedule, None, demand, chosen, over, fabric)
    driver = serving[1]
    driver.number_flows_from(int(schedule["flow_id"].max()) + 1 if len(schedule) else 0)
    return TrafficPlan(schedule, driver, demand, chosen, over, fabric, unused_copy(driver, fabric))


def _serving(config: RunConfig, fabric: Fabric, base_dir: Path | None) -> tuple[int, Driver] | None:
    """(workload index, its driver, not yet run, flows numbered from 0) of the run's
    serving workload (one per spec: the spec's rule)."""
    serving = [(i, w) for i, w in enumerate(config.workloads) if isinstance(w, ServingWorkload)]
    if not serving:
        return None
    from traffic.serving import build_serving

    i, workload = serving[0]
    seed = workload_seed(config.seed, i)
    return i, build_serving(workload, fabric, seed, 0, base_dir)

"""A resolved spec's traffic as data: the network workloads' schedule, the
serving workload's live driver, and what they will ask of this machine (pure; no
root, no network).

Each workload gets its own seed, derived from the run's seed and the
workload's position, so adding a workload does not reshuffle the others.
Flow ids: the schedule's rows first, then the driver allocates from the next id.

A ``background`` workload whose ``flow_size_scale`` is ``auto`` is fitted into
the envelope: the smallest k of ``FLOW_SIZE_LADDER`` whose plan fits is taken
(``TrafficPlan.flow_size_scale`` records it); when none fits, the largest.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.orchestration.demand import Demand, driver_demand, schedule_demand
from experiments.orchestration.envelope import DEFAULT, Envelope, exceeded
from experiments.spec.typed import config_of
from experiments.spec.workloads import NETWORK_KINDS
from topologies import Fabric
from traffic.driver import Driver
from traffic.workloads import concat_schedules, empty_schedule

FLOW_SIZE_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class TrafficPlan:
    schedule: pd.DataFrame  # real-equivalent bytes (the fleet scales them)
    driver: Driver | None
    demand: Demand = field(default_factory=Demand)
    flow_size_scale: dict[int, float] = field(default_factory=dict)  # workload -> k
    exceeded: list[str] = field(default_factory=list)  # figures over the envelope


def controller_params(resolved: dict[str, Any]) -> dict[str, Any]:
    """The controller section as policy parameters (only what the spec gives)."""
    ctl = resolved["controller"]
    params: dict[str, Any] = {}
    if ctl["tenants"]:
        params["tenants"] = ctl["tenants"]
    if ctl["spines"] and ctl["policy"] == "tenant_paths":  # so a policy sweep can keep it
        params["spines"] = ctl["spines"]
    if ctl["qos"]["classes"]:
        params["qos"] = ctl["qos"]
    return params


def workload_seed(run_seed: int, index: int) -> int:
    """The seed of workload ``index`` of a run: independent streams per workload."""
    return int(np.random.SeedSequence([run_seed, index]).generate_state(1)[0])


def network_schedule(resolved: dict[str, Any], fabric: Fabric,
                     flow_size_scale: dict[int, float] | None = None) -> pd.DataFrame:  # fmt: skip
    """Every network workload of the spec (all but ``serving``) as one schedule;
    ``flow_size_scale`` gives the k of workloads whose spec says ``auto``."""
    return _network_parts(resolved, fabric, flow_size_scale or {})[0]


def _network_parts(resolved: dict[str, Any], fabric: Fabric,
                   ks: dict[int, float]) -> tuple[pd.DataFrame, dict[int, int]]:  # fmt: skip
    """The schedule and flow id -> workload index. Workloads that take every host by
    default take the GPUs (storage nodes send only the serving workload's tier traffic)."""
    hosts = [h.name for h in fabric.gpus]
    parts, index, first_request = [], [], 0
    for i, workload in enumerate(resolved["workloads"]):
        kind = NETWORK_KINDS.get(workload["kind"])
        if kind is None:
            continue
        params = {k: v for k, v in workload.items() if k != "kind"}
        if params.get("flow_size_scale") == "auto":
            params["flow_size_scale"] = ks.get(i, 1.0)
        accepted = inspect.signature(kind.fn).parameters
        runtime = {"hosts": hosts, "seed": workload_seed(resolved["seed"], i),
                   "first_request_id": first_request}  # fmt: skip
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


def auto_scaled(resolved: dict[str, Any]) -> list[int]:
    """Workloads whose flow_size_scale the plan chooses."""
    return [i for i, w in enumerate(resolved["workloads"]) if w.get("flow_size_scale") == "auto"]


def traffic_plan(resolved: dict[str, Any], fabric: Fabric, base_dir: Path | None,
                 envelope: Envelope | None = None) -> TrafficPlan:  # fmt: skip
    """The schedule, the serving workload's driver (if any), the run's demand, and
    the flow-size scale of ``auto`` background workloads fitted into ``envelope``
    (default: ``envelope.DEFAULT``)."""
    env = envelope or DEFAULT
    scale = resolved["scale"]["bandwidth"]
    connection = resolved["agents"]["connection"]
    serving_demand = Demand()
    driver_factory = _serving(resolved, fabric, base_dir)
    if driver_factory is not None:
        i, make = driver_factory
        serving_demand = driver_demand(make(0), fabric, scale, connection, workload=i)
    autos = auto_scaled(resolved)
    chosen: dict[int, float] = {}
    for k in FLOW_SIZE_LADDER if autos else (1,):
        chosen = dict.fromkeys(autos, float(k))
        schedule, workload_of = _network_parts(resolved, fabric, chosen)
        demand = schedule_demand(schedule, fabric, scale, connection, workload_of) + serving_demand
        over = exceeded(demand, env)
        if not over:
            break
    driver = None
    if driver_factory is not None:
        first = int(schedule["flow_id"].max()) + 1 if len(schedule) else 0
        driver = driver_factory[1](first)
    return TrafficPlan(schedule, driver, demand, chosen, over)


def _serving(resolved: dict[str, Any], fabric: Fabric,
             base_dir: Path | None) -> tuple[int, Any] | None:  # fmt: skip
    """(workload index, first flow id -> a new driver) of the spec's serving workload."""
    serving = [(i, w) for i, w in enumerate(resolved["workloads"]) if w["kind"] == "serving"]
    if len(serving) > 1:
        where = ", ".join(f"workloads.{i}" for i, _ in serving)
        raise ValueError(f"{where}: one serving workload per spec (run a second spec instead)")
    if not serving:
        return None
    from traffic.serving import build_serving

    i, _ = serving[0]
    seed = workload_seed(resolved["seed"], i)
    workload = config_of(resolved).workloads[i]
    return i, lambda first: build_serving(workload, fabric, seed, first, base_dir)

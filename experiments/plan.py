"""A resolved spec's traffic as data: the network workloads' schedule and the
serving workload's live driver (pure; no root, no network).

Each workload gets its own seed, derived from the run's seed and the
workload's position, so adding a workload does not reshuffle the others.
Flow ids: the schedule's rows first, then the driver allocates from the next id.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from topologies import Fabric
from traffic.driver import Driver
from traffic.workloads import concat_schedules, empty_schedule

from .spec_workloads import NETWORK_KINDS


@dataclass
class TrafficPlan:
    schedule: pd.DataFrame  # real-equivalent bytes (the fleet scales them)
    driver: Driver | None


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


def network_schedule(resolved: dict[str, Any], fabric: Fabric) -> pd.DataFrame:
    """Every network workload of the spec (all but ``serving``) as one schedule."""
    hosts = [h.name for h in fabric.hosts]
    parts, first_request = [], 0
    for i, workload in enumerate(resolved["workloads"]):
        kind = NETWORK_KINDS.get(workload["kind"])
        if kind is None:
            continue
        params = {k: v for k, v in workload.items() if k != "kind"}
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
    return concat_schedules(parts) if parts else empty_schedule()


def traffic_plan(resolved: dict[str, Any], fabric: Fabric, base_dir: Path | None) -> TrafficPlan:
    """The schedule and, if the spec has a ``serving`` workload, its driver."""
    schedule = network_schedule(resolved, fabric)
    serving = [(i, w) for i, w in enumerate(resolved["workloads"]) if w["kind"] == "serving"]
    if len(serving) > 1:
        where = ", ".join(f"workloads.{i}" for i, _ in serving)
        raise ValueError(f"{where}: one serving workload per spec (run a second spec instead)")
    driver = None
    if serving:
        from traffic.serving import build_serving

        i, workload = serving[0]
        first = int(schedule["flow_id"].max()) + 1 if len(schedule) else 0
        driver = build_serving(
            workload, fabric, workload_seed(resolved["seed"], i), first, base_dir
        )
    return TrafficPlan(schedule, driver)

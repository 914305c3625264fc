"""A run's deployment (its Scale, egress plan and cluster) is made once, in ``prepare``,
and is what the builder shapes by and the finish step judges by (no root: the builder
and the controller are stand-ins)."""

from __future__ import annotations

import contextlib
from dataclasses import FrozenInstanceError
from pathlib import Path

import pandas as pd
import pytest

import experiments.orchestration.deployment as deployment_module
from experiments.orchestration import runner
from experiments.orchestration.deployment import Deployment
from experiments.orchestration.envelope import DEFAULT
from experiments.orchestration.runner import Recorded, prepare
from experiments.spec.load import expand, load_spec
from topologies import FabricError, spine_leaf
from topologies.scale import Scale
from topologies.shaping import egress_plan

SPEC = """
name: dep
duration_s: 2
scale: {bandwidth: 1.0e-4, mtu: 9000}
fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2, host_gbps: 100,
         uplink_gbps: 400}
controller: {policy: ecmp}
workloads: [{kind: incast, senders: 2, sru_bytes: 1.0e+7, rounds: 1}]
"""


@pytest.fixture
def prepared(tmp_path):
    spec = load_spec(SPEC, base_dir=tmp_path)
    (p,) = prepare(spec, expand(spec), envelope=(DEFAULT, "test"))
    return p


def test_prepare_makes_the_runs_deployment_once_from_its_scale(prepared):
    d = prepared.deployment
    assert d.scale == prepared.run.config.scale == Scale(1e-4, 9000)
    assert list(d.plan) == egress_plan(prepared.fabric, d.scale)
    assert d.cluster is None  # one machine; fabric_up adds a run's cluster
    up = next(e for e in d.plan if e.node == "leaf0" and e.link.real_gbps == 400)
    assert up.rate_bps == 40_000_000 and up.mtu == 9000 and up.queue_pkts == 11
    assert d.rates_bps[("h0", 0)] == 10_000_000
    with pytest.raises(FrozenInstanceError):
        d.scale = Scale()  # type: ignore[misc]


def test_a_link_the_machine_cannot_shape_fails_in_prepare(tmp_path):
    spec = load_spec(SPEC.replace("1.0e-4", "1.0e-7"), base_dir=tmp_path)  # 10 kbit/s hosts
    with pytest.raises(FabricError, match="below the 0.1 Mbit/s"):
        prepare(spec, expand(spec), envelope=(DEFAULT, "test"))
    with pytest.raises(FabricError, match="below the 0.1 Mbit/s"):
        Deployment.of(spine_leaf(host_gbps=1), Scale(1e-5))


def test_the_finish_step_judges_by_the_deployments_plan_without_rebuilding_it(
    prepared, tmp_path, monkeypatch
):
    seen = {}

    def verdict(flows, queues, cpu, samplers, rates, fabric, thresholds, **kw):
        seen["rates"], seen["mtu"], seen["changes"] = rates, kw["mtu"], kw["rate_changes"]
        return {"ok": True, "checks": {}}

    def rebuilt(*a, **k):
        raise AssertionError("the egress plan was rebuilt after prepare")

    monkeypatch.setattr(runner, "verdict", verdict)
    monkeypatch.setattr(deployment_module, "egress_plan", rebuilt)
    monkeypatch.setattr("topologies.shaping.egress_plan", rebuilt)
    monkeypatch.setattr("experiments.output.report.write_report", lambda dirs: None)
    fault = {
        "event": "link_degrade",
        "link": ["leaf0", "spine0"],
        "gbps": 100.0,
        "t_ns": 5,
        "ok": True,
        "t_start_ns": 5,
    }
    rec = Recorded(tables={"flows": pd.DataFrame()}, events={"faults": [fault]})
    runner._finish(prepared, Path(tmp_path), rec, {"experiment": "dep"}, stop=False)
    assert seen["rates"] == prepared.deployment.rates_bps
    assert seen["mtu"] == 9000
    # a link degraded to 100 Gbit/s is judged at the deployment's scale: 10 Mbit/s
    assert {r for changes in seen["changes"].values() for _, r in changes} == {10_000_000}


def test_fabric_up_builds_by_the_deployments_plan_and_yields_it(prepared, tmp_path, monkeypatch):
    built = {}

    class Controller:
        port = 6653

        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def wait_ready(self, timeout_s):
            pass

    class Network(contextlib.AbstractContextManager):
        def __init__(self, fabric, scale, **kw):
            built.update(scale=scale, **kw)

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(runner, "ControllerProcess", Controller)
    monkeypatch.setattr(runner, "FabricNetwork", Network)
    d = prepared.deployment
    with runner.fabric_up(prepared.fabric, prepared.run.config, tmp_path, deployment=d) as (
        _,
        net,
        deployed,
    ):
        assert isinstance(net, Network)
    assert deployed == d and deployed.cluster is None
    assert built["scale"] == d.scale and built["plan"] == list(d.plan)
    assert "mtu" not in built  # the MTU travels in the Scale
    assert built["transport"] == prepared.run.config.transport  # its times x the Scale's d

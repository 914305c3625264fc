"""Sixty-four GPUs on one machine: every pair reachable through the controller's rules,
a serving run over all of them completing every request, and nothing left behind (the
autouse ``nothing_left_behind`` fixture checks each test's teardown)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from controller.process import ControllerProcess
from experiments.cli.main import main
from experiments.measurement.reach import all_pairs_ping
from topologies import rail_optimized
from topologies.builder import Controller, FabricNetwork
from topologies.scale import Scale

pytestmark = pytest.mark.root

SIXTY_FOUR = dict(
    servers=8, gpus_per_server=8, spines=4, rail_gbps=400, spine_gbps=400, nvlink_gbps=3600
)


def test_every_pair_of_64_gpus_is_reachable_through_the_controller(tmp_path):
    fabric = rail_optimized(**SIXTY_FOUR)
    assert len(fabric.hosts) == 64
    with (
        ControllerProcess(fabric, "ecmp", tmp_path / "controller") as ctl,
        FabricNetwork(fabric, Scale(), controller=Controller(port=ctl.port)) as net,
    ):
        ctl.wait_ready(timeout_s=60)
        reach = all_pairs_ping(net)
    failed = [pair for pair, ok in reach.items() if not ok]
    assert len(reach) == 64 * 63
    assert not failed, f"{len(failed)} of {len(reach)} pairs unreachable, e.g. {failed[:5]}"


SPEC = textwrap.dedent(
    """
    name: scale-64
    seed: 1
    duration_s: 8
    scale: {bandwidth: 1.0e-4}
    fabric: {kind: rail_optimized, servers: 8, gpus_per_server: 8, spines: 4,
             rail_gbps: 400, spine_gbps: 400, nvlink_gbps: 3600, buffer_pkts: 64}
    controller: {policy: ecmp}
    workloads:
      - kind: serving
        model: llama-3-70b
        gpu: h100
        prefill: {servers: [0, 1, 2, 3], tp: 8}
        decode: {servers: [4, 5, 6, 7], tp: 8}
        router: least_loaded
        transfer: monolithic
        arrivals:
          synthetic: {n: 12, rate_per_s: 2, input_tokens: 4000, output_tokens: 32}
    """
)


def test_a_serving_run_on_64_gpus_completes_every_request(tmp_path: Path):
    spec = tmp_path / "scale-64.yaml"
    spec.write_text(SPEC)
    assert main(["run", str(spec), "--out", str(tmp_path), "--quiet"]) == 0
    (run,) = [p.parent for p in tmp_path.glob("scale-64/*/summary.json")]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["partial"] is False and summary["error"] is None
    assert summary["envelope"]["fits"]
    requests = pd.read_parquet(run / "requests.parquet")
    assert len(requests) == 12 and requests["served"].all(), requests["error"].tolist()
    tokens = pd.read_parquet(run / "tokens.parquet")
    assert (tokens.groupby("request_id").size() == 32).all()
    flows = pd.read_parquet(run / "flows.parquet")
    # tp-8 decode: every step's all-reduce is 8 messages over each decode server's NVLink
    collectives = flows[flows["kind"] == "collective"]
    assert len(collectives) and collectives["ok"].all()
    assert set(collectives["src"].str.split("_").str[0]) <= {"gpu4", "gpu5", "gpu6", "gpu7"}

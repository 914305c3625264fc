"""Serving pools by GPU over real packets: prefill and decode on different GPUs of one
server hand their KV over that server's NVLink switch, and no byte of it touches a rail
or a spine port (read from every switch egress counter the run sampled)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest

from .runs import run_spec, summary, tables

pytestmark = pytest.mark.root

# Prefill on GPUs 0-1 and decode on GPUs 2-3 of servers 0 and 1, tp 1: each prefill GPU
# has two decode GPUs over NVLink and two across the spine. A budget far above what the
# run can put in flight keeps topology_aware on the NVLink tier for every request.
SPEC = textwrap.dedent(
    """
    name: serving-pools-test
    seed: 5
    duration_s: 8
    scale: {bandwidth: 1.0e-4}
    fabric: {kind: rail_optimized, servers: 2, gpus_per_server: 4, spines: 1,
             rail_gbps: 400, spine_gbps: 200, nvlink_gbps: 900, buffer_pkts: 64}
    controller: {policy: ecmp}
    workloads:
      - kind: serving
        model: llama-3-8b
        gpu: h100
        prefill: {servers: [0, 1], gpus: [0, 1], tp: 1}
        decode: {servers: [0, 1], gpus: [2, 3], tp: 1}
        router: topology_aware
        topology_budget_ms: 100000
        transfer: monolithic
        arrivals:
          synthetic: {n: 16, rate_per_s: 4, input_tokens: 4000, output_tokens: 8}
    """
)
# What a rail or spine egress may carry without any KV on it: nothing is routed there,
# IPv6 is off and ARP is static, so this only absorbs a stray frame or two.
STRAY_BYTES = 3000


def run(tmp_path: Path) -> tuple[pd.DataFrame, ...]:
    run_dir = run_spec(tmp_path, "pools", SPEC)
    done = summary(run_dir)
    assert done["partial"] is False, done.get("error")
    return tables(run_dir, "requests", "flows", "queues")


def server(host: str) -> str:
    return host[: host.index("_")]  # gpu1_2 -> gpu1


def test_nvlink_local_kv_never_touches_a_rail_or_spine_port(tmp_path):
    requests, flows, queues = run(tmp_path)
    assert len(requests) == 16 and requests["served"].all(), requests["error"].dropna().tolist()
    # the router kept every request's decode on its prefill GPU's server
    assert (requests["prefill_host"].map(server) == requests["decode_host"].map(server)).all()
    kv = flows[flows["kind"] == "kv_transfer"]
    assert len(kv) == 16 and kv["ok"].all()
    assert (kv["src"].map(server) == kv["dst"].map(server)).all()

    # bytes each switch egress sent during the run (counters are cumulative)
    sent = queues.groupby(["node", "port"])["sent_bytes"].agg(lambda s: int(s.max() - s.min()))
    network = sent[sent.index.get_level_values("node").str.match(r"(rail|spine)\d")]
    assert len(network) > 0 and (network <= STRAY_BYTES).all(), network[network > STRAY_BYTES]
    # ... while the NVLink switches carried all of the KV (flows' bytes are emulated; the
    # counters add headers and the ACKs coming back)
    nvlink = sent[sent.index.get_level_values("node").str.startswith("nvl")]
    assert nvlink.sum() >= kv["bytes"].sum() > 0, (nvlink.sum(), kv["bytes"].sum())

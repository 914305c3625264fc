"""agent-cost: CPU seconds per emulated GB moved (sender + receiver) by kvfabric's
agents, against iperf3 moving the same bytes over the same link, alternated in
one run on one fabric.

Agents: psutil CPU of both agent processes from "ready" to "all received".
iperf3: the client and the one-shot server each run under ``bash -c '...; times'``,
so their exact rusage (user + system) is read back. Both use cubic over one TCP
connection; kernel work done in softirq context is charged to whichever
process was running, alike for both.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time

import numpy as np

from controller.ofctl import StaticRules
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.scale import Scale
from traffic.agents import AgentFleet
from traffic.workloads.schedule import build_schedule

from .common import process_cpu_s, result, shell_times_s, show

NAME = "agent-cost"
SCALE = Scale(2e-3)  # 100 Gbit/s host links -> 200 Mbit/s
CHUNKS = 10


def agents(net, emulated_bytes: int) -> tuple[float, float]:
    """(cpu seconds, wall seconds) of the agents moving ``emulated_bytes`` h0 -> h1."""
    chunk_real = int(SCALE.real_bytes(emulated_bytes / CHUNKS))
    schedule = build_schedule(
        {
            "kind": ["kv_transfer"] * CHUNKS,
            "tenant": ["bench"] * CHUNKS,
            "src": ["h0"] * CHUNKS,
            "dst": ["h1"] * CHUNKS,
            "bytes": np.full(CHUNKS, chunk_real),
            "t_sched_ns": np.zeros(CHUNKS, dtype=np.int64),
            "chunk": np.arange(CHUNKS),
        }
    )
    with (
        tempfile.TemporaryDirectory(prefix="kvfabric-bench-") as run_dir,
        AgentFleet(net, run_dir, schedule, SCALE) as fleet,
    ):
        pids = [p.pid for p in fleet.procs.values()]
        c0, t0 = process_cpu_s(pids), time.monotonic()
        flows = fleet.run(timeout_s=120)
        c1, t1 = process_cpu_s(pids), time.monotonic()
    if not flows["ok"].all():
        raise RuntimeError(f"agent transfer failed: {flows['error'].dropna().tolist()[:3]}")
    return c1 - c0, t1 - t0


def iperf(net, emulated_bytes: int, port: int = 5299) -> tuple[float, float]:
    """(cpu seconds, wall seconds) of iperf3 client + server moving the same bytes."""
    server = net.mn("h1").popen(
        ["bash", "-c", f"iperf3 -s -1 -p {port} >/dev/null 2>&1; times"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        time.sleep(0.3)
        ip = net.fabric.node("h1").ip
        t0 = time.monotonic()
        client = net.mn("h0").popen(
            [
                "bash",
                "-c",
                f"iperf3 -c {ip} -p {port} -n {emulated_bytes} -C cubic >/dev/null "
                "|| exit 3; times",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = client.communicate(timeout=120)
        wall = time.monotonic() - t0
        if client.returncode != 0:
            raise RuntimeError(f"iperf3 failed: {err[:300]}")
        server_out, _ = server.communicate(timeout=20)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
    return shell_times_s(out) + shell_times_s(server_out), wall


def run(quick: bool = False) -> dict:
    emulated = 25_000_000 if quick else 150_000_000
    repeat = 1 if quick else 3
    fabric = spine_leaf(1, 1, 2, host_gbps=100, uplink_gbps=100)
    runs = []
    with FabricNetwork(fabric, SCALE, rules=StaticRules()) as net:
        for _ in range(repeat):
            a_cpu, a_wall = agents(net, emulated)
            i_cpu, i_wall = iperf(net, emulated)
            gb = emulated / 1e9
            runs.append(
                {
                    "agent_cpu_s_per_gb": a_cpu / gb,
                    "iperf3_cpu_s_per_gb": i_cpu / gb,
                    "agent_wall_s": a_wall,
                    "iperf3_wall_s": i_wall,
                }
            )
    value = statistics.median(r["agent_cpu_s_per_gb"] for r in runs)
    baseline = statistics.median(r["iperf3_cpu_s_per_gb"] for r in runs)
    met = value / baseline <= 1.5
    record = result(
        NAME,
        value=value,
        baseline=baseline,
        unit="CPU s per emulated GB",
        target="ratio <= 1.5",
        target_met=met,
        quick=quick,
        bytes_emulated=emulated,
        link_mbps=SCALE.link_mbps(100),
        repeat=repeat,
        runs=runs,
        limit=""
        if met
        else (
            "the agent is Python: per-send bookkeeping, the epoll loop and records cost more "
            "than iperf3's C loop per byte; kernel TCP work is the same for both"
        ),
    )
    show(
        record,
        ["run", "agent s/GB", "iperf3 s/GB", "agent wall s", "iperf3 wall s"],
        [
            [
                i,
                r["agent_cpu_s_per_gb"],
                r["iperf3_cpu_s_per_gb"],
                r["agent_wall_s"],
                r["iperf3_wall_s"],
            ]
            for i, r in enumerate(runs)
        ],
    )
    return record

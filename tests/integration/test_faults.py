"""The fault kinds beyond a link going down, on real fabrics: a port that trains down to
a lower speed, a controller that crashes and comes back, an agent that dies, and a
failure the controller detects only after a delay."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli.main import main

pytestmark = pytest.mark.root


def _run(tmp_path: Path, text: str) -> tuple[Path, dict, dict]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(text))
    assert main(["run", str(spec), "--out", str(tmp_path), "--quiet"]) in (0, 1)
    (run,) = sorted(p.parent for p in tmp_path.glob("*/*/summary.json"))
    events = json.loads((run / "events.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    return run, events, summary


def _rate_mbps(queues: pd.DataFrame, node: str, port: int, t0: int, a: float, b: float) -> float:
    """What ``node:port`` sent from ``a`` to ``b`` s after t0, Mbit/s (its qdisc counter)."""
    g = queues[(queues["node"] == node) & (queues["port"] == port)].sort_values("t_ns")
    at = (g["t_ns"] - t0) / 1e9
    w = g[(at >= a) & (at <= b)]
    sent = w["sent_bytes"].iloc[-1] - w["sent_bytes"].iloc[0]
    return sent * 8 / ((w["t_ns"].iloc[-1] - w["t_ns"].iloc[0]) / 1e9) / 1e6


DEGRADE = """
    name: faults
    duration_s: 6
    fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2,
             host_gbps: 100, uplink_gbps: 100}
    controller: {policy: shortest_path}
    faults:
      - {at_s: 1.0, link_degrade: {link: [leaf0, spine0], gbps: 50}}
    workloads:
      - {kind: incast, receiver: h2, senders: [h0, h1], sru_bytes: 15000000000, rounds: 1}
    """


def test_a_link_that_trains_down_carries_its_new_rate_and_is_judged_by_it(tmp_path):
    run, events, summary = _run(tmp_path, DEGRADE)
    (row,) = events["faults"]
    assert row["event"] == "link_degrade" and row["ok"] and row["gbps"] == 50, row
    queues = pd.read_parquet(run / "queues.parquet")
    from topologies import spine_leaf

    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2, host_gbps=100, uplink_gbps=100)
    port = fabric.link_between("leaf0", "spine0").port_of("leaf0")
    t0 = events["t0_ns"]
    before = _rate_mbps(queues, "leaf0", port, t0, 0.3, 0.9)
    after = _rate_mbps(queues, "leaf0", port, t0, 1.3, 2.8)
    assert 9.0 <= before <= 10.5, before  # 100 Gbit/s at 1e-4: 10 Mbit/s, two senders
    assert 4.5 <= after <= 5.25, after  # 50 Gbit/s: 5 Mbit/s
    flows = pd.read_parquet(run / "flows.parquet")
    assert flows["ok"].all()
    fct_s = (flows["t_end_ns"].max() - t0) / 1e9
    assert fct_s > 3.3, fct_s  # 3 MB at 10 Mbit/s would end by 2.4 s; the degrade slows it
    check = summary["fidelity"]["checks"]["dequeue_rate"]
    assert check["ok"], check  # each stretch judged by the rate in force then


CONTROL = """
    name: faults
    duration_s: 5
    fabric: {kind: spine_leaf, spines: 2, leaves: 2, hosts_per_leaf: 2}
    controller: {policy: shortest_path}
    faults:
      - {at_s: 0.8, link_down: [leaf1, spine1], detect_ms: 300}
      - {at_s: 1.5, controller_down: true}
      - {at_s: 2.0, link_up: [leaf1, spine1], detect_ms: 300}
      - {at_s: 2.0, link_down: [leaf1, spine0]}
      - {at_s: 2.3, controller_up: true}
      - {at_s: 4.2, agent_kill: h3}
    workloads:
      - {kind: probe, pairs: [[h0, h2], [h1, h3], [h0, h3], [h1, h2]], rate_hz: 50,
         size_bytes: 200}
    """


def test_a_crashed_controller_leaves_the_flows_a_restarted_one_resyncs_and_an_agent_dies(
    tmp_path,
):
    run, events, summary = _run(tmp_path, CONTROL)
    assert all(f["ok"] for f in events["faults"]), events["faults"]
    faults = {f["event"]: f for f in events["faults"] if f["event"] not in ("link_down", "link_up")}
    ctl = events["controller"]
    # detect_ms: the controller heard leaf1-spine1 go down, and acted 300 ms later
    late = [e for e in ctl if e["event"] == "port_down" and "heard_ns" in e]
    assert late and all(295 <= (e["t_ns"] - e["heard_ns"]) / 1e6 <= 400 for e in late), late
    timing = next(t for t in summary["metrics"]["faults"] if t["event"] == "link_down")
    assert 295 <= timing["detected_ms"] <= 450, timing
    # the restarted controller (life 2) learned from the switches that leaf1-spine0 is
    # down (it went down while no controller ran) and installed around it
    second = [e for e in ctl if e.get("life") == 2]
    assert any(e["event"] == "install" for e in second), second
    learned = {e["switch"] for e in second if e["event"] == "port_down"}
    assert {"leaf1", "spine0"} <= learned, second
    up = faults["controller_up"]
    assert up["ready_ns"] is not None
    no_controller_s = (up["ready_ns"] - faults["controller_down"]["t_start_ns"]) / 1e9
    assert 0.8 <= no_controller_s <= 2.5, no_controller_s  # 0.8 s down, then reconnection
    flows = pd.read_parquet(run / "flows.parquet")
    t0 = events["t0_ns"]
    # when each probe left its sender (the network saw it then, not when it was due)
    at = (flows["t_start_ns"].fillna(flows["t_sched_ns"]).astype("int64") - t0) / 1e9
    cross = flows["src"].isin(["h0", "h1"]) != flows["dst"].isin(["h0", "h1"])
    assert flows.loc[at < 0.75, "ok"].all()
    # the first controller moved the probes off leaf1-spine1, and the switches confirmed
    # it (barrier replies), before it was killed
    (moved,) = [e for e in ctl if e["event"] == "reroute" and e.get("life") == 1]
    killed_ns = faults["controller_down"]["t_start_ns"]
    assert moved.get("t_installed_ns", killed_ns) < killed_ns, (moved, killed_ns)
    # without a controller, the switches kept forwarding on the rules they had
    ctl_gone = (at > 1.55) & (at < 1.95)
    lost = flows.loc[ctl_gone & ~flows["ok"]]
    assert ctl_gone.sum() > 50 and lost.empty, (
        lost[["flow_id", "src", "dst", "lateness_ms", "error"]],
        [(e["event"], e.get("life"), (e["t_ns"] - t0) / 1e9) for e in ctl],
    )
    # ... and nobody moved them off leaf1-spine0 when it failed: cross-leaf probes lost
    stranded = cross & (at > 2.05) & (at < 2.25)
    assert not flows.loc[stranded, "ok"].any()
    # once the restarted controller was ready, the fabric was whole again through spine1
    ready_s = (up["ready_ns"] - t0) / 1e9
    back = (at > ready_s + 0.2) & (at < 4.15)
    assert back.sum() > 40 and flows.loc[back, "ok"].all(), flows.loc[back & ~flows["ok"]]
    # the agent on h3 died at 4.2 s: probes to it fail with the reason, the others go on
    dead = (flows["dst"] == "h3") & (at > 4.25)
    assert dead.sum() > 50 and not flows.loc[dead, "ok"].any()
    assert flows.loc[dead, "error"].str.contains("killed").all()
    assert flows.loc[(flows["dst"] == "h2") & (at > 4.25), "ok"].all()
    assert faults["agent_kill"]["node"] == "h3" and faults["agent_kill"]["late_ms"] < 20


KILLED = """
    name: faults
    seed: 3
    duration_s: 14
    fabric: {kind: rail_optimized, servers: 4, gpus_per_server: 2, spines: 1,
             rail_gbps: 400, spine_gbps: 400, nvlink_gbps: 3600, buffer_pkts: 64}
    workloads:
      - kind: serving
        model: llama-3-8b
        gpu: h100
        prefill: {servers: [0, 1], tp: 1}
        decode: {servers: [2, 3], tp: 1}
        router: round_robin
        arrivals:
          synthetic: {duration_s: 13, rate_per_s: 4, input_tokens: 2000, output_tokens: 16}
      - {kind: probe, pairs: [[gpu0_0, gpu2_0]], rate_hz: 50, size_bytes: 200}
    """


def test_a_runner_killed_with_sigkill_keeps_its_tables_up_to_the_last_save(tmp_path):
    import subprocess
    import sys
    import time

    from experiments.output.results import load_run
    from tests.integration.test_chaos import _leftovers

    spec = tmp_path / "killed.yaml"
    spec.write_text(textwrap.dedent(KILLED))
    out = tmp_path / "results"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "experiments.cli.main",
            "run",
            str(spec),
            "--out",
            str(out),
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("faults/*/partial/clock.json")):
            assert time.monotonic() < deadline and proc.poll() is None, "the traffic never started"
            time.sleep(0.2)
        time.sleep(6.0)  # six seconds of traffic: several saves of every table
        killed_ns = time.monotonic_ns()
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run_dir,) = [p for p in out.glob("faults/*") if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["partial"] is True and summary["error"] == "run in progress"
    run = load_run(run_dir)
    assert {"queues", "links", "cpu", "flows", "requests", "tokens"} <= set(run.recovered)
    t0 = json.loads((run_dir / "partial" / "clock.json").read_text())["t0_ns"]
    queues, flows = run.queues, run.flows
    assert (killed_ns - queues["t_ns"].max()) / 1e9 < 2.5  # samplers saved every second
    assert (killed_ns - flows["t_end_ns"].max()) / 1e9 < 3.5  # flows every two seconds
    assert (flows["t_end_ns"].max() - t0) / 1e9 > 3.0
    assert flows["flow_id"].is_unique and flows["fct_ms"].notna().all()
    assert len(run.requests) >= 8  # 4 per second for the seconds before the kill
    clean = subprocess.run(
        [sys.executable, "-m", "experiments.cli.main", "clean"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert clean.returncode == 0, clean.stderr[-2000:]
    report = subprocess.run(
        [sys.executable, "-m", "experiments.cli.main", "report", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    text = (run_dir / "report.md").read_text()
    assert "never finished" in text and "were not computed" in text
    assert "flows: " in text and "s after t0" in text  # what was recovered, up to when
    assert not _leftovers()  # the fabric the killed runner left is gone

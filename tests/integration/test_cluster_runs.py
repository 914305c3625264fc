"""``kvfabric run --cluster`` on a 2-server local cluster: a serving run whose KV
transfers cross the servers, with a cut link failing and rerouted; a 3-to-1 incast
across the cut whose queue stays within its buffer; and a server that dies mid-run,
which leaves a partial result naming it and nothing on the server that lived."""

from __future__ import annotations

import contextlib
import json
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli.main import main
from experiments.orchestration.cluster import run_cluster
from experiments.spec.load import expand, load_spec
from tests.integration.conftest import left_on
from topologies.cleanup import STATE_DIR, clean
from topologies.cluster.local import down, power_off
from topologies.cluster.ssh import Server

pytestmark = pytest.mark.root

SERVING = """
    name: cluster-serving
    seed: 1
    duration_s: 10
    fabric: {kind: rail_optimized, servers: 4, gpus_per_server: 2, spines: 2,
             rail_gbps: 400, spine_gbps: 400, nvlink_gbps: 900, buffer_pkts: 64}
    controller: {policy: ecmp}
    workloads:
      - kind: serving
        model: llama-3-8b
        gpu: h100
        prefill: {servers: [0, 1], tp: 2}
        decode: {servers: [2, 3], tp: 2}
        router: round_robin
        transfer: layer_pipelined
        arrivals:
          synthetic: {duration_s: 8, rate_per_s: 2, input_tokens: 2000, output_tokens: 16}
    """

INCAST = """
    name: cluster-incast
    duration_s: 6
    fabric: {kind: spine_leaf, spines: 2, leaves: 2, hosts_per_leaf: 4,
             host_gbps: 100, uplink_gbps: 400, buffer_pkts: 16}
    controller: {policy: ecmp}
    cluster:
      placement:
        SERVER_A: [leaf0, spine0, h0, h1, h2, h3]
        SERVER_B: [leaf1, spine1, h4, h5, h6, h7]
    workloads:
      - {kind: incast, receiver: h0, senders: [h4, h5, h6], sru_bytes: 4.0e+9, rounds: 3}
    """


def _write(tmp: Path, text: str) -> Path:
    spec = tmp / "spec.yaml"
    spec.write_text(textwrap.dedent(text))
    return spec


def _run(tmp: Path, spec: Path, cluster: str) -> tuple[Path, dict, dict]:
    out = tmp / "results"
    assert main(["run", str(spec), "--cluster", cluster, "--out", str(out), "--quiet"]) in (0, 1)
    (run,) = sorted(p.parent for p in out.glob("*/*/summary.json"))
    events = json.loads((run / "events.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    return run, events, summary


def test_a_serving_run_crosses_the_servers_and_a_failed_cut_link_is_rerouted(
    local_cluster, tmp_path
):
    arg = local_cluster.plan().cluster_arg()
    spec = _write(tmp_path, SERVING)
    (planned,) = expand(load_spec(spec, [f"cluster.servers={json.dumps(arg.split(','))}"]))
    cluster = run_cluster(planned.config, planned.fabric())
    spine_cut = next(lk for lk in cluster.placement.cut if "spine" in lk.a + lk.b)
    faults = (
        f"    faults:\n      - {{at_s: 3.0, link_down: [{spine_cut.a}, {spine_cut.b}]}}\n"
        f"      - {{at_s: 6.0, link_up: [{spine_cut.a}, {spine_cut.b}]}}\n"
    )
    spec.write_text(textwrap.dedent(SERVING) + textwrap.dedent(faults))
    run, events, summary = _run(tmp_path, spec, arg)
    assert not summary.get("partial") and not summary.get("error"), summary.get("error")
    env = json.loads((run / "env.json").read_text())
    machine_of = env["cluster"]["machine_of"]
    assert sorted(set(machine_of.values())) == sorted(arg.split(","))
    for when in ("start", "end"):  # each server's clock against this machine's (one kernel)
        for server, clocks in env["cluster"]["clock"][when].items():
            mono = clocks["monotonic"]
            assert abs(mono["offset_ms"]) <= mono["uncertainty_ms"] + 1.0, (when, server, mono)
    flows = pd.read_parquet(run / "flows.parquet")
    kv = flows[flows["kind"].str.startswith("kv")]
    crossing = [machine_of[a] != machine_of[b] for a, b in zip(kv["src"], kv["dst"], strict=True)]
    assert kv["ok"].all() and any(crossing), kv.loc[~kv["ok"], "error"].head()
    requests = pd.read_parquet(run / "requests.parquet")
    tokens = pd.read_parquet(run / "tokens.parquet")
    assert len(requests) >= 10 and requests["ttft_ms"].notna().all()
    assert tokens.groupby("request_id").size().min() == 16  # every token of every request
    # the cut link failed and came back; the controller heard it and rerouted
    assert [f["event"] for f in events["faults"]] == ["link_down", "link_up"]
    assert all(f["ok"] for f in events["faults"]), events["faults"]
    ctl = events["controller"]
    assert any(e["event"] == "port_down" for e in ctl), ctl[-5:]
    timing = next(t for t in summary["metrics"]["faults"] if t["event"] == "link_down")
    assert timing["links_heard"] == 1 and timing["installed_ms"] is not None, timing
    # the switches on both servers acknowledged the reroute while the link was still down
    # (it came back 3 s later); how fast is a benchmark's question, not this test's: on this
    # shared VM it took 440-670 ms with every agent on its server
    assert timing["installed_ms"] < 3000, timing
    # judged per server: each one's CPU and samplers
    assert "worst server" in summary["fidelity"]["checks"]["cpu"]["detail"]
    assert {f"queues@{s}" for s in arg.split(",")} <= set(summary["samplers"])


def test_an_incast_across_the_cut_builds_a_queue_bounded_by_its_buffer(local_cluster, tmp_path):
    plan = local_cluster.plan()
    a, b = (s.address for s in plan.servers)
    spec = _write(tmp_path, INCAST.replace("SERVER_A", a).replace("SERVER_B", b))
    run, events, summary = _run(tmp_path, spec, plan.cluster_arg())
    assert not summary.get("error"), summary.get("error")
    queues = pd.read_parquet(run / "queues.parquet")
    fabric = expand(load_spec(spec, [f"cluster.servers={json.dumps([a, b])}"]))[0].fabric()
    port = fabric.port("leaf0", "h0")
    q = queues[(queues["node"] == "leaf0") & (queues["port"] == port)]
    assert set(q["server"]) == {f"root@{a}"}  # sampled where the switch runs
    assert 8 <= q["backlog_pkts"].max() <= 16, q["backlog_pkts"].max()
    flows = pd.read_parquet(run / "flows.parquet")
    assert flows["ok"].all() and set(flows["src"]) == {"h4", "h5", "h6"}


def _some_flow_saved_ok(results: Path) -> bool:
    """A chunk of the run's settled flows (``partial/flows``) holds an ok flow."""
    for chunk in results.glob("*/*/partial/flows/*.parquet"):
        with contextlib.suppress(OSError, ValueError):
            if pd.read_parquet(chunk)["ok"].any():
                return True
    return False


def test_a_server_dying_mid_run_leaves_a_partial_result_naming_it_and_nothing_behind(
    local_cluster, tmp_path
):
    rec = local_cluster  # its second server dies here; the next test gets a new cluster
    try:
        plan = rec.plan()
        spec = _write(tmp_path, SERVING.replace("duration_s: 10", "duration_s: 12"))
        results = tmp_path / "results"

        def kill_when_running() -> None:  # once some flow has settled ok and been saved
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not _some_flow_saved_ok(results):
                time.sleep(0.2)
            power_off(rec, 2)

        killer = threading.Thread(target=kill_when_running, daemon=True)
        killer.start()
        started = time.monotonic()
        run, _events, summary = _run(tmp_path, spec, plan.cluster_arg())
        took = time.monotonic() - started
        killer.join(timeout=5)
        dead = f"root@{plan.servers[1].address}"
        assert summary["partial"] is True
        assert summary["error"].startswith(f"server {dead} failed mid-run"), summary["error"]
        assert "tables hold what was recorded" in summary["error"]
        assert pd.read_parquet(run / "flows.parquet")["ok"].any()  # what ran before it
        assert left_on(Server(plan.servers[0].address), summary["run_prefix"]) == []  # the survivor
        assert took < 120, took  # nothing waited on the dead server
    finally:
        down(rec)  # the rest of it
    # the run's record stayed for the dead server; with the cluster gone, clean forgets it
    # (forced: the run's owner is this test process, still alive)
    assert (STATE_DIR / f"{summary['run_prefix']}.json").exists()
    clean(force=True)
    assert not (STATE_DIR / f"{summary['run_prefix']}.json").exists()


def test_a_coordinator_killed_with_sigkill_keeps_every_servers_sampled_rows(
    local_cluster, tmp_path
):
    import subprocess
    import sys

    from experiments.output.results import load_run

    plan = local_cluster.plan()
    spec = _write(tmp_path, SERVING.replace("duration_s: 10", "duration_s: 14"))
    out = tmp_path / "results"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "experiments.cli.main",
            "run",
            str(spec),
            "--cluster",
            plan.cluster_arg(),
            "--out",
            str(out),
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("*/*/partial/queues/*-s*.parquet"))) < 4:  # both servers'
            assert time.monotonic() < deadline and proc.poll() is None, "no server's chunks"
            time.sleep(0.2)
        time.sleep(3.0)
        killed_ns = time.monotonic_ns()
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run_dir,) = [p for p in out.glob("*/*") if p.is_dir()]
    run = load_run(run_dir)
    assert "queues" in run.recovered
    queues = run.queues
    servers = {f"root@{s.address}" for s in plan.servers}
    assert set(queues["server"].dropna()) == servers  # each server's rows, labelled
    for server in servers:
        last = queues.loc[queues["server"] == server, "t_ns"].max()
        assert (killed_ns - last) / 1e9 < 4.0, server  # pulled every flush_s until the kill
    prefix = json.loads((run_dir / "summary.json").read_text()).get("run_prefix")
    clean = subprocess.run(
        [sys.executable, "-m", "experiments.cli.main", "clean"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert clean.returncode == 0, clean.stderr[-2000:]
    if prefix:
        assert all(left_on(Server(s.address), prefix) == [] for s in plan.servers)

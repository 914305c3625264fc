"""``kvfabric run`` on real fabrics: the results contract, incast goodput per sender
count, SIGINT → partial results and nothing left behind, a second run refused, and
a link failure seen by the controller and by the flows."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from experiments.cli.main import main
from experiments.spec.load import find_bundled, load_spec
from topologies.cleanup import bridges, interfaces

pytestmark = pytest.mark.root

CONTRACT = ["spec.yaml", "env.json", "flows.parquet", "queues.parquet", "summary.json", "report.md"]
CHECKS = {"cpu", "dequeue_rate", "lateness", "sampler_rate", "offered_load", "unmodelled_loss"}


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/*/summary.json"))


def test_the_incast_spec_writes_the_results_contract_and_goodput_per_sender_count(tmp_path):
    args = [
        "run",
        str(find_bundled("incast-basic")),
        "--out",
        str(tmp_path),
        "--quiet",
        "--set",
        "duration_s=8",
        "--set",
        "workloads.0.rounds=2",
        "--set",
        "sweep.workloads.0.senders=[1, 3]",
    ]
    assert main(args) == 0
    runs = run_dirs(tmp_path)
    assert len(runs) == 2
    for run in runs:
        for name in CONTRACT:
            assert (run / name).stat().st_size > 0, f"{run.name} lacks {name}"
        assert list((run / "plots").glob("*.png"))
        summary = json.loads((run / "summary.json").read_text())
        assert summary["partial"] is False and summary["error"] is None
        assert set(summary["fidelity"]["checks"]) == CHECKS
        assert isinstance(summary["fidelity"]["ok"], bool)
        # spec.yaml is the resolved spec: loading it gives the same run back
        again = load_spec(run / "spec.yaml")
        assert again.resolved["workloads"][0]["rounds"] == 2
        flows = pd.read_parquet(run / "flows.parquet")
        assert flows["ok"].all()
        queues = pd.read_parquet(run / "queues.parquet")
        assert {"t_ns", "node", "port", "backlog_pkts", "drops", "sent_bytes"} <= set(queues)
    goodput = {}
    for run in runs:
        incast = json.loads((run / "summary.json").read_text())["metrics"]["incast"]
        for senders, stats in incast["by_senders"].items():
            goodput[int(senders)] = stats["goodput_mbps"]["mean"]
    # one 10 Mbit/s receiver link: a single sender and three senders both fill it
    assert set(goodput) == {1, 3}
    assert all(7.0 < g <= 10.0 for g in goodput.values()), goodput
    compare = list(tmp_path.glob("incast-basic/compare-*/report.md"))
    assert compare and "senders=3" in compare[0].read_text()


LONG = textwrap.dedent(
    """
    name: long-probe
    duration_s: 60
    fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2}
    workloads:
      - {kind: probe, pairs: [[h0, h2]], rate_hz: 50, size_bytes: 200}
      - {kind: background, load: 0.3}
    """
)


def _kvfabric(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_sigint_leaves_partial_results_nothing_behind_and_a_second_run_is_refused(tmp_path):
    spec = tmp_path / "long.yaml"
    spec.write_text(LONG)
    out = tmp_path / "results"
    first = _kvfabric("run", str(spec), "--out", str(out), "--quiet")
    try:
        _wait_for(lambda: list(out.glob("long-probe/*/env.json")), 90, "the fabric to be up")
        time.sleep(2.0)  # traffic is flowing
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "experiments.cli.main",
                "run",
                str(spec),
                "--out",
                str(tmp_path / "second"),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1, second.stderr
        assert "another kvfabric run is in progress" in second.stderr.replace("\n", " ")
        assert not list((tmp_path / "second").glob("*/*"))  # it started nothing
        children = psutil.Process(first.pid).children(recursive=True)
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 1, err
    (run,) = run_dirs(out)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["partial"] is True and "interrupted" in summary["error"]
    assert summary["interrupted"] is True  # what bmwg and the references stop on
    flows = pd.read_parquet(run / "flows.parquet")
    assert flows["ok"].sum() > 50  # what was recorded before the signal is kept
    assert not flows["ok"].all()  # and the rest is marked, not dropped
    prefix = summary["run_prefix"]
    assert prefix and not [n for n in bridges() + interfaces() if n.startswith(prefix)]
    alive = [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [p.cmdline() for p in alive]


FAULT = textwrap.dedent(
    """
    name: link-fault
    duration_s: 4
    fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2}
    controller: {policy: shortest_path}
    faults:
      - {at_s: 1.0, link_down: [leaf0, spine0]}
      - {at_s: 2.0, link_up: [leaf0, spine0]}
    workloads:
      - {kind: probe, pairs: [[h0, h2], [h0, h1]], rate_hz: 50, size_bytes: 200}
    """
)


def test_a_link_down_fault_shows_in_the_controller_log_and_in_the_flows(tmp_path):
    spec = tmp_path / "fault.yaml"
    spec.write_text(FAULT)
    assert main(["run", str(spec), "--out", str(tmp_path), "--quiet"]) in (0, 1)
    (run,) = run_dirs(tmp_path)
    events = json.loads((run / "events.json").read_text())
    applied = [(f["event"], f["ok"]) for f in events["faults"]]
    assert applied == [("link_down", True), ("link_up", True)]
    seen = [e for e in events["controller"] if e["event"] in ("port_down", "port_up")]
    assert {e["event"] for e in seen} == {"port_down", "port_up"}
    assert any(e["event"] == "reroute" for e in events["controller"])
    flows = pd.read_parquet(run / "flows.parquet")
    t0 = events["t0_ns"]
    at = (flows["t_sched_ns"] - t0) / 1e9
    across = flows["dst"] == "h2"  # h0 -> h2 crosses leaf0-spine0; h0 -> h1 does not
    during = (at > 1.1) & (at < 1.9)
    assert not flows.loc[across & during, "ok"].any()  # lost while the only spine link was down
    assert flows.loc[across & (at < 0.9), "ok"].all()
    assert flows.loc[across & (at > 2.5), "ok"].all()  # and back after link_up
    assert flows.loc[~across, "ok"].all()  # the same-leaf pair never noticed


def test_kvfabric_cli_brings_the_fabric_up_for_mininets_cli_and_removes_it(tmp_path):
    spec = tmp_path / "fault.yaml"
    spec.write_text(FAULT)
    out = subprocess.run(
        [sys.executable, "-m", "experiments.cli.main", "cli", str(spec)],
        input="pingall\nexit\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    assert "policy shortest_path" in text
    assert "Results: 0% dropped" in text  # every host reaches every other


SWITCH_AND_FLAP = textwrap.dedent(
    """
    name: switch-fault
    duration_s: 5
    fabric: {kind: spine_leaf, spines: 2, leaves: 2, hosts_per_leaf: 2}
    controller: {policy: shortest_path}
    faults:
      - {at_s: 1.0, switch_down: spine0}
      - {at_s: 2.0, switch_up: spine0}
      - {at_s: 3.0, link_flap: {link: [leaf0, spine0], period_ms: 400, count: 2}}
    workloads:
      - {kind: probe, pairs: [[h0, h2]], rate_hz: 50, size_bytes: 200}
    """
)


def test_a_switch_power_loss_and_a_flap_reach_the_controller_and_traffic_comes_back(tmp_path):
    spec = tmp_path / "switch.yaml"
    spec.write_text(SWITCH_AND_FLAP)
    assert main(["run", str(spec), "--out", str(tmp_path), "--quiet"]) in (0, 1)
    (run,) = run_dirs(tmp_path)
    events = json.loads((run / "events.json").read_text())
    ops = [(f["fault"], f["event"], frozenset(f["link"])) for f in events["faults"]]
    assert all(f["ok"] for f in events["faults"]), events["faults"]
    spine0 = {frozenset(("spine0", "leaf0")), frozenset(("spine0", "leaf1"))}
    assert {link for fault, ev, link in ops if fault == "switch_down"} == spine0
    assert [ev for fault, ev, _ in ops if fault == "link_flap"] == ["link_down", "link_up"] * 2
    down = {(e["switch"], e["port"]) for e in events["controller"] if e["event"] == "port_down"}
    assert {sw for sw, _ in down} >= {"leaf0", "leaf1"}  # both leaves saw spine0 go dark
    timings = json.loads((run / "summary.json").read_text())["metrics"]["faults"]
    grouped = [t for t in timings if t["fault"] in ("switch_down", "link_flap")]
    assert [t["fault"] for t in grouped] == ["switch_down", "link_flap"]  # one row each
    lost = [t for t in grouped if t["links_heard"] != len(t["links"])]
    assert not lost, lost  # every link taken down was heard of by the controller
    flows = pd.read_parquet(run / "flows.parquet")
    at = (flows["t_sched_ns"] - events["t0_ns"]) / 1e9
    assert flows.loc[at < 0.9, "ok"].all()
    assert flows.loc[at > 4.3, "ok"].all()  # after the last flap the path is back

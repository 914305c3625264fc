"""``kvfabric run``/``list`` input checks and the runner's pure parts (no root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from experiments.cli.main import main
from experiments.cli.run import purpose
from experiments.orchestration.plan import controller_params, network_schedule
from experiments.orchestration.runtime import RunBusy, RunLock, StopFlag
from experiments.spec.load import expand, find_bundled, load_spec
from experiments.spec.workloads import workload_seed

SPEC = textwrap.dedent(
    """
    name: tiny
    duration_s: 5
    fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2}
    workloads:
      - {kind: incast, senders: 2, sru_bytes: 1.0e+9, rounds: 2}
      - {kind: probe, pairs: [[h0, h2]], rate_hz: 10, size_bytes: 200}
    """
)


def test_list_names_every_bundled_spec(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "incast-basic" in out and "serving-basic" in out


def test_list_topic_is_the_comment_up_to_its_first_colon(tmp_path):
    spec = tmp_path / "x.yaml"
    spec.write_text("# ECMP hash collisions: four transfers. More.\n# Next line.\nname: x\n")
    assert purpose(spec) == "ECMP hash collisions"
    spec.write_text("# Where does it knee? Sweeps.\nname: x\n")
    assert purpose(spec) == "Where does it knee?"


def test_dry_run_lists_every_sweep_point_without_building(capsys):
    assert main(["run", "incast-basic", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "senders=1,seed=7: 5 scheduled" in out and "senders=7,seed=7: 35 scheduled" in out


def test_dry_run_names_what_of_tcp_does_not_dilate(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC)
    assert main(["run", str(path), "--dry-run"]) == 0
    assert "transport" not in capsys.readouterr().out  # d = 1: every timer is real
    assert main(["run", str(path), "--dry-run", "--set", "scale.time_dilation=4"]) == 0
    out = capsys.readouterr().out
    assert "seed=1: transport: congestion control cubic at time dilation 4" in out
    assert "200 ms minimum RTO is wall time: 50 ms real-equivalent" in out
    assert "10–50 ms real-equivalent" in out
    assert "tail-loss probe's timer has wall-time floors" in out
    faithful = (
        "transport={congestion: reno, rto_min_ms: 200, delayed_ack: false, tail_loss_probe: false}"
    )
    args = ["run", str(path), "--dry-run", "--set", "scale.time_dilation=4", "--set", faithful]
    assert main(args) == 0
    assert "transport" not in capsys.readouterr().out  # reno and stretched timers dilate


@pytest.mark.parametrize(
    "args, says",
    [
        (["run", "no-such-experiment"], "no such spec"),
        (["run", "incast-basic", "--set", "workloads.0.kind=teleport"], "workloads.0.kind"),
        (
            ["run", "incast-basic", "--set", "faults=[{at_s: 1, link_down: [h0, spine0]}]"],
            "not linked",
        ),
        (
            [
                "run",
                "incast-basic",
                "--set",
                "controller.policy=shortest_path",
                "--set",
                "controller.tenants={a: [h0]}",
                "--set",
                "controller.spines={b: [spine0]}",
            ],
            "spines",
        ),
        (["run", "incast-basic", "--out", "/proc/kvfabric-results"], "cannot"),
    ],
)
def test_bad_input_is_a_usage_error_before_anything_is_built(args, says, capsys, tmp_path):
    if "--out" not in args:
        args = [*args, "--out", str(tmp_path)]
    assert main(args) == 2
    assert says in capsys.readouterr().err.replace("\n", " ")
    assert not list(tmp_path.iterdir())  # no results directory was started


def test_the_schedule_of_a_spec_is_its_workloads_in_order_with_fresh_ids(tmp_path):
    spec = load_spec(SPEC)
    (run,) = expand(spec)
    sched = network_schedule(run.config, run.fabric())
    assert list(sched["kind"].unique()) == ["incast", "probe"]
    assert (sched["kind"] == "incast").sum() == 4  # 2 senders × 2 rounds
    assert (sched["kind"] == "probe").sum() == 50  # 10 Hz × 5 s
    assert sched["flow_id"].is_unique
    again = network_schedule(run.config, run.fabric())
    assert sched.equals(again)  # same seed, same schedule
    assert workload_seed(1, 0) != workload_seed(1, 1) != workload_seed(2, 1)


def test_controller_params_pass_only_what_the_spec_gives():
    (run,) = expand(load_spec(find_bundled("incast-basic"), ["sweep={}"]))
    assert controller_params(run.config.controller) == {}
    # the run's seed goes along: the policy breaks its ties from it
    assert controller_params(run.config.controller, run.seed) == {"seed": run.seed}


def test_a_second_run_lock_is_refused_and_names_the_holder(tmp_path):
    path = tmp_path / "run.lock"
    with RunLock("first", path):
        code = (
            "import sys\nfrom pathlib import Path\n"
            "from experiments.orchestration.runtime import RunLock, RunBusy\n"
            f"try:\n    RunLock('second', Path({str(path)!r})).__enter__()\n"
            "except RunBusy as e:\n    print(e); sys.exit(3)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 3, out.stderr
        assert "another kvfabric run is in progress" in out.stdout
        assert f"pid {os.getpid()}, experiment first" in out.stdout
    with RunLock("third", path):  # released on exit
        pass
    with pytest.raises(RunBusy), RunLock("a", path), RunLock("b", path):
        pass


def test_the_first_signal_sets_the_stop_flag_and_a_second_ctrl_c_aborts():
    heard = []
    before = signal.getsignal(signal.SIGTERM)
    with StopFlag(heard.append) as stop:
        assert not stop
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop and heard == ["SIGTERM"]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


def _unwinds_in_a_fork(handler: object, sig: int) -> tuple[int, bytes]:
    """Fork as a library's helper does (pyroute2 runs netns work in a fork of this
    process), signal the copy, and report its exit status and whether it ran the
    clean-up of the stack it copied."""
    read, write = os.pipe()
    old = signal.signal(sig, handler)
    try:
        pid = os.fork()
        if pid == 0:  # the copy
            os.close(read)
            try:
                os.kill(os.getpid(), sig)
                time.sleep(1)
            except BaseException:
                os.write(write, b"clean-up ran in the copy")
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read, "rb") as f:
            return os.waitstatus_to_exitcode(status), f.read()
    finally:
        signal.signal(sig, old)


def test_a_forked_copy_that_is_signalled_ends_without_running_our_clean_up():
    from experiments.cli.main import _sigterm_as_interrupt

    # the copy of `kvfabric cluster local up` once removed the cluster under the real one
    assert _unwinds_in_a_fork(_sigterm_as_interrupt(os.getpid()), signal.SIGTERM) == (143, b"")
    with StopFlag() as stop:
        assert _unwinds_in_a_fork(stop._handle, signal.SIGINT) == (130, b"")
        assert not stop  # the copy's signal is not this process's


def test_spines_reach_the_controller_only_under_tenant_paths():
    sets = ["sweep={}", "controller.tenants={a: [h0, h1]}", "controller.spines={a: [spine0]}"]
    for policy, has_spines in (("ecmp", False), ("tenant_paths", True)):
        spec = load_spec(find_bundled("incast-basic"), [*sets, f"controller.policy={policy}"])
        (run,) = expand(spec)
        assert ("spines" in controller_params(run.config.controller)) is has_spines

"""The command line without root: topo, calc, usage errors and exit codes."""

import json

import pytest

import experiments.cli.calc
from experiments.cli.main import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from experiments.orchestration import envelope
from topologies import GENERATORS, FabricError, defaults


def test_topo_show_json_has_the_contract_keys(capsys):
    assert main(["topo", "show", "fat_tree", "k=4", "--json"]) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert {"hosts", "switches", "links", "oversubscription", "bisection_gbps"} <= set(info)
    assert (info["hosts"], info["switches"], info["links"]) == (16, 20, 48)
    assert info["bisection_gbps"] == 800.0
    assert info["emulated_mbps_by_real_gbps"] == {"100": 10.0}


def test_topo_show_states_the_grain_of_each_queue_class(capsys):
    # incast-collapse: 100 Gbit/s host ports and 400 Gbit/s uplinks, 16-packet buffers
    assert main(["topo", "show", "incast-collapse", "--json"]) == EXIT_OK
    grain = json.loads(capsys.readouterr().out)["grain"]
    assert grain["base_rtt_path"] == ["h0", "leaf0", "spine0", "leaf1", "h8"]
    host, uplink = grain["queues"]
    assert (host["real_gbps"], host["ports"], host["buffer_pkts"]) == (100, 32, 16)
    assert host["real_bytes_per_packet"] == pytest.approx(15.14e6)
    assert host["buffer_real_us"] == pytest.approx(19_379.2)  # 16 × 15.14 MB at 100 Gbit/s
    assert (host["bdp_pkts"], uplink["bdp_pkts"]) == (pytest.approx(5), pytest.approx(20))
    assert main(["topo", "show", "incast-collapse"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "a packet is 15,140,000 real bytes" in out and "19,379" in out
    assert "not RDMA over lossless Ethernet" in out


def test_topo_show_says_whether_the_fabric_fits(capsys):
    main(["topo", "show", "spine_leaf", "--json"])
    small = json.loads(capsys.readouterr().out)
    main(["topo", "show", "rail_optimized", "servers=32", "gpus_per_server=8", "--json"])
    big = json.loads(capsys.readouterr().out)
    assert small["fits"] is True and big["fits"] is False
    assert big["switching_demand_mbps"] > big["switch_capacity_mbps"]


@pytest.mark.parametrize(
    "params, says",
    [
        (["fat_tree", "k=3"], "k=3"),
        (["spine_leaf", "spines=0"], "spines=0"),
        (["spine_leaf", "foo=1"], "unknown parameter 'foo'"),
        (["spine_leaf", "spines=abc"], "spines='abc'"),
        (["spine_leaf", "spines"], "'spines' must look like name=value"),
        (["nosuch"], "allowed spine_leaf, fat_tree, rail_optimized"),
    ],
)
def test_bad_fabric_parameter_is_one_line_with_the_fix_and_exit_2(capsys, params, says):
    assert main(["topo", "show", *params]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) > 80, err  # one line, not wrapped at 80
    assert err.startswith("error: ") and says in err
    assert "see 'kvfabric topo list'" in err


@pytest.mark.parametrize("scale", ["-1", "0", "2", "abc", "nan"])
def test_scale_out_of_range_is_one_line_and_exit_2(capsys, scale):
    assert main(["topo", "show", "spine_leaf", "--scale", scale]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--scale {scale} is not allowed" in err and "(0, 1]" in err


def test_run_and_report_input_errors_stay_exit_2(monkeypatch, capsys):
    import experiments.cli.run

    def bad_fabric(args):
        raise FabricError("spine_leaf: spines=0 is not allowed")

    monkeypatch.setattr(experiments.cli.run, "cmd_run", bad_fabric)
    assert main(["run", "whatever"]) == EXIT_USAGE
    assert main(["report", "/nonexistent/run"]) == EXIT_USAGE


def test_topo_list_shows_every_parameter_and_default(capsys):
    assert main(["topo", "list"]) == EXIT_OK
    out = capsys.readouterr().out
    for kind in GENERATORS:
        for name, value in defaults(kind).items():
            shown = value if isinstance(value, str | tuple) else f"{value:g}"
            if isinstance(value, tuple):  # sizes, as topo show takes them: shape=4,4
                shown = ",".join(map(str, value))
            assert f"{name}={shown}" in out, (kind, name)


def test_topo_show_names_the_first_link_the_builder_would_refuse(capsys, monkeypatch, tmp_path):
    argv = ["topo", "show", "spine_leaf", "host_gbps=0.5", "--scale", "1e-5", "--json"]
    assert main(argv) == EXIT_OK
    slow = json.loads(capsys.readouterr().out)
    assert slow["fits"] is False and slow["switching_demand_mbps"] < slow["switch_capacity_mbps"]
    assert "h0-leaf0" in slow["problem"] and "below the 0.1 Mbit/s" in slow["problem"]
    main(["topo", "show", "rail_optimized", "--scale", "1e-3", "--json"])
    fast = json.loads(capsys.readouterr().out)
    assert fast["fits"] is False and "nvl0" in fast["problem"] and "above" in fast["problem"]
    main(["topo", "show", "spine_leaf", "--json"])
    assert json.loads(capsys.readouterr().out)["problem"] is None
    # a faster machine: the per-link ceiling is the environment's
    monkeypatch.setenv("KVFABRIC_MAX_RATE_MBPS", "4000")
    fast_machine = envelope.Envelope(
        {1: 1e9, 3: 1e9, 5: 1e9},
        {"small": 1e9, "bulk": 1e9},
        10**6,
        "a fast machine's calibration",
        True,
        envelope.machine_identity(),
    )
    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(envelope.save(fast_machine, tmp_path / "e.json")))
    main(["topo", "show", "rail_optimized", "--scale", "1e-3", "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert shown["fits"] is True and shown["envelope"] == "a fast machine's calibration"


def test_topo_show_text_says_why_it_does_not_fit(capsys):
    assert main(["topo", "show", "spine_leaf", "host_gbps=0.5", "--scale", "1e-5"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "0.0025:1" in out  # oversubscription 2 Gbit/s down over 800 up
    line = next(ln for ln in out.splitlines() if ln.startswith("does not fit"))
    assert "h0-leaf0" in line and "raise --scale" in line  # one line, the CLI's words


def test_error_text_with_brackets_is_printed_as_is(monkeypatch, capsys):
    def bad(args):
        raise ValueError("faults.0.link_down: [h0, spine0] are not linked")

    monkeypatch.setattr(experiments.cli.calc, "cmd_calc", bad)
    assert main(["calc", "kv", "--model", "x", "--tokens", "1"]) == EXIT_USAGE
    assert "[h0, spine0] are not linked" in capsys.readouterr().err


def test_calc_kv_prints_the_llama_70b_numbers(capsys):
    assert main(["calc", "kv", "--model", "llama-3-70b", "--tokens", "8000"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "327,680" in out and "2,621,440,000" in out
    assert (
        main(["calc", "kv", "--model", "llama-3-70b", "--tokens", "8000", "--dtype", "int8"]) == 0
    )
    assert "1,310,720,000" in capsys.readouterr().out


def test_unknown_model_lists_presets(capsys):
    assert main(["calc", "kv", "--model", "gpt-9", "--tokens", "1"]) == EXIT_USAGE
    assert "llama-3-70b" in capsys.readouterr().err


# ----- doctor, clean, preflight: every probe of topologies.machine replaced ------
ALL_TOOLS = {
    "ethtool": True,
    "tc": True,
    "ip": True,
    "iperf3": True,
    "tcpdump": True,
    "cyclictest": True,
}


@pytest.fixture
def machine(monkeypatch):
    """A machine described by the test; nothing is probed, nothing is created."""
    import topologies.machine as probes

    state = {"root": True, "qdiscs": dict.fromkeys(probes.QDISC_PROBES, True)}
    monkeypatch.setattr(probes, "is_root", lambda: state["root"])
    monkeypatch.setattr(probes, "mininet_importable", lambda: True)
    monkeypatch.setattr(probes, "ovs_version", lambda: "3.1.0")
    monkeypatch.setattr(probes, "ovs_kernel_datapath", lambda: False)
    monkeypatch.setattr(probes, "tcp_congestion_controls", lambda: ["reno", "cubic"])
    monkeypatch.setattr(probes, "tools", lambda: dict(ALL_TOOLS))
    monkeypatch.setattr(probes, "_SHAPING_PROBED", {})

    def probe(names=tuple(probes.QDISC_PROBES)):
        state["probes"] = state.get("probes", 0) + 1
        if not state["root"]:
            return dict.fromkeys(names)
        return {n: state["qdiscs"][n] for n in names}

    monkeypatch.setattr(probes, "probe_qdiscs", probe)
    return state


def doctor_json(capsys) -> tuple[int, dict]:
    code = main(["doctor", "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_doctor_json_has_the_contract_keys(machine, capsys):
    code, report = doctor_json(capsys)
    assert code == EXIT_OK and report["ok"] is True and report["fixes"] == []
    caps = report["capabilities"]
    contract = {"root", "mininet", "ovs", "ovs_kernel_datapath", "htb", "tbf", "netem", "red"}
    assert contract | {"fq_codel", "prio", "tcp_cc", "iperf3", "ethtool"} <= set(caps)
    assert caps["tcp_cc"] == ["reno", "cubic"] and caps["ovs_version"] == "3.1.0"


def test_doctor_without_root_reports_qdiscs_as_not_probed(machine, monkeypatch, capsys):
    import topologies.machine as probes

    machine["root"] = False
    monkeypatch.setattr(probes, "ovs_version", lambda: None)  # ovsdb refuses non-root
    code, report = doctor_json(capsys)
    assert code == EXIT_FAILED and report["ok"] is False
    assert all(report["capabilities"][q] is None for q in ("htb", "pfifo", "netem", "ovs"))
    assert report["fixes"] == ["not root: run kvfabric with sudo (Mininet needs root)"]
    assert main(["doctor"]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "not probed" in out and "qdiscs and Open vSwitch were not probed" in out


def test_doctor_names_the_fix_for_each_missing_piece(machine, monkeypatch, capsys):
    import topologies.machine as probes

    monkeypatch.setattr(probes, "tools", lambda: {**ALL_TOOLS, "iperf3": False})
    code, report = doctor_json(capsys)
    assert code == EXIT_OK  # iperf3 is not needed to emulate a fabric
    assert report["optional_fixes"] == [
        "iperf3 is missing (the root tests and benchmarks measure with it): sudo make setup"
    ]
    monkeypatch.setattr(probes, "ovs_version", lambda: None)
    code, report = doctor_json(capsys)
    assert code == EXIT_FAILED and report["capabilities"]["ovs"] is False
    assert report["fixes"] == [
        "Open vSwitch is not running: sudo /usr/share/openvswitch/scripts/ovs-ctl start"
    ]
    monkeypatch.setattr(probes, "ovs_version", lambda: "3.1.0")
    machine["qdiscs"]["htb"] = False
    code, report = doctor_json(capsys)
    assert code == EXIT_FAILED and report["capabilities"]["htb"] is False
    assert any("modprobe sch_htb" in fix for fix in report["fixes"])
    assert main(["doctor"]) == EXIT_FAILED
    out = capsys.readouterr().out.splitlines()
    assert any(ln.startswith("missing: the kernel lacks the htb") for ln in out)
    assert any(ln.startswith("optional: iperf3 is missing") for ln in out)


def test_clean_without_root_is_refused_with_the_fix(machine, monkeypatch, capsys):
    import topologies.cleanup

    machine["root"] = False
    monkeypatch.setattr(topologies.cleanup, "clean", lambda force: pytest.fail("cleaned"))
    assert main(["clean"]) == EXIT_FAILED
    assert capsys.readouterr().err == (
        "error: kvfabric clean needs root (fix: sudo kvfabric clean)\n"
    )


@pytest.mark.parametrize(
    "broken, says, fix",
    [
        ("root", "building a fabric needs root", "run it with sudo"),
        ("mininet", "Mininet is not importable", "sudo make setup"),
        ("ovs", "Open vSwitch is not running", "sudo /usr/share/openvswitch/scripts/ovs-ctl"),
        ("tc", "tc is not installed", "sudo make setup"),
        (
            "htb",
            "the kernel refuses the htb qdisc every shaped egress needs",
            "sudo modprobe sch_htb",
        ),
        ("pfifo", "refuses the pfifo qdisc", "sudo modprobe sch_htb"),
        ("veth", "a scratch veth pair could not be created", "sudo modprobe veth"),
    ],
)
def test_preflight_stops_before_building_with_one_line_and_the_fix(
    machine, monkeypatch, capsys, broken, says, fix
):
    import experiments.orchestration.runner
    import topologies.machine as probes

    if broken == "root":
        machine["root"] = False
    elif broken == "mininet":
        monkeypatch.setattr(probes, "mininet_importable", lambda: False)
    elif broken == "ovs":
        monkeypatch.setattr(probes, "ovs_version", lambda: None)
    elif broken == "tc":
        monkeypatch.setattr(probes.shutil, "which", lambda t: None if t == "tc" else f"/x/{t}")
    elif broken == "veth":
        monkeypatch.setattr(probes, "probe_qdiscs", lambda names: dict.fromkeys(names))
    else:
        machine["qdiscs"][broken] = False
    with pytest.raises(probes.EnvironmentProblem) as info:
        probes.preflight()
    assert says in str(info.value) and info.value.fix.startswith(fix)
    built = lambda *a, **k: pytest.fail("built")  # noqa: E731
    monkeypatch.setattr(experiments.orchestration.runner, "fabric_up", built)
    assert main(["demo"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cannot run: ") and f"(fix: {fix}" in err


def test_preflight_probes_htb_and_pfifo_once_per_process(machine):
    import topologies.machine as probes

    probes.preflight()
    probes.preflight()
    assert machine["probes"] == 1 and probes.shaping_qdiscs() == {"htb": True, "pfifo": True}


def test_qdisc_probe_uses_a_scratch_veth_no_run_can_own(monkeypatch):
    import subprocess

    import topologies.machine as probes
    from topologies.naming import owned

    calls: list[list[str]] = []

    def fake_run(args, timeout=20, **kw):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(probes, "is_root", lambda: True)
    monkeypatch.setattr(probes.shutil, "which", lambda t: f"/usr/sbin/{t}")
    monkeypatch.setattr(probes, "run", fake_run)
    assert probes.probe_qdiscs(probes.SHAPING_QDISCS) == {"htb": True, "pfifo": True}
    dev = calls[1][3]  # ip link add DEV type veth peer name PEER
    assert calls[1][:3] == ["ip", "link", "add"] and owned(dev) == "kfzz" and len(dev) <= 15
    tried = [c[c.index("1:") + 1] for c in calls if c[:3] == ["tc", "qdisc", "replace"]]
    assert tried == ["htb", "pfifo"]
    assert calls[-1] == ["ip", "link", "del", dev]


def test_no_run_gets_the_probes_prefix(monkeypatch):
    from topologies import naming

    letters = iter("zz" + "zz" + "a1")
    monkeypatch.setattr(naming.secrets, "choice", lambda alphabet: next(letters))
    assert naming.new_prefix() == "kfa1"


@pytest.mark.parametrize("ci, outcome", [("1", "1 error"), ("true", "1 error"), ("", "1 skip")])
def test_ci_fails_root_tests_the_machine_cannot_run(tmp_path, ci, outcome):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    pretend = "import topologies.machine\ntopologies.machine.is_root = lambda: False\n"
    (tmp_path / "conftest.py").write_text((repo / "tests/conftest.py").read_text() + pretend)
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n\n@pytest.mark.root\ndef test_builds():\n    pass\n"
    )
    env = {**os.environ, "PYTHONPATH": str(repo), "CI": ci}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert outcome in proc.stdout, proc.stdout
    assert proc.returncode == (1 if ci else 0)
    if ci:
        assert "CI cannot build a fabric: needs root" in proc.stdout


def test_doctor_shows_a_jumbo_frame_envelope_beside_the_default(
    machine, monkeypatch, capsys, tmp_path
):
    from experiments.orchestration.envelope import Envelope, envelope_path, machine_identity, save

    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(tmp_path / "envelope.json"))
    here = machine_identity(mtu=9000)
    save(
        Envelope({1: 563.0, 3: 225.0}, {"small": 22200.0}, 4000, "measured at 9000", True, here),
        envelope_path(9000),
    )
    assert main(["doctor"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "no calibration at" in out  # the default MTU has none
    assert "envelope at MTU 9000: switch-hop Mbit/s: 1 switches 563" in out
    assert "calibrated: measured at 9000" in out

"""``doctor --cluster`` judged from what servers answered (no root, no ssh): a healthy
server passes every check; each way a server can be unfit fails its check with the
one-line fix that mends it, and only required checks fail the cluster."""

from __future__ import annotations

import pytest

from topologies.cluster.clock import ClockOffset
from topologies.cluster.doctor import (
    Section,
    ServerProbe,
    diagnose,
    parse_sections,
    probe_script,
)

EXE, REPO = "/opt/kvfabric/.venv/bin/python", "/opt/kvfabric"
HEALTHY = {
    "uid": (0, "0"),
    "sudo": (0, ""),
    "mininet": (0, ""),
    "mnexec": (0, "/usr/bin/mnexec"),
    "ovs": (0, ""),
    "datapath_types": (0, "[netdev, system]"),
    "iface_types": (0, "[afxdp, erspan, geneve, internal, patch, system, tap, vxlan]"),
    "ovs_module": (1, ""),
    "route": (0, "10.251.0.1 dev lan0 src 10.251.0.11 uid 0 \\    cache"),
    "mtu": (0, "9100"),
    "vxlan": (0, ""),
    "tun": (0, ""),
    "code": (0, f"{REPO}/topologies/__init__.py"),
}


def _output(sections: dict[str, tuple[int, str]]) -> str:
    """What ``probe_script`` prints for these (exit code, output) sections."""
    return "".join(
        f"@@kvfabric {n}\n{out}\n@@kvfabric rc {rc}\n" for n, (rc, out) in sections.items()
    )


def _probe(clocks=None, **changed) -> ServerProbe:
    sections = parse_sections(_output({**HEALTHY, **changed}))
    near = ClockOffset(2_000.0, 30_000.0, 60_000, 16)
    clocks = {"monotonic": near, "realtime": near} if clocks is None else clocks
    return ServerProbe("alice@h1", "10.251.0.1", 0, "", sections, clocks)


def _rows(probe: ServerProbe) -> dict:
    return {r.check: r for r in diagnose(probe, EXE, REPO)}


def test_a_healthy_server_passes_every_required_check_and_says_what_it_found():
    rows = _rows(_probe())
    assert [c for c, r in rows.items() if r.fails or r.fix] == []
    assert rows["underlay mtu"].shown == "9100 on lan0 towards 10.251.0.1"
    assert rows["ovs kernel module"].shown == "not loaded: userspace datapath (netdev)"
    assert not rows["ovs kernel module"].required  # informational
    assert rows["clock monotonic"].measured["uncertainty_ns"] == 30_000.0
    assert rows["clock monotonic"].shown.startswith("+0.002 ms ± 0.030 ms")


@pytest.mark.parametrize(
    "changed, check, fix",
    [
        (
            {"uid": (0, "1000"), "sudo": (1, "sudo: a password is required")},
            "root",
            "use --cluster root@h1, or give alice passwordless sudo "
            "(visudo: alice ALL=(ALL) NOPASSWD: ALL)",
        ),
        (
            {"mininet": (1, "ModuleNotFoundError: No module named 'mininet'")},
            "mininet",
            "sudo apt-get install mininet (on the server)",
        ),
        ({"mnexec": (1, "")}, "mininet", "sudo apt-get install mininet (on the server)"),
        (
            {
                "ovs": (
                    1,
                    "ovs-vsctl: unix:/var/run/openvswitch/db.sock: database connection failed",
                )
            },
            "open vswitch",
            "sudo /usr/share/openvswitch/scripts/ovs-ctl start",
        ),
        (
            {"ovs": (127, "sh: 1: ovs-vsctl: not found")},
            "open vswitch",
            "sudo apt-get install openvswitch-switch",
        ),
        (
            {"datapath_types": (0, "[]")},
            "ovs datapaths",
            "an Open vSwitch with the netdev or system",
        ),
        (
            {"iface_types": (0, "[internal, system, tap]")},
            "ovs vxlan ports",
            "an Open vSwitch built with tunnels",
        ),
        ({"vxlan": (2, "Error: Unknown device type.")}, "kernel vxlan", "sudo modprobe vxlan"),
        ({"tun": (1, "")}, "tun", "sudo modprobe tun"),
        (
            {"code": (1, "")},
            "kvfabric code",
            f"install kvfabric there at the same path: {REPO} with the interpreter {EXE}",
        ),
        (
            {"code": (1, "ModuleNotFoundError: No module named 'traffic'")},
            "kvfabric code",
            f"install kvfabric there at the same path: {REPO}",
        ),
        (
            {"code": (0, "/elsewhere/topologies/__init__.py")},
            "kvfabric code",  # another checkout
            f"install kvfabric there at the same path: {REPO}",
        ),
        (
            {"mtu": (0, "1500")},
            "underlay mtu",
            "sudo ip link set lan0 mtu 1550 (VXLAN adds 50 bytes",
        ),
        (
            {"route": (2, "RTNETLINK answers: Network is unreachable")},
            "underlay mtu",
            "give the server a route to this machine's 10.251.0.1",
        ),
    ],
)
def test_each_unfit_server_fails_its_check_with_the_fix(changed, check, fix):
    rows = _rows(_probe(**changed))
    assert rows[check].fails and rows[check].fix.startswith(fix), rows[check]
    assert [c for c, r in rows.items() if r.fails] == [check]  # and nothing else


def test_a_small_underlay_mtu_says_which_fabric_frames_would_fit():
    row = _rows(_probe(mtu=(0, "1500")))["underlay mtu"]
    assert row.shown == "1500 on lan0 towards 10.251.0.1: fits fabric frames of 1450 bytes only"


def test_without_open_vswitch_its_datapaths_are_not_asked_rather_than_failed():
    rows = _rows(_probe(ovs=(1, "database connection failed")))
    assert rows["ovs datapaths"].ok is None and rows["ovs vxlan ports"].ok is None
    assert not rows["ovs datapaths"].fix


def test_a_server_without_ssh_fails_that_check_alone_with_the_fix_for_its_error():
    def no_ssh(error: str):
        probe = ServerProbe("alice@h1", "10.251.0.1", 255, error)
        return diagnose(probe, EXE, REPO)

    (denied,) = no_ssh("alice@h1: Permission denied (publickey).")
    assert denied.check == "ssh" and denied.fails
    assert denied.fix.startswith("ssh-copy-id alice@h1")
    (unknown,) = no_ssh("Host key verification failed.")
    assert unknown.fix.startswith("accept its host key once: ssh alice@h1 true")
    (gone,) = no_ssh("ssh: connect to host h1 port 22: Connection refused")
    assert gone.shown == "ssh: connect to host h1 port 22: Connection refused"
    assert gone.fix.startswith("start sshd on h1")


def test_an_unreadable_clock_fails_but_distant_wall_clocks_only_warn():
    far = ClockOffset(3.2e9, 40_000.0, 80_000, 16)
    rows = _rows(
        _probe(clocks={"monotonic": "the session ended: python3: not found", "realtime": far})
    )
    assert rows["clock monotonic"].fails
    assert rows["clock monotonic"].fix == "python3 must run there: sudo apt-get install python3"
    assert not rows["clock realtime"].fails and rows["clock realtime"].ok is False
    assert "NTP" in rows["clock realtime"].fix
    assert rows["clock realtime"].shown.startswith("+3200.000 ms ± 0.040 ms")


def test_the_script_quotes_paths_and_names_its_scratch_vxlan_device_as_a_probe():
    script = probe_script("10.251.0.1", "/opt/my venv/bin/python", "/opt/kv fabric")
    assert "test -x '/opt/my venv/bin/python' && cd '/opt/kv fabric'" in script
    assert "ip link add kfzzvx$$ type vxlan id 42 dstport 4789" in script
    assert "&& $S ip link del kfzzvx$$" in script  # deleted at once, only if made
    sections = parse_sections(_output({"uid": (0, "0"), "mtu": (1, "cat: x: No such file")}))
    assert sections == {"uid": Section(0, "0"), "mtu": Section(1, "cat: x: No such file")}

"""``kvfabric cluster local``: N servers on this machine, each reached by ssh with the
cluster's own key, each with its own hostname and Open vSwitch; ``down`` and, after a
killed ``up``, ``clean`` leave nothing of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.integration.conftest import cluster_up
from topologies.cluster.local import CLUSTERS_DIR, cluster_records, down

pytestmark = pytest.mark.root


def _uts_namespaces() -> dict[int, list[int]]:
    """pid lists by UTS namespace: a server's processes are those of its namespace."""
    out: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out.setdefault(os.stat(f"/proc/{pid}/ns/uts").st_ino, []).append(int(pid))
        except OSError:
            continue
    return out


BEFORE = set(_uts_namespaces())


def _leftovers(prefix: str) -> dict[str, list]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = os.listdir("/sys/class/net")
    return {
        "netns": [n for n in netns.split() if n.startswith(prefix)],
        "interfaces": [n for n in links if n.startswith(prefix)],
        "processes": [
            p for ns, pids in _uts_namespaces().items() if ns not in BEFORE for p in pids
        ],
        "files": [str(CLUSTERS_DIR / prefix)] if (CLUSTERS_DIR / prefix).exists() else [],
    }


def _ssh(rec, index: int, command: str) -> subprocess.CompletedProcess[str]:
    plan = rec.plan()
    address = plan.servers[index].address
    return subprocess.run(
        ["ssh", "-F", str(plan.ssh_config), f"root@{address}", command],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_two_servers_each_with_its_own_sshd_and_open_vswitch_and_nothing_after_down(
    no_local_cluster,
):
    rec = cluster_up(2)
    try:
        names = [_ssh(rec, i, "hostname").stdout.strip() for i in (0, 1)]
        assert names == [f"{rec.prefix}-s1", f"{rec.prefix}-s2"]
        # a fresh server's shell: none of this machine's ~/.bashrc (pyenv's rehash lock,
        # left by a session a power_off killed, hung every later session for 60 s)
        rc = _ssh(rec, 0, 'wc -c < "$HOME/.bashrc" 2>/dev/null || echo none')
        assert rc.stdout.strip() in ("0", "none"), rc.stdout
        made = _ssh(
            rec,
            0,
            "ovs-vsctl add-br kvtest -- set bridge kvtest datapath_type=netdev"
            " && ovs-vsctl list-br",
        )
        assert made.stdout.split() == ["kvtest"], made.stderr
        assert _ssh(rec, 1, "ovs-vsctl list-br").stdout.split() == []  # its own database
        main_bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True)
        assert "kvtest" not in main_bridges.stdout.split()
        other = rec.plan().servers[1].address
        ping = _ssh(rec, 0, f"ping -c 2 -W 1 {other}")
        assert ping.returncode == 0, ping.stdout  # the servers share the cluster's LAN
        # the cluster's key only: without it, the server refuses
        no_key = [
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-i",
            "/dev/null",
        ]
        refused = subprocess.run(
            ["ssh", *no_key, f"root@{other}", "true"], capture_output=True, timeout=30
        )
        assert refused.returncode != 0
    finally:
        down(rec)
    assert _leftovers(rec.prefix) == {"netns": [], "interfaces": [], "processes": [], "files": []}


def test_a_killed_up_leaves_what_clean_removes_entirely(no_local_cluster):
    before = {r.prefix for r in cluster_records()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.cli.main", "cluster", "local", "up", "3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    # killed as it starts the second server: the first one's sshd and Open vSwitch are
    # up or starting, the cluster is still being built (a sleep after the first line
    # was too long on a fast machine: all three were up and clean kept them)
    lines = [proc.stdout.readline(), proc.stdout.readline()]
    assert "starting server 1/3" in lines[0] and "starting server 2/3" in lines[1], lines
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (prefix,) = {r.prefix for r in cluster_records()} - before
    assert any(_leftovers(prefix).values())  # a killed up leaves something behind
    out = subprocess.run(
        [sys.executable, "-m", "experiments.cli.main", "clean"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert f"{prefix}-" in out.stdout  # it names what it removed of that cluster
    assert _leftovers(prefix) == {"netns": [], "interfaces": [], "processes": [], "files": []}

"""``kvfabric doctor --cluster`` on a local cluster of two servers: both pass every
check and their clocks are this machine's (the namespaces share it); a server whose
sshd is not there fails the ssh check with its fix while the others still pass; and
nothing of the cluster (nor of the probes' scratch devices) is left after."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from topologies.cluster.local import CLUSTERS_DIR

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]


def _leftovers(prefix: str) -> dict[str, list[str]]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = os.listdir("/sys/class/net")
    return {
        "netns": [n for n in netns.split() if n.startswith(prefix)],
        "interfaces": [n for n in links if n.startswith(prefix) or n.startswith("kfzzvx")],
        "files": [str(CLUSTERS_DIR / prefix)] if (CLUSTERS_DIR / prefix).exists() else [],
    }


@pytest.fixture
def cluster(local_cluster):
    yield local_cluster
    scratch = [n for n in os.listdir("/sys/class/net") if n.startswith("kfzzvx")]
    assert scratch == []  # the doctor's scratch VXLAN devices are gone


def _doctor(arg: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.cli.main", "doctor", "--cluster", arg, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_two_servers_pass_every_check_and_share_this_machines_clock(cluster):
    arg = cluster.plan().cluster_arg()
    rc, report = _doctor(arg)
    failed = [r for r in report["rows"] if r["required"] and r["ok"] is not True]
    assert (rc, report["ok"], failed) == (0, True, [])
    servers = arg.split(",")
    assert sorted({r["server"] for r in report["rows"]}) == sorted(servers)
    for row in report["rows"]:
        if row["check"].startswith("clock "):
            m = row["measured"]
            us = {k: m[k] / 1e3 for k in ("offset_ns", "uncertainty_ns", "rtt_ns")}
            print(
                f"{row['server']} {row['check']}: offset {us['offset_ns']:+.1f} us "
                f"± {us['uncertainty_ns']:.1f} us (rtt {us['rtt_ns']:.1f} us)"
            )
            assert abs(m["offset_ns"]) <= m["uncertainty_ns"] + 1_000_000, row
            assert m["samples"] == 16
        if row["check"] == "underlay mtu":
            assert row["measured"]["mtu"] >= 1550
    codes = [r["shown"] for r in report["rows"] if r["check"] == "kvfabric code"]
    assert codes == [f"{sys.executable} imports {REPO}/topologies/__init__.py"] * 2


def test_a_server_without_sshd_fails_the_ssh_check_with_its_fix_and_the_others_pass(cluster):
    nobody = f"root@{ipaddress.ip_network(cluster.lan).network_address + 99}"
    good = cluster.plan().cluster_arg().split(",")
    rc, report = _doctor(",".join([good[0], nobody, good[1]]))
    assert rc == 1 and report["ok"] is False
    (gone,) = [r for r in report["rows"] if r["server"] == nobody]
    assert gone["check"] == "ssh" and gone["ok"] is False
    assert gone["fix"].startswith(f"start sshd on {nobody.split('@')[1]}")
    others = [r for r in report["rows"] if r["server"] != nobody]
    assert {r["server"] for r in others} == set(good)
    assert [r for r in others if r["required"] and r["ok"] is not True] == []

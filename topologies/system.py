"""What this machine can emulate: probes for root, Mininet, Open vSwitch, the
OVS datapath, qdiscs and TCP congestion controls, each with the fix for a gap.

Probes that need a device create a scratch veth pair (owned-name prefix
``kfzz``) and always delete it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SETUP_FIX = "sudo make setup"
OVS_START = "sudo /usr/share/openvswitch/scripts/ovs-ctl start"


class EnvironmentProblem(RuntimeError):
    """The machine cannot build a fabric; ``fix`` is the command that mends it."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} (fix: {fix})")
        self.fix = fix


def run(args: list[str], timeout: float = 20, **kw) -> subprocess.CompletedProcess[str]:
    """Run a command, capture text output, never raise on non-zero exit."""
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def is_root() -> bool:
    return os.geteuid() == 0


def mininet_importable() -> bool:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return False
    return True


def ovs_version() -> str | None:
    """The running ovs-vswitchd's version, or None if OVS is not running."""
    if not shutil.which("ovs-vsctl"):
        return None
    try:
        proc = run(["ovs-vsctl", "-t", "2", "get", "Open_vSwitch", ".", "ovs_version"], timeout=5)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        return None
    # ovsdb answers even when ovs-vswitchd is down; check the daemon too.
    if run(["ovs-appctl", "-t", "ovs-vswitchd", "version"], timeout=5).returncode != 0:
        return None
    return proc.stdout.strip().strip('"')


def ovs_kernel_datapath() -> bool:
    """Is the openvswitch kernel module loaded?"""
    return Path("/sys/module/openvswitch").exists()


def tcp_congestion_controls() -> list[str]:
    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    return path.read_text().split() if path.exists() else []


QDISC_PROBES = {
    "htb": ["htb", "default", "1"],
    "tbf": ["tbf", "rate", "1mbit", "burst", "32kbit", "latency", "50ms"],
    "pfifo": ["pfifo", "limit", "10"],
    "netem": ["netem", "delay", "1ms"],
    "red": ["red", "limit", "400000", "avpkt", "1000", "bandwidth", "10mbit", "probability",
            "0.02", "min", "30000", "max", "90000"],
    "fq_codel": ["fq_codel"],
    "prio": ["prio"],
}  # fmt: skip


def probe_qdiscs() -> dict[str, bool]:
    """Which qdiscs the kernel accepts, by trying each on a scratch veth pair."""
    if not is_root() or not shutil.which("tc"):
        return dict.fromkeys(QDISC_PROBES, False)
    dev, peer = "kfzzs0-eth0", "kfzzs0-eth1"
    run(["ip", "link", "del", dev])
    made = run(["ip", "link", "add", dev, "type", "veth", "peer", "name", peer])
    try:
        if made.returncode != 0:
            return dict.fromkeys(QDISC_PROBES, False)
        result = {}
        for name, args in QDISC_PROBES.items():
            proc = run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *args])
            result[name] = proc.returncode == 0
            run(["tc", "qdisc", "del", "dev", dev, "root"])
        return result
    finally:
        run(["ip", "link", "del", dev])


@dataclass
class Capabilities:
    root: bool
    mininet: bool
    ovs: str | None
    ovs_kernel_datapath: bool
    qdiscs: dict[str, bool]
    tcp_cc: list[str]
    tools: dict[str, bool]
    fixes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.fixes

    def as_json(self) -> dict:
        caps = {
            "root": self.root,
            "mininet": self.mininet,
            "ovs": self.ovs is not None,
            "ovs_version": self.ovs,
            "ovs_kernel_datapath": self.ovs_kernel_datapath,
            **{q: self.qdiscs.get(q, False) for q in QDISC_PROBES},
            "tcp_cc": self.tcp_cc,
            **{t: ok for t, ok in self.tools.items()},
        }
        return {"ok": self.ok, "capabilities": caps, "fixes": self.fixes}


def capabilities() -> Capabilities:
    """Probe everything doctor reports; ``fixes`` lists what blocks emulation."""
    caps = Capabilities(
        root=is_root(),
        mininet=mininet_importable(),
        ovs=ovs_version(),
        ovs_kernel_datapath=ovs_kernel_datapath(),
        qdiscs=probe_qdiscs(),
        tcp_cc=tcp_congestion_controls(),
        tools={t: shutil.which(t) is not None for t in ("iperf3", "ethtool", "tc", "tcpdump")},
    )
    if not caps.root:
        caps.fixes.append("not root: run kvfabric with sudo (Mininet needs root)")
    if not caps.mininet:
        caps.fixes.append(f"Mininet is not importable from this Python: {SETUP_FIX}")
    if caps.ovs is None:
        caps.fixes.append(f"Open vSwitch is not running: {OVS_START}")
    if caps.root and not (caps.qdiscs.get("htb") and caps.qdiscs.get("pfifo")):
        caps.fixes.append("the kernel lacks the htb or pfifo qdisc: no fix short of a new kernel")
    for tool in ("ethtool", "tc"):
        if not caps.tools[tool]:
            caps.fixes.append(f"{tool} is missing: {SETUP_FIX}")
    if "cubic" not in caps.tcp_cc:
        caps.fixes.append("TCP cubic is not available: modprobe tcp_cubic")
    return caps


def preflight() -> None:
    """Raise EnvironmentProblem for the first thing that stops a fabric being built."""
    if not is_root():
        raise EnvironmentProblem("building a fabric needs root", "run it with sudo")
    if not mininet_importable():
        raise EnvironmentProblem("Mininet is not importable from this Python", SETUP_FIX)
    if ovs_version() is None:
        raise EnvironmentProblem("Open vSwitch is not running", OVS_START)
    for tool in ("ethtool", "tc", "ip"):
        if not shutil.which(tool):
            raise EnvironmentProblem(f"{tool} is not installed", SETUP_FIX)

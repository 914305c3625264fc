"""What this machine can emulate: probes for root, Mininet, Open vSwitch, the
OVS datapath, qdiscs and TCP congestion controls, each with the fix for a gap.

Probes that need a device create a scratch veth pair (prefix ``kfzz``, which
no run is given, and this process's id) and always delete it. A qdisc that was
not probed (not root, or no scratch veth) is ``None``, never ``False``; so is
Open vSwitch without root (its database socket is root's).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .naming import SCRATCH_PREFIX
from .processes import run

SETUP_FIX = "sudo make setup"
OVS_START = "sudo /usr/share/openvswitch/scripts/ovs-ctl start"
QDISC_FIX = "sudo modprobe sch_htb; failing that, a kernel with CONFIG_NET_SCH_HTB and _FIFO"
VETH_FIX = "sudo modprobe veth"
# Every shaped egress is an HTB class with a pfifo child (``shaping``).
SHAPING_QDISCS = ("htb", "pfifo")
REQUIRED_TOOLS = ("ethtool", "tc", "ip")
# Not needed to emulate a fabric; what uses each.
OPTIONAL_TOOLS = {
    "iperf3": "the root tests and benchmarks measure with it",
    "tcpdump": "a root test captures packets with it",
    "cyclictest": "kvfabric calibrate measures the machine's stalls with it (rt-tests)",
}


class EnvironmentProblem(RuntimeError):
    """The machine cannot build a fabric; ``fix`` is the command that mends it."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} (fix: {fix})")
        self.fix = fix


def is_root() -> bool:
    return os.geteuid() == 0


def mininet_importable() -> bool:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return False
    return True


def mininet_version() -> str | None:
    """Mininet's version as it says (``env.json``); ImportError without Mininet."""
    import mininet.net

    return getattr(mininet.net, "VERSION", None)


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
    "red": [
        "red",
        "limit",
        "400000",
        "avpkt",
        "1000",
        "bandwidth",
        "10mbit",
        "probability",
        "0.02",
        "min",
        "30000",
        "max",
        "90000",
    ],
    "fq_codel": ["fq_codel"],
    "prio": ["prio"],
}


def probe_qdiscs(names: Iterable[str] = tuple(QDISC_PROBES)) -> dict[str, bool | None]:
    """Which of ``names`` the kernel accepts, by trying each on a scratch veth
    pair; all ``None`` (not probed) without root, ``tc`` or the veth pair."""
    names = list(names)
    if not is_root() or not shutil.which("tc"):
        return dict.fromkeys(names)
    base = f"{SCRATCH_PREFIX}s{os.getpid() % 100_000}"  # <= 15 characters with -ethN
    dev, peer = f"{base}-eth0", f"{base}-eth1"
    run(["ip", "link", "del", dev])
    made = run(["ip", "link", "add", dev, "type", "veth", "peer", "name", peer])
    try:
        if made.returncode != 0:
            return dict.fromkeys(names)
        result: dict[str, bool | None] = {}
        for name in names:
            args = QDISC_PROBES[name]
            proc = run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *args])
            result[name] = proc.returncode == 0
            run(["tc", "qdisc", "del", "dev", dev, "root"])
        return result
    finally:
        run(["ip", "link", "del", dev])


_SHAPING_PROBED: dict[str, bool | None] = {}


def shaping_qdiscs() -> dict[str, bool | None]:
    """htb and pfifo, probed once per process (preflight runs before every build);
    a result with ``None`` (not probed) is not kept."""
    if not _SHAPING_PROBED:
        found = probe_qdiscs(SHAPING_QDISCS)
        if None in found.values():
            return found
        _SHAPING_PROBED.update(found)
    return dict(_SHAPING_PROBED)


def tools() -> dict[str, bool]:
    """Which command-line tools the testbed uses are installed."""
    return {t: shutil.which(t) is not None for t in (*REQUIRED_TOOLS, *OPTIONAL_TOOLS)}


@dataclass
class Capabilities:
    root: bool
    mininet: bool
    ovs: str | None
    ovs_kernel_datapath: bool
    qdiscs: dict[str, bool | None]
    tcp_cc: list[str]
    tools: dict[str, bool]
    fixes: list[str] = field(default_factory=list)  # each blocks emulation
    optional_fixes: list[str] = field(default_factory=list)  # each a feature, not emulation

    @property
    def ok(self) -> bool:
        return not self.fixes

    def as_json(self) -> dict:
        caps = {
            "root": self.root,
            "mininet": self.mininet,
            # without root ovsdb's socket refuses us: not running is unknown
            "ovs": True if self.ovs else (False if self.root else None),
            "ovs_version": self.ovs,
            "ovs_kernel_datapath": self.ovs_kernel_datapath,
            **{q: self.qdiscs.get(q) for q in QDISC_PROBES},  # None: not probed
            "tcp_cc": self.tcp_cc,
            **{t: ok for t, ok in self.tools.items()},
        }
        return {
            "ok": self.ok,
            "capabilities": caps,
            "fixes": self.fixes,
            "optional_fixes": self.optional_fixes,
        }


def capabilities() -> Capabilities:
    """Probe everything doctor reports; ``fixes`` lists what blocks emulation."""
    caps = Capabilities(
        root=is_root(),
        mininet=mininet_importable(),
        ovs=ovs_version(),
        ovs_kernel_datapath=ovs_kernel_datapath(),
        qdiscs=probe_qdiscs(),
        tcp_cc=tcp_congestion_controls(),
        tools=tools(),
    )
    if not caps.root:
        caps.fixes.append("not root: run kvfabric with sudo (Mininet needs root)")
    if not caps.mininet:
        caps.fixes.append(f"Mininet is not importable from this Python: {SETUP_FIX}")
    if caps.ovs is None and caps.root:
        caps.fixes.append(f"Open vSwitch is not running: {OVS_START}")
    shaping = [caps.qdiscs.get(q) for q in SHAPING_QDISCS]
    if caps.root and caps.tools["tc"] and None in shaping:
        caps.fixes.append(f"a scratch veth pair could not be created to probe qdiscs: {VETH_FIX}")
    elif False in shaping:
        caps.fixes.append(f"the kernel lacks the htb or pfifo qdisc: {QDISC_FIX}")
    for tool in REQUIRED_TOOLS:
        if not caps.tools[tool]:
            caps.fixes.append(f"{tool} is missing: {SETUP_FIX}")
    for tool, why in OPTIONAL_TOOLS.items():
        if not caps.tools[tool]:
            caps.optional_fixes.append(f"{tool} is missing ({why}): {SETUP_FIX}")
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
    for tool in REQUIRED_TOOLS:
        if not shutil.which(tool):
            raise EnvironmentProblem(f"{tool} is not installed", SETUP_FIX)
    found = shaping_qdiscs()
    if None in found.values():
        raise EnvironmentProblem(
            "a scratch veth pair could not be created to try the htb and pfifo qdiscs", VETH_FIX
        )
    missing = [q for q, ok in found.items() if not ok]
    if missing:
        raise EnvironmentProblem(
            f"the kernel refuses the {' and '.join(missing)} qdisc every shaped egress needs",
            QDISC_FIX,
        )

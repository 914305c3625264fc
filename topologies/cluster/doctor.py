"""What ``kvfabric doctor --cluster`` concludes about each server, as pure data.

``probe_script`` is the one shell script a server runs (each section's output and
exit code between markers); ``diagnose`` turns what came back (a ``ServerProbe``,
gathered by ``topologies.cluster.probe``) into rows ``(server, check, ok, shown,
fix)``. A required row that is not ok makes the cluster unusable; an optional row
only informs. ``ok`` is None when a check could not be made (Open vSwitch down).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ..naming import SCRATCH_PREFIX
from .clock import ClockOffset

VXLAN_OVERHEAD = 50  # outer Ethernet + IPv4 + UDP + VXLAN headers
FABRIC_MTU = 1500  # the smallest fabric frame kvfabric runs with
REALTIME_TOLERANCE_NS = 10_000_000  # wall clocks further apart: NTP is not running
OVS_START = "sudo /usr/share/openvswitch/scripts/ovs-ctl start"
_MARK = "@@kvfabric"


@dataclass(frozen=True)
class Section:
    rc: int
    out: str


@dataclass
class ServerProbe:
    """What probing one server brought back (the raw material of ``diagnose``)."""

    server: str  # user@host
    coordinator: str  # this machine's address as the server reaches it
    ssh_rc: int
    ssh_error: str
    sections: dict[str, Section] = field(default_factory=dict)
    clocks: dict[str, ClockOffset | str] = field(default_factory=dict)  # str: why not


@dataclass(frozen=True)
class Check:
    server: str
    check: str
    ok: bool | None
    shown: str
    fix: str = ""
    required: bool = True
    measured: dict[str, float] = field(default_factory=dict)

    @property
    def fails(self) -> bool:
        return self.required and self.ok is False


def probe_script(coordinator: str, interpreter: str, repo: str) -> str:
    """The checks a server runs, in order; not root uses ``sudo -n``."""
    q = shlex.quote
    scratch = f"{SCRATCH_PREFIX}vx$$"  # this shell's pid: <= 15 characters
    route = f"ip -o route get {q(coordinator)}"
    imports = "import traffic.agents.worker, topologies; print(topologies.__file__)"
    sections = {
        "uid": "id -u",
        "sudo": "sudo -n true",
        "mininet": '/usr/bin/python3 -c "import mininet.net"',
        "mnexec": "command -v mnexec",
        "ovs": "$S ovs-vsctl -t 3 show >/dev/null",
        "datapath_types": "$S ovs-vsctl -t 3 get Open_vSwitch . datapath_types",
        "iface_types": "$S ovs-vsctl -t 3 get Open_vSwitch . iface_types",
        "ovs_module": "test -d /sys/module/openvswitch",
        "route": route,
        "mtu": 'cat "/sys/class/net/$dev/mtu"',
        # deleted at once; only a device this script made is deleted
        "vxlan": f"$S ip link add {scratch} type vxlan id 42 dstport 4789 ${{src:+local $src}}"
        f" && $S ip link del {scratch}",
        "tun": "test -c /dev/net/tun",
        "code": f"test -x {q(interpreter)} && cd {q(repo)} && {q(interpreter)} -c {q(imports)}",
    }
    lines = [
        'S=""; [ "$(id -u)" = 0 ] || S="sudo -n"',
        f"dev=$({route} 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')",
        f"src=$({route} 2>/dev/null | sed -n 's/.* src \\([^ ]*\\).*/\\1/p')",
    ]
    for name, command in sections.items():
        lines.append(f'echo "{_MARK} {name}"; {{ {command}; }} 2>&1; echo "{_MARK} rc $?"')
    return "\n".join(lines) + "\n"


def parse_sections(stdout: str) -> dict[str, Section]:
    """The sections of ``probe_script``'s output by name."""
    found: dict[str, Section] = {}
    name, body = None, []
    for line in stdout.splitlines():
        if line.startswith(f"{_MARK} rc ") and name is not None:
            found[name] = Section(int(line.split()[-1]), "\n".join(body).strip())
            name = None
        elif line.startswith(f"{_MARK} "):
            name, body = line.split(maxsplit=1)[1], []
        elif name is not None:
            body.append(line)
    return found


def _ovs_set(text: str) -> list[str]:
    """``[netdev, system]`` (ovs-vsctl's set syntax) -> ``["netdev", "system"]``."""
    return [t for t in re.split(r"[\[\],\s\"]+", text) if t]


def diagnose(p: ServerProbe, interpreter: str, repo: str) -> list[Check]:
    """Every check of one server with the one-line fix of each failure."""
    if p.ssh_rc != 0 and not p.sections:
        return [_ssh(p)]
    user, _, host = p.server.rpartition("@")
    sec = p.sections
    none = Section(-1, "not run")
    login = "this machine: no ssh" if p.server == "localhost" else "key login, no password"
    rows = [Check(p.server, "ssh", True, login)]

    def add(check: str, ok: bool | None, shown: str, fix: str = "", **kw) -> None:
        rows.append(Check(p.server, check, ok, shown, "" if ok or ok is None else fix, **kw))

    uid, sudo = sec.get("uid", none), sec.get("sudo", none)
    is_root = uid.rc == 0 and uid.out == "0"
    add(
        "root",
        is_root or sudo.rc == 0,
        "uid 0"
        if is_root
        else f"uid {uid.out}, " + ("passwordless sudo" if sudo.rc == 0 else "no passwordless sudo"),
        f"use --cluster root@{host}, or give {user or 'the user'} passwordless sudo "
        f"(visudo: {user} ALL=(ALL) NOPASSWD: ALL)",
    )
    mininet, mnexec = sec.get("mininet", none), sec.get("mnexec", none)
    add(
        "mininet",
        mininet.rc == 0 and mnexec.rc == 0,
        ("mininet.net imports" if mininet.rc == 0 else "/usr/bin/python3 cannot import mininet")
        + (f", mnexec at {mnexec.out}" if mnexec.rc == 0 else ", no mnexec on PATH"),
        "sudo apt-get install mininet (on the server)",
    )
    ovs = sec.get("ovs", none)
    missing = ovs.rc == 127 or "not found" in ovs.out
    add(
        "open vswitch",
        ovs.rc == 0,
        "running" if ovs.rc == 0 else _last(ovs.out),
        "sudo apt-get install openvswitch-switch" if missing else OVS_START,
    )
    running = ovs.rc == 0
    datapaths = _ovs_set(sec.get("datapath_types", none).out) if running else []
    usable = [d for d in datapaths if d in ("netdev", "system")]
    add(
        "ovs datapaths",
        bool(usable) if running else None,
        ", ".join(datapaths) if running else "not asked: Open vSwitch is not running",
        "an Open vSwitch with the netdev or system datapath: "
        "sudo apt-get install openvswitch-switch",
    )
    ifaces = _ovs_set(sec.get("iface_types", none).out) if running else []
    add(
        "ovs vxlan ports",
        "vxlan" in ifaces if running else None,
        ("vxlan among its port types" if "vxlan" in ifaces else "no vxlan port type")
        if running
        else "not asked: Open vSwitch is not running",
        "an Open vSwitch built with tunnels: sudo apt-get install openvswitch-switch",
    )
    module = sec.get("ovs_module", none).rc == 0
    add(
        "ovs kernel module",
        module,
        "loaded: kernel datapath" if module else "not loaded: userspace datapath (netdev)",
        required=False,
    )
    vxlan = sec.get("vxlan", none)
    add(
        "kernel vxlan",
        vxlan.rc == 0,
        "a scratch vxlan device was made and deleted" if vxlan.rc == 0 else _last(vxlan.out),
        "sudo modprobe vxlan (a kernel with CONFIG_VXLAN)",
    )
    add(
        "tun",
        sec.get("tun", none).rc == 0,
        "/dev/net/tun" if sec.get("tun", none).rc == 0 else "no /dev/net/tun",
        "sudo modprobe tun (the userspace datapath's internal ports are tap devices)",
    )
    code = sec.get("code", none)
    path = (code.out.splitlines() or [""])[-1]
    code_ok = code.rc == 0 and path.startswith(repo.rstrip("/") + "/")
    add(
        "kvfabric code",
        code_ok,
        f"{interpreter} imports {path}"
        if code_ok
        else _last(code.out) or f"{interpreter} is not there",
        f"install kvfabric there at the same path: {repo} with the interpreter {interpreter} "
        "(remote agents start from it)",
    )
    rows.append(_mtu(p))
    rows += _clocks(p)
    return rows


def _ssh(p: ServerProbe) -> Check:
    said = _last(p.ssh_error) or f"ssh exited {p.ssh_rc}"
    host = p.server.rpartition("@")[2]
    if "Permission denied" in said:
        fix = (
            f"ssh-copy-id {p.server} (BatchMode takes a key, never a password); "
            "a local cluster's servers: kvfabric cluster local list"
        )
    elif "Host key verification failed" in said:
        fix = f"accept its host key once: ssh {p.server} true (or ssh-keyscan {host})"
    else:
        fix = (
            f"start sshd on {host} or give the right address "
            "(local cluster: kvfabric cluster local list shows its --cluster)"
        )
    return Check(p.server, "ssh", False, said, fix)


def _mtu(p: ServerProbe) -> Check:
    route = p.sections.get("route", Section(-1, ""))
    dev = re.search(r"\bdev (\S+)", route.out)
    mtu = p.sections.get("mtu", Section(-1, ""))
    if route.rc != 0 or not dev or mtu.rc != 0 or not mtu.out.isdigit():
        return Check(
            p.server,
            "underlay mtu",
            False,
            _last(route.out if route.rc else mtu.out) or "no route",
            f"give the server a route to this machine's {p.coordinator}",
        )
    value, need = int(mtu.out), FABRIC_MTU + VXLAN_OVERHEAD
    shown = f"{value} on {dev.group(1)} towards {p.coordinator}"
    if value >= need:
        return Check(p.server, "underlay mtu", True, shown, measured={"mtu": value})
    return Check(
        p.server,
        "underlay mtu",
        False,
        f"{shown}: fits fabric frames of {value - VXLAN_OVERHEAD} bytes only",
        f"sudo ip link set {dev.group(1)} mtu {need} (VXLAN adds {VXLAN_OVERHEAD} bytes "
        f"to the {FABRIC_MTU}-byte fabric frames)",
        measured={"mtu": value},
    )


def _clocks(p: ServerProbe) -> list[Check]:
    rows = []
    for clock, required in (("monotonic", True), ("realtime", False)):
        got = p.clocks.get(clock, "not measured")
        name = f"clock {clock}"
        if isinstance(got, str):
            rows.append(
                Check(
                    p.server,
                    name,
                    False,
                    _last(got),
                    "python3 must run there: sudo apt-get install python3",
                    required=required,
                )
            )
            continue
        measured = {
            "offset_ns": got.offset_ns,
            "uncertainty_ns": got.uncertainty_ns,
            "rtt_ns": got.rtt_ns,
            "samples": got.samples,
        }
        ok = required or abs(got.offset_ns) <= got.uncertainty_ns + REALTIME_TOLERANCE_NS
        why = " (corrects one-way delays)" if required else " (wall clocks)"
        fix = "" if ok else "sync the wall clocks with NTP: sudo apt-get install chrony"
        rows.append(
            Check(p.server, name, ok, f"{got}{why}", fix, required=required, measured=measured)
        )
    return rows


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else ""

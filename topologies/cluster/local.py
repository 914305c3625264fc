"""Carry out a ``LocalClusterPlan``: N servers on this machine, each a network +
mount + UTS namespace with its own sshd and Open vSwitch (``kvfabric cluster
local up N``), and remove them again (``down``, and ``clean`` for what a killed
``up`` left).

A cluster records itself in ``STATE_DIR/clusters/<prefix>/cluster.json`` before it
creates anything. Its processes are found by namespace, not by name: every
process whose UTS namespace is one of its servers' belongs to it (sshd, Open
vSwitch, and whatever Mininet started there through ssh).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import psutil

from ..machine import EnvironmentProblem, is_root
from ..processes import STATE_DIR, alive, run
from .plan import (
    INSIDE_IFNAME,
    LAN_MTU,
    LocalClusterPlan,
    LocalServer,
    free_lan,
    known_hosts_text,
    new_cluster_prefix,
    owned_cluster,
    plan_local_cluster,
    server_init_script,
    server_lan_batch,
    ssh_config_text,
    sshd_config_text,
)

log = logging.getLogger("kvfabric.cluster")
CLUSTERS_DIR = STATE_DIR / "clusters"
OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
SSHD = "/usr/sbin/sshd"
READY_TIMEOUT_S = 30.0


class ClusterError(RuntimeError):
    """A local cluster could not be brought up; what was made of it is removed."""


@dataclass
class ClusterRecord:
    """What one local cluster owns; saved before anything is created."""

    prefix: str
    lan: str
    servers: list[dict] = field(default_factory=list)  # index, netns, address, holder
    state: str = "building"  # building -> up
    owner_pid: int = 0
    owner_started: float = 0.0
    # brought up by a run for itself (``cluster.local``): gone with its owner
    for_run: bool = False

    @property
    def directory(self) -> Path:
        return CLUSTERS_DIR / self.prefix

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        tmp = self.directory / "cluster.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(self.directory / "cluster.json")

    @classmethod
    def load(cls, path: Path) -> ClusterRecord:
        """A record as saved; keys another version of kvfabric added are ignored."""
        data = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def holders_alive(self) -> bool:
        return bool(self.servers) and all(
            s.get("holder") and alive(*s["holder"]) for s in self.servers
        )

    def plan(self) -> LocalClusterPlan:
        import ipaddress

        return plan_local_cluster(
            len(self.servers), self.prefix, ipaddress.ip_network(self.lan), CLUSTERS_DIR
        )


def cluster_records() -> list[ClusterRecord]:
    out = []
    for path in sorted(CLUSTERS_DIR.glob("kc*/cluster.json")):
        with contextlib.suppress(ValueError, TypeError, OSError):
            out.append(ClusterRecord.load(path))
    return out


def running_clusters() -> list[ClusterRecord]:
    return [r for r in cluster_records() if r.state == "up" and r.holders_alive()]


def _up_clusters() -> list[ClusterRecord]:
    """Clusters brought up and not removed (a server of one may have died since)."""
    return [r for r in cluster_records() if r.state == "up"]


def ssh_config_for(address: str) -> Path | None:
    """The ``ssh -F`` file of the local cluster that has a server at ``address`` (so
    ``--cluster root@10.251.0.11`` needs nothing else), or None."""
    for rec in _up_clusters():
        if any(s["address"] == address for s in rec.servers):
            return rec.plan().ssh_config
    return None


def local_cluster_of(address: str) -> str | None:
    """The local cluster that has a server at ``address``, or None."""
    for rec in _up_clusters():
        if any(s["address"] == address for s in rec.servers):
            return rec.prefix
    return None


def local_server_dir(address: str) -> Path | None:
    """The folder of the running local cluster's server at ``address`` (its Open
    vSwitch's run folder is ``ovs-run`` in it), or None."""
    for rec in _up_clusters():
        for s in rec.plan().servers:
            if s.address == address:
                return s.directory
    return None


def _require() -> None:
    if not is_root():
        raise EnvironmentProblem("a local cluster needs root", "sudo kvfabric cluster local up N")
    if not Path(SSHD).exists():
        raise EnvironmentProblem("sshd is not installed", "sudo apt-get install openssh-server")
    if not Path(OVS_CTL).exists():
        raise EnvironmentProblem(
            "Open vSwitch is not installed", "sudo apt-get install openvswitch-switch"
        )


def _in_use_networks() -> list[str]:
    out = []
    for args in (["ip", "-j", "-4", "addr"], ["ip", "-j", "-4", "route"]):
        proc = run(args)
        for item in json.loads(proc.stdout or "[]"):
            for a in item.get("addr_info", []):
                out.append(f"{a['local']}/{a['prefixlen']}")
            if "dst" in item and item["dst"] != "default":
                out.append(item["dst"])
    return out


def _check(args: list[str], what: str, stdin: str | None = None) -> None:
    proc = run(args, input=stdin)
    if proc.returncode != 0:
        raise ClusterError(f"{what}: {' '.join(args)}: {(proc.stderr or proc.stdout).strip()}")


def up(n: int, say: Callable[[str], None] = log.info, for_run: bool = False) -> ClusterRecord:
    """Start ``n`` servers; on any failure (Ctrl-C included) remove what was made.
    ``for_run``: a run's own cluster, which ``clean`` removes once the run is gone."""
    _require()
    taken = {r.prefix for r in cluster_records()}
    plan = plan_local_cluster(
        n, new_cluster_prefix(taken), free_lan(_in_use_networks()), CLUSTERS_DIR
    )
    me = psutil.Process()
    rec = ClusterRecord(
        plan.prefix,
        str(plan.lan),
        owner_pid=me.pid,
        owner_started=me.create_time(),
        for_run=for_run,
    )
    rec.servers = [
        {"index": s.index, "netns": s.netns, "address": s.address, "holder": None}
        for s in plan.servers
    ]
    rec.save()
    try:
        _write_files(plan)
        _make_lan(plan)
        for server in plan.servers:
            say(f"starting server {server.index}/{n}: {server.hostname} at {server.address}")
            holder = _start_server(plan, server)
            rec.servers[server.index - 1]["holder"] = [holder.pid, holder.create_time()]
            rec.save()
        for server in plan.servers:
            _wait_ready(plan, server)
        rec.state = "up"
        rec.save()
        return rec
    except BaseException:
        say("removing the half-built cluster")
        down(rec)
        raise


def _write_files(plan: LocalClusterPlan) -> None:
    _check(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"kvfabric {plan.prefix}",
            "-f",
            str(plan.client_key),
        ],
        "client key",
    )
    (plan.directory / "authorized_keys").write_text(plan.client_key.with_suffix(".pub").read_text())
    public = {}
    for s in plan.servers:
        s.directory.mkdir(mode=0o700, parents=True)
        for source in s.ovs_dirs.values():
            source.mkdir()
        _check(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                s.hostname,
                "-f",
                str(s.host_key),
            ],
            "host key",
        )
        public[s.index] = s.host_key.with_suffix(".pub").read_text()
        s.sshd_config.write_text(sshd_config_text(plan, s))
        (s.directory / "init.sh").write_text(server_init_script(s, OVS_CTL, SSHD))
    plan.known_hosts.write_text(known_hosts_text(plan, public))
    plan.ssh_config.write_text(ssh_config_text(plan))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder


def _make_lan(plan: LocalClusterPlan) -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        ipr.link("add", ifname=plan.bridge, kind="bridge")
        (idx,) = ipr.link_lookup(ifname=plan.bridge)
        ipr.link("set", index=idx, mtu=LAN_MTU, state="up")
        ipr.addr("add", index=idx, address=plan.coordinator_address, prefixlen=plan.lan.prefixlen)


def _start_server(plan: LocalClusterPlan, server: LocalServer) -> psutil.Process:
    from pyroute2 import IPRoute

    _check(["ip", "netns", "add", server.netns], "network namespace")
    peer = f"{server.netns}p"
    with IPRoute() as ipr:
        ipr.link("add", ifname=server.netns, kind="veth", peer=peer)
        (root_side,) = ipr.link_lookup(ifname=server.netns)
        (bridge,) = ipr.link_lookup(ifname=plan.bridge)
        ipr.link("set", index=root_side, master=bridge, mtu=LAN_MTU, state="up")
        (inside,) = ipr.link_lookup(ifname=peer)
        ipr.link("set", index=inside, net_ns_fd=server.netns)
    # Inside the namespace through ip(8), not IPRoute(netns=): pyroute2 forks a copy of
    # this Python process for that, and a signal reaching the copy (its own SIGTERM at
    # close, Ctrl-C) unwound this very function in it, so the copy ran up()'s clean-up
    # and removed the cluster under the real up() (the lost server folder, issue 15).
    _check(
        ["ip", "-n", server.netns, "-batch", "-"],
        "server LAN address",
        stdin=server_lan_batch(server, peer, INSIDE_IFNAME, LAN_MTU, plan.lan.prefixlen),
    )
    script = server.directory / "init.sh"  # written with the other files, before any server
    with open(server.directory / "init.log", "wb") as out:
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                server.netns,
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "--",
                "sh",
                str(script),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    holder = psutil.Process(proc.pid)
    _wait_own_uts(holder, server)
    return holder


def _wait_own_uts(holder: psutil.Process, server: LocalServer, timeout_s: float = 5.0) -> None:
    """Until the holder is in its own UTS namespace, the mark by which ``down`` finds
    every process of the server (one killed before it got there started Open vSwitch
    after ``down`` had looked, and was left behind)."""
    home = _uts_inode(os.getpid())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not holder.is_running() or holder.status() == psutil.STATUS_ZOMBIE:
            log_text = (server.directory / "init.log").read_text().strip()[-300:]
            raise ClusterError(f"server {server.hostname} ended at once: {log_text or 'no log'}")
        if _uts_inode(holder.pid) not in (home, None):
            return
        time.sleep(0.002)
    raise ClusterError(
        f"server {server.hostname} did not enter its namespaces in {timeout_s:.0f} s"
    )


def ssh_base(plan: LocalClusterPlan) -> list[str]:
    return ["ssh", "-F", str(plan.ssh_config)]


def _wait_ready(plan: LocalClusterPlan, server: LocalServer) -> None:
    """Until ssh into the server reaches its own Open vSwitch."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        probe = "hostname && ovs-vsctl -t 2 show >/dev/null && echo ready"
        proc = run([*ssh_base(plan), f"root@{server.address}", probe], timeout=10)
        if proc.returncode == 0 and proc.stdout.split() == [server.hostname, "ready"]:
            return
        last = (proc.stderr or proc.stdout).strip()
        time.sleep(0.3)
    logs = " | ".join(
        (server.directory / f).read_text().strip()[-300:]
        for f in ("init.log", "ovs-start.log", "sshd.log")
        if (server.directory / f).exists()
    )
    raise ClusterError(
        f"server {server.hostname} not ready in {READY_TIMEOUT_S:.0f} s "
        f"(ssh: {last or 'no answer'}; its logs: {logs or 'empty'})"
    )


def power_off(rec: ClusterRecord, index: int) -> int:
    """Server ``index`` (1-based) of ``rec`` dies as a machine losing power: every
    process in it is killed at once (SIGKILL), its namespace and its port on the LAN
    are gone. Returns how many processes were killed. (Failure injection for labs and
    tests; ``down`` still removes the rest.)"""
    s = next(s for s in rec.servers if s["index"] == index)
    pids = [int(p) for p in run(["ip", "netns", "pids", s["netns"]]).stdout.split()]
    mine = {_uts_inode(pid) for pid in pids} - {None, _uts_inode(os.getpid())}
    procs = _processes_in(mine)  # type: ignore[arg-type]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=5)
    run(["ip", "netns", "del", s["netns"]])
    run(["ip", "link", "del", s["netns"]])
    return len(procs)


# ----- removal -----------------------------------------------------------
def _uts_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/uts").st_ino
    except OSError:
        return None


def _processes_in(uts_inodes: set[int]) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        if _uts_inode(proc.pid) in uts_inodes:
            out.append(proc)
    return out


def down(rec: ClusterRecord, say: Callable[[str], None] = log.info) -> list[str]:
    """Remove every process, namespace, interface and file of cluster ``rec``."""
    removed: list[str] = []
    netns = set(_netns_names())
    pids = [s["holder"][0] for s in rec.servers if s.get("holder") and alive(*s["holder"])]
    for s in rec.servers:  # also what outlived its holder (Open vSwitch, Mininet's shells)
        if s["netns"] in netns:
            pids += [int(p) for p in run(["ip", "netns", "pids", s["netns"]]).stdout.split()]
    mine = {_uts_inode(pid) for pid in pids} - {None, _uts_inode(os.getpid())}
    procs = _processes_in(mine)  # type: ignore[arg-type]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _, still_running = psutil.wait_procs(procs, timeout=5)
    for p in still_running:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(still_running, timeout=5)
    if procs:
        removed.append(f"{len(procs)} processes of cluster {rec.prefix}")
    for s in rec.servers:
        if s["netns"] in netns and run(["ip", "netns", "del", s["netns"]]).returncode == 0:
            removed.append(f"namespace {s['netns']}")
    for name in _interfaces():
        if (
            owned_cluster(name.removesuffix("p")) == rec.prefix
            and run(["ip", "link", "del", name]).returncode == 0
        ):
            removed.append(f"interface {name}")
    if rec.directory.exists():
        shutil.rmtree(rec.directory, ignore_errors=True)
        removed.append(f"directory {rec.directory}")
    for line in removed:
        say(f"removed {line}")
    return removed


def _netns_names() -> list[str]:
    proc = run(["ip", "-j", "netns", "list"])
    return [item["name"] for item in json.loads(proc.stdout or "[]")]


def _interfaces() -> list[str]:
    return sorted(os.listdir("/sys/class/net"))


def clean_clusters(force: bool = False) -> tuple[list[str], list[str]]:
    """What ``kvfabric clean`` does for local clusters: remove every one a killed
    ``up`` left half-built or whose servers died, and names without a record; a
    running cluster is kept (``--force`` removes it too)."""
    removed, skipped = [], []
    known = set()
    for rec in cluster_records():
        known.add(rec.prefix)
        owner = alive(rec.owner_pid, rec.owner_started)
        building = rec.state == "building" and owner
        kept = rec.state == "up" and rec.holders_alive() and (owner or not rec.for_run)
        if (building or kept) and not force:
            skipped.append(
                f"local cluster {rec.prefix} ({len(rec.servers)} servers, "
                f"{'being built' if building else 'up'}; "
                f"kvfabric cluster local down {rec.prefix} removes it); "
                "--force removes it"
            )
            continue
        removed += down(rec, say=lambda _line: None)
    orphans = {owned_cluster(n.removesuffix("p")) for n in _interfaces() + _netns_names()}
    for prefix in sorted(p for p in orphans if p and p not in known):
        if (CLUSTERS_DIR / prefix / "cluster.json").exists():  # a record this cannot read
            skipped.append(
                f"local cluster {prefix} (its record in {CLUSTERS_DIR / prefix} "
                "could not be read; cluster local down removes it)"
            )
            continue
        removed += down(
            ClusterRecord(
                prefix,
                "",
                servers=[
                    {"index": 0, "netns": n, "address": "", "holder": None}
                    for n in _netns_names()
                    if owned_cluster(n) == prefix
                ],
            ),
            say=lambda _line: None,
        )
    return removed, skipped

"""Scoped cleanup: remove what kvfabric runs left behind, and nothing else.

A run records itself in ``STATE_DIR/<prefix>.json`` before it creates
anything. Leftovers are the bridges and interfaces whose names carry a
kvfabric run prefix (see ``naming``) and the processes a dead run recorded
(matched by pid *and* start time, never by name). A run whose owner process
is still alive is left alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .naming import owned
from .processes import STATE_DIR, alive, run

log = logging.getLogger("kvfabric.cleanup")


@dataclass
class RunRecord:
    """What one run owns; written before the first resource is created."""

    prefix: str
    owner_pid: int
    owner_started: float
    processes: list[tuple[int, float]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    # other servers of a cluster run: [user@host, ssh_config or None, local cluster or
    # None] (swept by ssh; a local cluster's server removed since has nothing left)
    servers: list[list] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.prefix}.json"

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.__dict__))
        tmp.replace(self.path)

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)

    @classmethod
    def mine(cls, prefix: str) -> RunRecord:
        me = psutil.Process()
        return cls(prefix, me.pid, me.create_time())

    def owner_alive(self) -> bool:
        return alive(self.owner_pid, self.owner_started)


def records() -> list[RunRecord]:
    out = []
    for path in sorted(STATE_DIR.glob("kf*.json")):
        try:
            data = json.loads(path.read_text())
            data["processes"] = [tuple(p) for p in data.get("processes", [])]
            out.append(RunRecord(**data))
        except (ValueError, TypeError):
            continue
    return out


def bridges() -> list[str]:
    proc = run(["ovs-vsctl", "-t", "5", "list-br"]) if shutil.which("ovs-vsctl") else None
    return proc.stdout.split() if proc and proc.returncode == 0 else []


def interfaces() -> list[str]:
    """Interface names in this (root) network namespace."""
    return sorted(os.listdir("/sys/class/net"))


def taken_prefixes() -> set[str]:
    names = bridges() + interfaces()
    return {p for p in map(owned, names) if p} | {r.prefix for r in records()}


def remove_prefix(prefix: str, record: RunRecord | None = None) -> list[str]:
    """Remove every bridge, interface, process and path of run ``prefix``.
    Returns a line per thing removed."""
    removed = []
    for proc_pid, started in record.processes if record else []:
        if alive(proc_pid, started):
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(proc_pid)
                p.kill()
                p.wait(timeout=5)
                removed.append(f"process {proc_pid}")
    for br in bridges():
        if owned(br) == prefix and run(["ovs-vsctl", "--if-exists", "del-br", br]).returncode == 0:
            removed.append(f"bridge {br}")
    for intf in interfaces():
        if owned(intf) == prefix and run(["ip", "link", "del", intf]).returncode == 0:
            removed.append(f"interface {intf}")
    for path in record.paths if record else []:
        if Path(path).exists():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"directory {path}")
    missed: list[str] = []
    if record and record.servers:
        swept, missed = _sweep_servers(prefix, record.servers)
        removed += swept
    if record and not missed:
        record.forget()  # kept while a server could not be swept: clean tries it again
    return removed


def _sweep_servers(prefix: str, servers: list[list]) -> tuple[list[str], list[str]]:
    """Sweep a cluster run's other servers: (what was removed, the servers that could
    not be reached, each with why)."""
    from .cluster.ssh import Server
    from .cluster.sweep import sweep_server

    swept, missed = [], []
    for dest, config, *rest in servers:
        user, host = dest.split("@", 1)
        cluster = rest[0] if rest else None  # a local cluster's server: gone with it
        if cluster and not (STATE_DIR / "clusters" / cluster / "cluster.json").exists():
            continue
        try:
            swept += sweep_server(Server(host, user, Path(config) if config else None), prefix)
        except OSError as exc:
            log.warning(
                "run %s: server %s unreachable (%s); kvfabric clean tries again", prefix, dest, exc
            )
            missed.append(f"{dest} ({exc})")
    return swept, missed


SCRATCH_PREFIX = "kvf-run-"


def scratch_dir() -> Path:
    """A run's own temporary folder (short, for Unix sockets), named after the process
    that owns it (``kvf-run-<pid>-<start>-``), so ``clean`` can tell one a killed run
    left from one in use."""
    me = psutil.Process()
    stamp = f"{SCRATCH_PREFIX}{me.pid}-{int(me.create_time() * 100)}-"
    return Path(tempfile.mkdtemp(prefix=stamp))


def stale_scratch(root: Path | None = None) -> list[Path]:
    """Scratch folders (``scratch_dir``) whose owning process is gone."""
    out = []
    for path in sorted((root or Path(tempfile.gettempdir())).glob(f"{SCRATCH_PREFIX}*")):
        parts = path.name[len(SCRATCH_PREFIX) :].split("-")
        if len(parts) < 3 or not (parts[0].isdigit() and parts[1].isdigit()):
            continue  # not one of ours (an older run's name): left alone
        if not alive(int(parts[0]), int(parts[1]) / 100):
            out.append(path)
    return out


def clean(force: bool = False) -> tuple[list[str], list[str]]:
    """Remove leftovers of kvfabric runs that are no longer running.

    Returns (removed, skipped): skipped names runs still alive (``force``
    removes those too)."""
    by_prefix = {r.prefix: r for r in records()}
    found = set(by_prefix) | {p for p in map(owned, bridges() + interfaces()) if p}
    removed, skipped = [], []
    for prefix in sorted(found):
        record = by_prefix.get(prefix)
        if record and record.owner_alive() and not force:
            skipped.append(
                f"run {prefix} (pid {record.owner_pid} is still running); --force removes it"
            )
            continue
        removed += remove_prefix(prefix, record)
        if record and record.path.exists():
            skipped.append(
                f"run {prefix}'s leftovers on {', '.join(d[0] for d in record.servers)}"
                ": a server did not answer; kvfabric clean tries again"
            )
    for path in stale_scratch():
        shutil.rmtree(path, ignore_errors=True)
        removed.append(f"directory {path}")
    removed += _stale_ssl()
    from .cluster.local import clean_clusters  # a local cluster's record sits in STATE_DIR too

    cluster_removed, cluster_skipped = clean_clusters(force)
    return removed + cluster_removed, skipped + cluster_skipped


def _stale_ssl() -> list[str]:
    """Open vSwitch's SSL setting, if a killed run left it pointing at its removed
    PKI (``kvf-tls-`` folders: ``controller.tls``)."""
    if not shutil.which("ovs-vsctl"):
        return []
    proc = run(["ovs-vsctl", "-t", "5", "get-ssl"])
    key = next(
        (
            line.split(":", 1)[1].strip()
            for line in proc.stdout.splitlines()
            if line.startswith("Private key:")
        ),
        "",
    )
    if "kvf-tls-" not in key or Path(key).exists():
        return []
    run(["ovs-vsctl", "-t", "5", "del-ssl"])
    return [f"Open vSwitch SSL setting (a dead run's {key})"]

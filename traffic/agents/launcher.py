"""Starting and stopping agent workers, and talking to them.

``assign_hosts`` (pure) splits the hosts of a run into at most ``processes``
groups, keeping each GPU server's hosts in one worker. ``Workers`` starts one
``traffic.agents.worker`` process per group in this machine's root namespace
(each enters its hosts' namespaces only to make their sockets; with ``spill_s``, each
spills its finished records to ``<agents>/<name>.spill.jsonl``), waits until each
answers on its control socket, and stops them all on ``close`` (stop, then
terminate, then kill), also after a failure half-way. Each worker dies with the
process that started it (``PR_SET_PDEATHSIG``), so a runner killed with SIGKILL
leaves no agent behind.

With ``sites`` (one ``sites.WorkerSite`` or None per group), a group's worker is
started through that site's command prefix (ssh for another machine) and
controlled over TCP on the site's cluster address, authenticated with a secret
made for this ``Workers`` (``auth``, ``channel``); the others as above.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..wire import decode, encode
from . import auth
from .channel import connect
from .sites import SiteProcess, WorkerSite


class FleetError(RuntimeError):
    """An agent could not be started or controlled; the message names the host."""


def assign_hosts(servers: Sequence[Sequence[str]], processes: int) -> list[list[str]]:
    """Hosts grouped by server (in order) -> at most ``processes`` groups of nearly
    equal size; a server is split only when it alone is larger than a group."""
    if processes < 1:
        raise ValueError(f"processes={processes!r}; must be >= 1")
    hosts = [h for s in servers for h in s]
    if not hosts:
        return []
    bins = min(processes, len(hosts))
    size = math.ceil(len(hosts) / bins)
    groups: list[list[str]] = [[]]
    for server in servers:
        members = list(server)
        if groups[-1] and len(groups[-1]) + len(members) > size and len(groups) < bins:
            groups.append([])
        for h in members:
            if len(groups[-1]) >= size and len(groups) < bins:
                groups.append([])
            groups[-1].append(h)
    return [g for g in groups if g]


class ControlClient:
    """Blocking request/reply on a worker's control socket (one JSON line each way):
    a Unix socket's path, or a TCP address with the run's secret (``auth``)."""

    def __init__(
        self, address: str | tuple[str, int], timeout: float = 10.0, secret: bytes | None = None
    ) -> None:
        if isinstance(address, str):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(address)
            except OSError:
                self.sock.close()
                raise
        elif secret is None:
            raise ValueError(f"a TCP control channel ({address}) needs the run's secret")
        else:
            self.sock = connect(address, secret, timeout)
        self.buf = b""

    def request(self, cmd: str, **kw: Any) -> dict[str, Any]:
        self.send(cmd, **kw)
        return self.reply(cmd)

    def send(self, cmd: str, **kw: Any) -> None:
        self.sock.sendall(encode({"cmd": cmd} | kw))

    def reply(self, cmd: str) -> dict[str, Any]:
        while b"\n" not in self.buf:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the agent closed its control socket")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        reply = decode(line)
        if not reply.get("ok"):
            raise FleetError(f"{cmd}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        self.sock.close()


@dataclass
class WorkerProcess:
    """One running worker: its hosts, process, control and event connections."""

    name: str
    hosts: list[str]
    proc: subprocess.Popen
    control: str | tuple[str, int] | None  # None: a site's worker, not announced yet
    log_path: Path
    client: ControlClient | None = None
    events: ControlClient | None = None
    site: SiteProcess | None = None
    secret: bytes | None = None

    def log_tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text.strip()[-600:] or "(empty log)"


class Workers:
    """The worker processes of one fleet (see the module docstring)."""

    def __init__(
        self,
        agents_dir: Path,
        groups: list[list[dict[str, Any]]],
        cc: str,
        connection: str,
        priority: str,
        ready_timeout_s: float = 20.0,
        stop_grace_s: float = 3.0,
        spill_s: float | None = None,
        sites: Sequence[WorkerSite | None] | None = None,
    ) -> None:
        if sites is not None and len(sites) != len(groups):
            raise ValueError(f"{len(sites)} sites for {len(groups)} groups of hosts")
        self.sites = list(sites) if sites is not None else [None] * len(groups)
        self.secret = auth.new_secret() if any(self.sites) else None
        self.agents_dir = agents_dir
        self.spill_s = spill_s  # None: each worker keeps its records until collect
        self.groups = groups
        self.cc, self.connection, self.priority = cc, connection, priority
        self.ready_timeout_s, self.stop_grace_s = ready_timeout_s, stop_grace_s
        self.all: list[WorkerProcess] = []
        self.of_host: dict[str, WorkerProcess] = {}
        self._sock_dir: Path | None = None
        self._tmp_sock_dir = False

    def start(self) -> None:
        self.agents_dir.mkdir(parents=True, exist_ok=True)
        here = self.agents_dir.resolve()
        if len(str(here)) + 20 < 100:
            self._sock_dir = here
        else:  # AF_UNIX paths are limited to 108 bytes
            self._sock_dir, self._tmp_sock_dir = Path(tempfile.mkdtemp(prefix="kvf-")), True
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        for i, specs in enumerate(self.groups):
            name = f"worker-{i}"
            hosts_file = here / f"{name}.hosts.json"
            hosts_file.write_text(json.dumps(specs))
            control = str(self._sock_dir / f"{name}.sock")
            log_path = here / f"{name}.log"
            site = self.sites[i]
            spill_path = (
                str(here / f"{name}.spill.jsonl") if site is None else site.spill_path(name)
            )
            spill = []
            if self.spill_s and spill_path:
                spill = ["--spill", spill_path, "--spill-s", f"{self.spill_s:g}"]
            args = [
                "--cc",
                self.cc,
                "--connection",
                self.connection,
                "--priority",
                self.priority,
                *spill,
            ]
            hosts = [s["name"] for s in specs]
            with open(log_path, "wb") as logf:
                if site is not None:  # its hosts go on its stdin, after the secret
                    assert self.secret is not None
                    started = SiteProcess(site.argv(args, root), logf, self.secret, specs)
                    w = WorkerProcess(
                        name, hosts, started.proc, None, log_path, site=started, secret=self.secret
                    )
                else:
                    proc = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "traffic.agents.worker",
                            "--hosts",
                            str(hosts_file),
                            *args,
                            "--control",
                            control,
                        ],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=logf,
                        env=env,
                    )
                    w = WorkerProcess(name, hosts, proc, control, log_path)
            self.all.append(w)
            for h in w.hosts:
                self.of_host[h] = w
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        waiting = list(self.all)
        while waiting:
            for w in list(waiting):
                code = w.proc.poll()
                if code is not None:
                    raise FleetError(
                        f"the agent of {', '.join(w.hosts[:8])} exited with code "
                        f"{code} before it listened: {w.log_tail()}"
                    )
                if w.control is None:
                    w.control = self._announced(w)
                    if w.control is None:
                        continue
                try:
                    client = ControlClient(w.control, secret=w.secret)
                except auth.HandshakeError as exc:
                    raise FleetError(
                        f"the agent of {', '.join(w.hosts[:8])} at {w.control} "
                        f"failed the handshake: {exc}"
                    ) from None
                except OSError:
                    continue
                try:
                    client.request("ping")
                except OSError:
                    client.close()
                    continue
                w.client = client
                waiting.remove(w)
            if waiting and time.monotonic() > deadline:
                hosts = ", ".join(h for w in waiting for h in w.hosts[:4])
                raise FleetError(
                    f"agents of {hosts} not listening after {self.ready_timeout_s:g} s: "
                    f"{waiting[0].log_tail()}"
                )
            if waiting:
                time.sleep(0.02)

    def _announced(self, w: WorkerProcess) -> tuple[str, int] | None:
        assert w.site is not None
        try:
            return w.site.address()
        except ValueError as exc:
            raise FleetError(
                f"the agent of {', '.join(w.hosts[:8])} did not announce its "
                f"control port ({exc}): {w.log_tail()}"
            ) from None

    def subscribe(self) -> None:
        for w in self.all:
            assert w.control is not None
            ev = ControlClient(w.control, secret=w.secret)
            ev.request("subscribe")
            ev.sock.setblocking(False)
            w.events = ev

    def end(self, w: WorkerProcess) -> None:
        """Stop one worker's process (terminate, then kill) and close its connections."""
        for client in (w.client, w.events):
            if client is not None:
                client.close()
        w.client = w.events = None
        try:
            if w.proc.poll() is None:
                w.proc.terminate()
                try:
                    w.proc.wait(timeout=self.stop_grace_s)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
                    w.proc.wait(timeout=10)
        finally:
            if w.site is not None:  # the worker's lifeline: behind ssh, it ends there too
                w.site.close_pipes()

    def close(self) -> None:
        """Stop every worker; safe to call twice."""
        try:
            for w in self.all:
                if w.client is not None:
                    with contextlib.suppress(OSError, FleetError, ValueError):
                        w.client.request("stop")
        finally:
            for w in self.all:
                with contextlib.suppress(Exception):  # keep stopping the others
                    self.end(w)
            if self._tmp_sock_dir and self._sock_dir is not None:
                shutil.rmtree(self._sock_dir, ignore_errors=True)
                self._tmp_sock_dir = False

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.all]

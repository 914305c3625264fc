"""Start the controller as its own process, wait until it is ready, stop it.

``ControllerProcess`` is a context manager that owns the process, its config
file and its socket; its exit stops the process (SIGTERM, then SIGKILL).

If ``KVFABRIC_CONTROLLER_LOGS`` names a folder, every stopped controller's
``controller.log`` is copied there (the integration tests check each one for a
traceback, wherever its run directory was).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from topologies import Fabric
from topologies.processes import die_with_parent

from .adaptive import poll_interval
from .channel import ChannelClient
from .core import plain_params
from .policy import compute
from .tls import TlsFiles

LOG_COPY_ENV = "KVFABRIC_CONTROLLER_LOGS"


class ControllerError(RuntimeError):
    """The controller did not come up, or reported an exception."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControllerProcess:
    def __init__(
        self,
        fabric: Fabric,
        policy: str,
        run_dir: Path,
        params: dict[str, Any] | None = None,
        poll_s: float = 0.2,
        detect_ms: dict[tuple[str, int], float] | None = None,
        tls: TlsFiles | None = None,
        listen_host: str = "127.0.0.1",
        time_dilation: float = 1.0,
    ) -> None:
        params = plain_params(dict(params or {}))  # JSON, as the process reads them
        compute(fabric, policy, params=params)  # a bad policy fails here, before any process starts
        poll_interval({"poll_s": poll_s})
        self.fabric = fabric
        self.policy = policy
        self.params = params
        self.run_dir = Path(run_dir)
        self.port = free_port()
        self.socket = self.run_dir / "controller.sock"
        self.log = self.run_dir / "controller.log"
        self.poll_s = poll_s
        self.time_dilation = float(time_dilation)  # wall seconds per real-equivalent one
        self.detect_ms = dict(detect_ms or {})
        self.tls = tls  # a run's PKI: OpenFlow over TLS only (controller.tls)
        if tls is None and not listen_host.startswith("127."):
            raise ValueError(f"plain OpenFlow listens on loopback only, not {listen_host}")
        self.listen_host = listen_host  # a cluster's address: switches on other servers
        self.proc: subprocess.Popen | None = None
        self.client = ChannelClient(str(self.socket))
        self._release = threading.Event()  # lets a keeper thread (``_popen``) end
        self.lives = 0  # processes started so far
        self.down = False  # killed on purpose (crash), not yet restarted
        self._past_events: list[dict] = []  # the event logs of earlier processes
        self._past_errors: list[str] = []

    def __enter__(self) -> ControllerProcess:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 20.0) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config = self.run_dir / "controller.json"
        config.write_text(
            json.dumps(
                {
                    "fabric": self.fabric.to_dict(),
                    "policy": self.policy,
                    "params": self.params,
                    "socket": str(self.socket),
                    "poll_s": self.poll_s,
                    "time_dilation": self.time_dilation,
                    "detect_ms": [
                        [sw, port, ms] for (sw, port), ms in sorted(self.detect_ms.items())
                    ],
                    "listen_host": self.listen_host,
                }
            )
        )
        self.lives += 1
        self.down = False
        with open(self.run_dir / "controller.stderr", "a") as stderr:
            self.proc = self._popen(
                [
                    sys.executable,
                    "-m",
                    "controller.main",
                    str(config),
                    str(self.port),
                    str(self.log),
                    *([str(self.tls.folder)] if self.tls else []),
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                preexec_fn=die_with_parent,  # gone with a runner killed by SIGKILL
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ControllerError(f"controller exited at start: {self.tail()}")
            try:
                self.client.status()
                return
            except (OSError, ValueError):
                time.sleep(0.1)
        raise ControllerError(f"controller did not open its channel in {timeout_s:g} s")

    def _popen(self, args: list[str], **kw: Any) -> subprocess.Popen:
        """``Popen`` from a thread that lives as long as the process should: the kernel's
        parent-death signal fires when the *thread* that started a child exits, so a
        controller restarted from the fault injector's thread is started from a keeper
        thread that waits until the process is stopped or crashed."""
        if threading.current_thread() is threading.main_thread():
            return subprocess.Popen(args, **kw)
        started: queue.Queue[subprocess.Popen | BaseException] = queue.Queue()
        release = self._release = threading.Event()

        def keep() -> None:
            try:
                started.put(subprocess.Popen(args, **kw))
            except BaseException as exc:  # handed to the caller
                started.put(exc)
                return
            release.wait()

        threading.Thread(target=keep, name="controller-keeper", daemon=True).start()
        got = started.get()
        if isinstance(got, BaseException):
            raise got
        return got

    def wait_ready(self, timeout_s: float = 30.0) -> dict:
        """Wait until every switch connected and every rule is acknowledged;
        on timeout, name the switches that never connected."""
        deadline = time.monotonic() + timeout_s
        status: dict = {}
        while time.monotonic() < deadline:
            status = self.client.status()
            if status["errors"]:
                raise ControllerError("controller exception: " + status["errors"][0][:2000])
            if status["ready"]:
                return status
            time.sleep(0.05)
        missing = ", ".join(status.get("switches_missing", [])) or "none (rules unacknowledged)"
        raise ControllerError(f"switches did not connect within {timeout_s:g} s: {missing}")

    def errors(self) -> list[str]:
        """Every error reported, earlier processes' included (none asked of a process
        that is down on purpose)."""
        return self._past_errors + ([] if self.down else self.client.status()["errors"])

    def events(self) -> list[dict]:
        """The event log of every process of this controller, in order; each event of a
        restarted one carries ``life`` (1 for the first)."""
        current = [] if self.down else self.client.events()
        if self.lives <= 1 and not self._past_events:
            return current  # never restarted: the log as it always was
        return self._past_events + [e | {"life": self.lives} for e in current]

    def crash(self) -> int:
        """Kill the controller as a crash would (SIGKILL: no goodbye to the switches,
        which keep their flows in secure fail mode). Its event log and errors are read
        first, so the run keeps them. Returns the instant of the kill (monotonic ns)."""
        if self.proc is None or self.down:
            raise ControllerError("the controller is not running")
        try:
            self._past_events += [e | {"life": self.lives} for e in self.client.events()]
            self._past_errors += self.client.status()["errors"]
        except (OSError, ValueError) as exc:
            self._past_errors.append(f"events unreadable before the crash: {exc}")
        t_ns = time.monotonic_ns()
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None
        self._release.set()
        self.socket.unlink(missing_ok=True)
        self.down = True
        return t_ns

    def restart(self, timeout_s: float = 20.0) -> None:
        """Start a new controller process on the same port after ``crash``; the switches
        reconnect on their own (Mininet sets a 1 s maximum reconnection backoff)."""
        if not self.down:
            raise ControllerError("restart follows a crash")
        self.start(timeout_s)

    def tail(self, lines: int = 20) -> str:
        text = ""
        for path in (self.run_dir / "controller.stderr", self.log):
            if path.exists():
                text += "\n".join(path.read_text().splitlines()[-lines:])
        return text

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None
        self._release.set()
        self.socket.unlink(missing_ok=True)
        self._copy_log()

    def _copy_log(self) -> None:
        folder = os.environ.get(LOG_COPY_ENV)
        if not folder or not self.log.exists():
            return
        dest = Path(folder)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.log, dest / f"controller-{os.getpid()}-{time.monotonic_ns()}.log")

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
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from topologies import Fabric
from topologies.system import die_with_parent

from .adaptive import poll_interval
from .channel import ChannelClient
from .policy import compute

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
    ) -> None:
        compute(fabric, policy, params=params)  # a bad policy fails here, before any process starts
        poll_interval({"poll_s": poll_s})
        self.fabric = fabric
        self.policy = policy
        self.params = params or {}
        self.run_dir = Path(run_dir)
        self.port = free_port()
        self.socket = self.run_dir / "controller.sock"
        self.log = self.run_dir / "controller.log"
        self.poll_s = poll_s
        self.proc: subprocess.Popen | None = None
        self.client = ChannelClient(str(self.socket))

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
        config.write_text(json.dumps({
            "fabric": self.fabric.to_dict(), "policy": self.policy, "params": self.params,
            "socket": str(self.socket), "poll_s": self.poll_s,
        }))  # fmt: skip
        with open(self.run_dir / "controller.stderr", "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "controller.main", str(config), str(self.port),
                 str(self.log)],
                stdout=subprocess.DEVNULL, stderr=stderr,
                preexec_fn=die_with_parent,  # gone with a runner killed by SIGKILL
            )  # fmt: skip
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
        return self.client.status()["errors"]

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
        self.socket.unlink(missing_ok=True)
        self._copy_log()

    def _copy_log(self) -> None:
        folder = os.environ.get(LOG_COPY_ENV)
        if not folder or not self.log.exists():
            return
        dest = Path(folder)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.log, dest / f"controller-{os.getpid()}-{time.monotonic_ns()}.log")

"""What a run owns besides the fabric: the machine-wide run lock, the stop flag
that SIGINT/SIGTERM raise, fault injection at run times, and env.json."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from experiments.orchestration.faults import FaultOp, fault_ops
from experiments.orchestration.provenance import git_state
from experiments.spec.config import Fault
from topologies.cleanup import STATE_DIR
from topologies.scale import DEFAULT_SCALE, Scale


class RunBusy(RuntimeError):
    """Another kvfabric run holds the machine."""


class RunLock:
    """One run at a time per machine: an exclusive ``flock`` on
    ``/run/kvfabric/run.lock`` (released by the kernel if the holder dies). The
    file names the holder, so the refusal can say who it is."""

    def __init__(self, experiment: str, path: Path | None = None) -> None:
        self.path = path or STATE_DIR / "run.lock"
        self.experiment = experiment
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunBusy(
                f"another kvfabric run is in progress ({holder}); one run at a time per "
                "machine, so the two cannot disturb each other's measurements. Wait for it "
                "to finish, or stop it with Ctrl-C in its terminal."
            ) from None
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "experiment": self.experiment, "started": time.time()}
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing releases the lock
            self.fd = None


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        started = time.strftime("%H:%M:%S", time.localtime(info["started"]))
        return f"pid {info['pid']}, experiment {info['experiment']}, started {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"


class StopFlag:
    """SIGINT/SIGTERM ask the run to stop: the first sets the flag (the run stops
    sending, collects what was recorded and tears down); a second SIGINT raises
    ``KeyboardInterrupt`` (teardown still runs, in ``finally``). Previous handlers
    are restored on exit."""

    def __init__(self, announce: Any = None) -> None:
        self.signal: int | None = None
        self.announce = announce
        self._old: dict[int, Any] = {}
        self._pid = os.getpid()

    def __bool__(self) -> bool:
        return self.signal is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:  # a forked copy (a library's helper): it just ends
            os._exit(128 + signum)
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum
        if self.announce is not None:
            self.announce(signal.Signals(signum).name)

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


@dataclass
class FaultInjector:
    """Applies ``faults`` (the run's ``config.faults``, ``experiments.orchestration.faults``)
    at ``t0 + at_s`` on a running ``FabricNetwork`` (and its ``ControllerProcess``),
    from a thread; records when each operation took effect and which fault it was
    part of. ``agent_kill`` is the agents' coordinator's to carry out (``agent_kills``).
    ``scale``: ``at_s`` is real-equivalent; it falls at ``t0 + at_s × d`` on the wall
    clock."""

    net: Any
    faults: Sequence[Fault]
    controller: Any = None
    scale: Scale = DEFAULT_SCALE
    applied: list[dict[str, Any]] = field(default_factory=list)
    _cancel: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _helpers: list[threading.Thread] = field(default_factory=list)

    def start(self, t0_ns: int) -> None:
        ops = [op for op in fault_ops(self.faults, self.net.fabric) if op.event != "agent_kill"]
        if not ops:
            return
        self._thread = threading.Thread(target=self._run, args=(t0_ns, ops), daemon=True)
        self._thread.start()

    def _run(self, t0_ns: int, ops: list[FaultOp]) -> None:
        for op in ops:
            due = t0_ns + round(self.scale.wall_s(op.at_s) * 1e9)
            if self._cancel.wait(max(0.0, (due - time.monotonic_ns()) / 1e9)):
                return
            if op.event == "controller_up":  # a restart takes a second: the timeline goes on
                helper = threading.Thread(target=self._carry_out, args=(op, due), daemon=True)
                self._helpers.append(helper)
                helper.start()
            else:
                self._carry_out(op, due)

    def _carry_out(self, op: FaultOp, due: int) -> None:
        row: dict[str, Any] = {"at_s": op.at_s, "event": op.event, "fault": op.fault}
        start = time.monotonic_ns()  # time zero of the fault's timings
        error = ""
        try:
            row |= self._apply(op)
        except Exception as exc:  # recorded, and the run goes on
            error = f"{type(exc).__name__}: {exc}"
        done = time.monotonic_ns()
        start = row.pop("t_start_ns", start)
        self.applied.append(
            row
            | {
                "t_start_ns": start,
                "t_ns": done,
                "late_ms": (start - due) / 1e6,
                "ok": not error,
                "error": error,
            }
        )

    def _apply(self, op: FaultOp) -> dict[str, Any]:
        """Carry out ``op``; what the row records besides the common timing keys."""
        if op.event in ("link_down", "link_up"):
            assert op.link is not None
            self.net.set_link(*op.link, up=op.up)
            return {"link": list(op.link)}
        if op.event == "link_degrade":
            assert op.link is not None and op.gbps is not None
            self.net.set_rate(*op.link, op.gbps)
            return {"link": list(op.link), "gbps": op.gbps}
        if self.controller is None:
            raise RuntimeError(f"{op.event}: no controller process to act on")
        if op.event == "controller_down":
            return {"target": "controller", "t_start_ns": self.controller.crash()}
        self.controller.restart()
        self.controller.wait_ready(timeout_s=60)
        ready = [e for e in self.controller.events() if e.get("event") == "ready"]
        return {"target": "controller", "ready_ns": ready[-1]["t_ns"] if ready else None}

    def stop(self) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=90)
        for helper in self._helpers:
            helper.join(timeout=90)
        self.applied.sort(key=lambda row: row["t_start_ns"])


def _version(args: list[str]) -> str | None:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else ""


def _package(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def env_info(datapath: str | None = None) -> dict[str, Any]:
    """What the results depend on: kernel, Python, Mininet, OVS, os-ken, datapath,
    kernel capabilities, git revision, CPU count (``env.json``)."""
    from topologies.machine import capabilities, mininet_version

    try:
        caps = capabilities().as_json()["capabilities"]
    except Exception as exc:  # env.json must not fail a run
        caps = {"error": str(exc)}
    return {
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "mininet": mininet_version(),
        "ovs": _version(["ovs-vswitchd", "--version"]),
        "os_ken": _package("os-ken"),
        "scapy": _package("scapy"),
        "pyroute2": _package("pyroute2"),
        "datapath": datapath,
        "capabilities": caps,
        **git_state(),  # None, None outside a git checkout
        "cpu_count": os.cpu_count(),
        "hostname": platform.node(),
    }

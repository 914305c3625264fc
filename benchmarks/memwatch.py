"""The soak's watcher: a thread in the runner's own process that, every ``period_s``,
records the memory of the run's processes and the size on disk of its folders.

The processes are found as this process's descendants (``psutil``) and named by their
command line, so the runner needs no hook: ``coordinator`` (this process: the runner,
the agents' coordinator and the serving driver), ``controller`` (``controller.main``),
``sampler`` (``experiments.measurement.sampler_process``) and one ``agents worker-N``
per agent process (``traffic.agents.worker``, named by its control socket). Mininet's
host shells and anything else are not watched. The folders: the run's own folder
(the newest under ``runs_dir``) and its scratch folder (the controller's and samplers'
logs until the run copies them; found from the controller's command line).

Its cost: one scan of /proc and one ``smaps_rollup`` read per watched process every
``period_s``; its samples stay in this process (tuples, under 1 MB for an hour), so
they count, negligibly, in the coordinator's figure.
"""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

import psutil

MODULES = {
    "controller.main": "controller",
    "experiments.measurement.sampler_process": "sampler",
    "traffic.agents.worker": "agents",
}


def module_of(cmdline: list[str]) -> str | None:
    """The module a ``python -m MODULE`` command line runs, else None."""
    try:
        return cmdline[cmdline.index("-m") + 1]
    except (ValueError, IndexError):
        return None


def component_of(cmdline: list[str]) -> str | None:
    """What a descendant of the runner is, from its command line; None: not watched.
    An agent worker is named by its control socket (``--control …/worker-0.sock``)."""
    name = MODULES.get(module_of(cmdline) or "")
    if name != "agents":
        return name
    try:
        control = cmdline[cmdline.index("--control") + 1]
    except (ValueError, IndexError):
        return "agents"
    return f"agents {Path(control).stem}"


def scratch_of(cmdline: list[str]) -> Path | None:
    """The run's scratch folder from the controller's command line (its config file,
    ``<scratch>/controller/controller.json``, follows the module)."""
    if module_of(cmdline) != "controller.main":
        return None
    i = cmdline.index("-m") + 2
    return Path(cmdline[i]).parents[1] if i < len(cmdline) else None


def disk_bytes(folder: Path) -> int:
    """Bytes a folder's files occupy on disk (allocated blocks), files that vanish
    while it is walked left out; 0 for a missing folder."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _memory(proc: psutil.Process) -> tuple[float, float]:
    """(RSS, USS) in bytes; USS NaN where it cannot be read."""
    try:
        full = proc.memory_full_info()
        return float(full.rss), float(full.uss)
    except psutil.AccessDenied:
        return float(proc.memory_info().rss), math.nan


class ProcessWatch(threading.Thread):
    """``memory``: (t_ns, component, rss_bytes, uss_bytes) tuples; ``folders``:
    (t_ns, run_bytes, scratch_bytes). ``t_ns`` is ``time.monotonic_ns()``, the clock of
    the run's t0_ns. Stop it with ``stop()``; it is a daemon, so it never keeps the
    interpreter alive."""

    def __init__(self, runs_dir: Path, period_s: float = 5.0) -> None:
        super().__init__(name="soak-watch", daemon=True)
        self.runs_dir, self.period_s = Path(runs_dir), period_s
        self.before = set(self._run_dirs())
        self.memory: list[tuple[int, str, float, float]] = []
        self.folders: list[tuple[int, int, int]] = []
        self.run_dir: Path | None = None
        self._halt = threading.Event()
        self._me = psutil.Process()

    def _run_dirs(self) -> list[Path]:
        return [p for p in self.runs_dir.glob("*") if p.is_dir()] if self.runs_dir.is_dir() else []

    def run(self) -> None:
        while not self._halt.wait(self.period_s):
            self.sample()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=self.period_s + 5)

    def sample(self) -> None:
        t_ns = time.monotonic_ns()
        scratch = None
        watched = [(self._me, "coordinator")]
        for child in self._me.children(recursive=True):
            try:
                cmdline = child.cmdline()
            except psutil.Error:
                continue
            scratch = scratch or scratch_of(cmdline)
            name = component_of(cmdline)
            if name is not None:
                watched.append((child, name))
        for proc, name in watched:
            try:
                rss, uss = _memory(proc)
            except psutil.Error:  # it ended between the scan and the read
                continue
            self.memory.append((t_ns, name, rss, uss))
        if self.run_dir is None:
            new = [p for p in self._run_dirs() if p not in self.before]
            self.run_dir = max(new, key=lambda p: p.stat().st_mtime) if new else None
        run_bytes = disk_bytes(self.run_dir) if self.run_dir else 0
        self.folders.append((t_ns, run_bytes, disk_bytes(scratch) if scratch else 0))

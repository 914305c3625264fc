"""The machine's stalls beside a trial, measured by ``cyclictest`` (rt-tests): one
real-time thread per CPU wakes every millisecond and records each wake-up later than a
trigger, with its CLOCK_MONOTONIC instant (the clock the agents stamp their starts with).

A SCHED_FIFO thread preempts every process a run starts (controller, Open vSwitch and
agents are all SCHED_OTHER), so a late wake is a stretch in which nothing in user space
could run on that CPU: the hypervisor took the CPU (steal) or the kernel held it (this
kernel is PREEMPT_NONE, HZ 250). Steal averaged over a trial hides such stretches: 6 % of
a 3-second trial is a few stalls of 5–20 ms, each enough to make an agent start late.

    with StallProbe() as probe:
        ...                                   # the trial
    probe.stalls                              # [Stall(cpu, end_ns, us), ...]

Without ``cyclictest`` the probe records nothing and says so (``error``); a trial never
fails for want of it."""

from __future__ import annotations

import logging
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Self

log = logging.getLogger("kvfabric.stalls")

PROBE_PRIORITY = 80  # SCHED_FIFO: above every process of a run
INTERVAL_US = 1000  # each probe thread wakes this often
TRIGGER_US = 1000  # a wake-up later than this is a stall
MAX_STALLS = 100_000  # cyclictest keeps at most this many (its --spike-nodes)
_SPIKE = re.compile(r"T:\s*(\d+)\s+Spike:\s*(\d+):\s*TS:\s*(\d+)")


@dataclass(frozen=True)
class Stall:
    """One late wake-up of the probe on ``cpu``: it woke at ``end_ns`` (monotonic), ``us``
    microseconds after it was due: nothing in user space ran on that CPU in between."""

    cpu: int
    end_ns: int
    us: int

    @property
    def start_ns(self) -> int:
        return self.end_ns - self.us * 1000


def parse_spikes(text: str) -> list[Stall]:
    """cyclictest's ``--spike`` lines (``T: 0 Spike: 6556: TS: 51748032062``: thread,
    latency in µs, monotonic wake instant in µs), in the order printed."""
    return [
        Stall(cpu=int(t), end_ns=int(ts) * 1000, us=int(us)) for t, us, ts in _SPIKE.findall(text)
    ]


class StallProbe:
    """``cyclictest`` on every CPU for the life of the context; ``stalls`` after it."""

    def __init__(self, trigger_us: int = TRIGGER_US, interval_us: int = INTERVAL_US) -> None:
        self.trigger_us = trigger_us
        self.interval_us = interval_us
        self.stalls: list[Stall] = []
        self.error: str | None = None
        self.started_ns = self.stopped_ns = 0
        self._proc: subprocess.Popen[str] | None = None
        self._out: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def measured(self) -> bool:
        """Whether the probe ran for the whole context (its absence is not 'no stalls')."""
        return self.error is None and self.stopped_ns > 0

    def __enter__(self) -> Self:
        exe = shutil.which("cyclictest")
        if exe is None:
            self.error = "cyclictest not installed (Debian package rt-tests)"
            return self
        cmd = [exe, "-t", "-a", "-d", "0", "-q", "-m", "--laptop"]
        cmd += [f"-p{PROBE_PRIORITY}", f"-i{self.interval_us}"]
        cmd += [f"--spike={self.trigger_us}", f"--spike-nodes={MAX_STALLS}"]
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self._reader = threading.Thread(target=self._read, name="kvfabric-stalls", daemon=True)
        self._reader.start()
        time.sleep(0.05)  # its threads are up and pinned before the trial starts
        self.started_ns = time.monotonic_ns()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._out.extend(self._proc.stdout)

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        self.stopped_ns = time.monotonic_ns()
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # prints the spikes it kept, then exits
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.error = "cyclictest did not exit on SIGINT"
        finally:
            if self._reader is not None:
                self._reader.join(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()
            self._proc = None
        text = "".join(self._out)
        if proc.returncode not in (0, -signal.SIGINT) and self.error is None:
            self.error = f"cyclictest exited {proc.returncode}: {text.strip()[-200:]}"
        self.stalls = [s for s in parse_spikes(text) if s.end_ns >= self.started_ns]
        if self.error:
            log.warning("stall probe: %s", self.error)

"""Hold the CPUs' wake-up latency at 0 µs for the life of an emulation (Linux PM QoS,
``/dev/cpu_dma_latency``: the request stands while the file stays open, and the kernel
drops it when the file is closed, by this process or by its death).

Why: an idle CPU that halts must be woken before an agent's timer can fire. In a VM the
halt is an exit to the hypervisor, which schedules the vCPU back when it likes. Measured
on the 2-vCPU VM of this project (cpuidle driver ``haltpoll``), ``cyclictest`` at
real-time priority, 8 s, 3 runs each: wake-ups later than 2 ms were 93–172 with idle
CPUs free to halt and 29–42 with this request held; ``kvfabric calibrate --quick``
refused at 14 Mbit/s on lateness in 2 of 2 tries without it and passed in 2 of 2 with it.
Held, an idle CPU polls instead of halting: it is counted idle, and the run's CPU figures
do not change; the host machine spends the polling. What remains are the hypervisor's
own preemptions (steal), which no guest setting removes."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

log = logging.getLogger("kvfabric.wakeup")

PM_QOS_DEVICE = Path("/dev/cpu_dma_latency")


class WakeupLatency:
    """One PM QoS request for at most ``us`` µs of CPU wake-up latency."""

    def __init__(self, us: int = 0, device: Path = PM_QOS_DEVICE) -> None:
        if us < 0:
            raise ValueError(f"us={us}: a wake-up latency is ≥ 0 µs")
        self.us = us
        self.device = device
        self.error: str | None = None
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def hold(self) -> bool:
        """Make the request (idempotent); False, with ``error``, where the kernel has no
        PM QoS device or refuses it: the run goes on without it."""
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.device, os.O_WRONLY)
        except OSError as exc:
            self.error = f"{self.device}: {exc.strerror or exc}"
            log.info("CPU wake-up latency not held: %s", self.error)
            return False
        try:
            os.write(fd, struct.pack("=i", self.us))
        except OSError as exc:
            os.close(fd)
            self.error = f"{self.device}: {exc.strerror or exc}"
            log.info("CPU wake-up latency not held: %s", self.error)
            return False
        self._fd, self.error = fd, None
        return True

    def release(self) -> None:
        """Withdraw the request (closing the file is what withdraws it); idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def describe(self) -> dict[str, object]:
        """What a run records of it (``env.json``)."""
        return {"held_us": self.us if self.held else None, "error": self.error}

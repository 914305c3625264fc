"""How far a server's clock is from this machine's: Cristian/NTP-style estimates
from timed exchanges over one ssh session.

A sample is ``(t_send_ns, t_remote_ns, t_recv_ns)``: this machine's clock just
before asking, the server's reading, this machine's clock on the answer. The
server read its clock somewhere inside ``[t_send, t_recv]``, so the offset
(server minus here) is ``t_remote - (t_send + t_recv) / 2`` to within half the
round trip. The sample(s) with the smallest round trip bound it tightest.

The run's tables stamp events with ``time.monotonic_ns()``, so the monotonic
offset is what corrects one-way delays measured across machines; the realtime
offset says whether the machines' wall clocks agree (NTP).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .ssh import Server

Sample = tuple[int, int, int]  # (t_send_ns, t_remote_ns, t_recv_ns)
CLOCKS: dict[str, Callable[[], int]] = {"monotonic": time.monotonic_ns, "realtime": time.time_ns}
# Each line read is answered with the named clock's reading, at once.
_REMOTE_LOOP = (
    "import sys, time\n"
    "clock = time.{fn}\n"
    "while sys.stdin.readline():\n"
    "    sys.stdout.write(str(clock()) + '\\n')\n"
    "    sys.stdout.flush()\n"
)
_REMOTE_FN = {"monotonic": "monotonic_ns", "realtime": "time_ns"}


class ClockError(RuntimeError):
    """A server's clock could not be read (ssh failed, no python3 there, no answer)."""


@dataclass(frozen=True)
class ClockOffset:
    """A server's clock minus this machine's, ``offset_ns`` ± ``uncertainty_ns``."""

    offset_ns: float
    uncertainty_ns: float  # half the smallest round trip: the true offset is within it
    rtt_ns: int  # the smallest round trip
    samples: int

    def __str__(self) -> str:
        return f"{self.offset_ns / 1e6:+.3f} ms ± {self.uncertainty_ns / 1e6:.3f} ms"


def offset_estimate(samples: Sequence[Sample]) -> ClockOffset:
    """The offset from the smallest-round-trip sample(s) (their mean when tied)."""
    if not samples:
        raise ValueError("no clock samples: at least one (t_send, t_remote, t_recv) is needed")
    for t_send, _, t_recv in samples:
        if t_recv < t_send:
            raise ValueError(
                f"clock sample received at {t_recv} ns before it was sent "
                f"at {t_send} ns: the local clock must not go back"
            )
    rtt = min(t_recv - t_send for t_send, _, t_recv in samples)
    best = [(s, r, e) for s, r, e in samples if e - s == rtt]
    offset = sum(r - (s + e) / 2 for s, r, e in best) / len(best)
    return ClockOffset(offset, rtt / 2, rtt, len(samples))


def measure_offset(
    server: Server, n: int = 16, clock: str = "monotonic", timeout_s: float = 15.0
) -> ClockOffset:
    """``n`` timed exchanges over one ssh session to ``server`` (so ssh's start-up is
    in none of them) and their estimate. ``clock`` is ``monotonic`` or ``realtime``."""
    if clock not in CLOCKS:
        raise ValueError(f"clock={clock!r}: must be one of {', '.join(CLOCKS)}")
    if n < 1:
        raise ValueError(f"n={n}: at least one exchange is needed")
    local = CLOCKS[clock]
    code = _REMOTE_LOOP.format(fn=_REMOTE_FN[clock])
    proc = subprocess.Popen(
        server.command(["python3", "-c", code]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    try:
        ask = _Exchange(proc, time.monotonic() + timeout_s)
        ask.reading()  # the first answer waits for ssh and python3 to start: not a sample
        samples = []
        for _ in range(n):
            t_send = local()
            t_remote = ask.reading()
            samples.append((t_send, t_remote, local()))
        return offset_estimate(samples)
    finally:
        _close(proc)


class _Exchange:
    """One request line out, one clock reading back, within a deadline."""

    def __init__(self, proc: subprocess.Popen, deadline: float) -> None:
        self.proc, self.deadline, self.pending = proc, deadline, b""

    def reading(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(b"\n")
        except BrokenPipeError:
            raise ClockError(self._why("the session ended")) from None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ClockError(self._why("no answer in time"))
            chunk = os.read(fd, 256)
            if not chunk:
                raise ClockError(self._why("the session ended"))
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        try:
            return int(line)
        except ValueError:
            raise ClockError(self._why(f"unexpected answer {line[:80]!r}")) from None

    def _why(self, what: str) -> str:
        _stop(self.proc)
        assert self.proc.stderr is not None
        said = self.proc.stderr.read().decode(errors="replace").strip()
        return f"{what}: {said[-300:]}" if said else what


def _stop(proc: subprocess.Popen) -> None:
    """End of input ends the remote loop, then ssh; kill what does not end."""
    if proc.stdin and not proc.stdin.closed:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _close(proc: subprocess.Popen) -> None:
    _stop(proc)
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()

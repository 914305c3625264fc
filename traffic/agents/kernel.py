"""The two kernel facilities the agent worker needs that Python 3.11 lacks:
``setns`` (a socket keeps the network namespace it was created in, so one
process can own the sockets of many emulated hosts) and a timer with
nanosecond resolution for the event loop (epoll waits in whole milliseconds).

- ``netns(path)``: a context manager that moves the calling thread into the
  network namespace at ``path`` (``/proc/<pid>/ns/net`` of a Mininet host) and
  back; ``None`` stays where it is (loopback tests).
- ``PreciseSelector``: ``selectors.EpollSelector`` whose ``select(timeout)``
  wakes at the deadline to the microsecond, from a ``timerfd`` armed at the
  absolute ``CLOCK_MONOTONIC`` instant (the clock of ``time.monotonic_ns``),
  so asyncio's ``call_at`` fires on time without sleeping in the loop.
- ``set_timer_slack`` lets a worker's timers fire on time (``die_with_parent``, so a
  worker never outlives a runner killed with SIGKILL, is ``topologies.processes``'s).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import selectors
import time
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
CLOCK_MONOTONIC = 1
TFD_TIMER_ABSTIME = 1
PR_SET_TIMERSLACK = 29

_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def setns(fd: int) -> None:
    _check(_libc.setns(fd, CLONE_NEWNET), "setns")


@contextlib.contextmanager
def netns(path: str | None) -> Iterator[None]:
    """Run the body in the network namespace at ``path`` (None: stay here)."""
    if path is None:
        yield
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            setns(home)
    finally:
        os.close(home)


def set_timer_slack(ns: int = 1) -> None:
    """The kernel may delay this thread's timers by up to its slack (50 µs by default)."""
    _check(_libc.prctl(PR_SET_TIMERSLACK, int(ns), 0, 0, 0), "prctl(PR_SET_TIMERSLACK)")


class PreciseSelector(selectors.EpollSelector):
    """An epoll selector that wakes at its timeout to the microsecond (see the module
    docstring). The timerfd is registered with epoll once and re-armed per wait."""

    def __init__(self) -> None:
        super().__init__()
        flags = os.O_NONBLOCK | os.O_CLOEXEC
        self._tfd = _check(_libc.timerfd_create(CLOCK_MONOTONIC, flags), "timerfd_create")
        self._spec = _Itimerspec()
        self._armed = False
        self._selector.register(self._tfd, selectors.EVENT_READ)

    def _arm(self, deadline_ns: int) -> None:
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        ptr = ctypes.byref(self._spec)
        _check(_libc.timerfd_settime(self._tfd, TFD_TIMER_ABSTIME, ptr, None), "timerfd_settime")
        self._armed = True

    def select(self, timeout: float | None = None) -> list:
        if timeout is None or timeout <= 0:
            return self._ready(self._poll(-1 if timeout is None else 0))
        self._arm(time.monotonic_ns() + int(timeout * 1e9))
        # The timerfd ends the wait; the epoll timeout (rounded up to ms) is a backstop.
        return self._ready(self._poll(timeout + 0.002))

    def _poll(self, timeout: float) -> list[tuple[int, int]]:
        try:
            return self._selector.poll(timeout, len(self._fd_to_key) + 1)
        except InterruptedError:
            return []

    def _ready(self, events: list[tuple[int, int]]) -> list:
        ready = []
        for fd, mask in events:
            if fd == self._tfd:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._tfd, 8)
                continue
            key = self._fd_to_key.get(fd)
            if key is None:
                continue
            # as selectors.EpollSelector reads the bits
            got = (selectors.EVENT_READ if mask & ~select.EPOLLOUT else 0) | (
                selectors.EVENT_WRITE if mask & ~select.EPOLLIN else 0
            )
            if got & key.events:
                ready.append((key, got & key.events))
        return ready

    def close(self) -> None:
        """Idempotent: the timerfd's number is closed once (a second ``os.close`` would
        close whatever descriptor took the number since)."""
        tfd, self._tfd = self._tfd, -1
        if tfd >= 0:
            with contextlib.suppress(OSError):
                os.close(tfd)
        super().close()

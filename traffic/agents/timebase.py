"""The clock of every instant a worker takes, is given, or writes into a message
header: this machine's ``CLOCK_MONOTONIC`` for a worker beside the coordinator, and,
for a worker on another machine, that machine's monotonic clock less its measured
offset from the coordinator's (``--clock-offset-ns``, ``topologies.cluster.clock``).
So a schedule's instants, the events and the records of every worker are on one
clock, the coordinator's, within the offset's stated uncertainty, and a one-way
delay between hosts of two machines is a difference on that clock.

The event loop's own clock stays the local one: ``loop_time`` turns an instant into
the ``loop.call_at`` time that fires at it.
"""

from __future__ import annotations

import time

_offset_ns = 0  # this machine's monotonic clock minus the coordinator's


def set_offset(offset_ns: int) -> None:
    global _offset_ns
    _offset_ns = int(offset_ns)


def offset() -> int:
    return _offset_ns


def now_ns() -> int:
    """Now, on the coordinator's clock."""
    return time.monotonic_ns() - _offset_ns


def loop_time(t_ns: int) -> float:
    """The event loop's time (``time.monotonic``, seconds) of instant ``t_ns``."""
    return (t_ns + _offset_ns) / 1e9

"""Live traffic: a *driver* decides sends while the run goes on.

A static schedule (``traffic.workloads``) fixes every message before t0, with
dependencies the coordinator resolves. Some workloads cannot be written down in
advance: a request router picks instances from what it knows at the request's
arrival, a decode instance batches whatever requests have their KV cache at the
start of a step, and the next step's collective waits for the previous one.
Those workloads are drivers: pure, event-driven objects that the fleet's
coordinator calls with what happened (the run started, a message was received in
full at a receiver instant, a message failed, a timer came due) and that answer
with new messages to send at absolute ``time.monotonic_ns()`` instants.

A driver never touches sockets or clocks: every instant it sees is an argument,
so it runs unchanged under ``traffic.serving.sim`` (a fluid network model used by
the unit tests) and under the real fleet.

Under time dilation (``scale.time_dilation`` d > 1) the fleet runs a driver through
``Dilated``: the driver keeps living in real-equivalent time (its compute times,
arrivals and tool calls, and so the requests and tokens tables it writes, are real
time), and only the instants that cross the coordinator are converted, ``× d`` on the
way out and ``÷ d`` on the way in, about the run's t0.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from topologies.scale import Scale


@dataclass(frozen=True)
class Message:
    """One message a driver wants sent: ``bytes`` are real-equivalent (the fleet
    applies the bandwidth scale when ``scaled``), ``t_ns`` is the absolute send
    instant (a past instant means "now"). Field meanings as in the schedule."""

    flow_id: int
    kind: str
    src: str
    dst: str
    bytes: int
    t_ns: int
    tenant: str = "default"
    request_id: int = -1
    layer: int = -1
    chunk: int = -1
    step: int = -1
    dscp: int = 0
    proto: str = "tcp"
    scaled: bool = True


class Driver(Protocol):
    """What the fleet's coordinator needs from a live workload."""

    hosts: list[str]  # every host the driver may send from or to
    tenants: list[str]  # every tenant its messages carry

    def start(self, t0_ns: int) -> list[Message]:
        """The run starts at ``t0_ns``."""
        ...

    def on_received(self, flow_id: int, t_end_ns: int) -> list[Message]:
        """One of the driver's messages arrived in full at ``t_end_ns``."""
        ...

    def on_failed(self, flow_id: int, error: str, now_ns: int) -> list[Message]:
        """One of the driver's messages failed (refused, reset, lost)."""
        ...

    def next_timer_ns(self) -> int | None:
        """The next instant the driver wants ``on_timer`` called, if any."""
        ...

    def on_timer(self, now_ns: int) -> list[Message]: ...

    def finished(self) -> bool:
        """True once the driver will send nothing more and waits for nothing."""
        ...

    def finish(self, now_ns: int, why: str) -> None:
        """The run ends now (timeout, interrupt): settle what is still open."""
        ...


class Dilated:
    """``driver`` run ``scale.d`` times slower than real time (see the module docstring):
    what it reads and writes stays real-equivalent; the coordinator sees wall instants.
    Everything besides the driver protocol (its tables, hosts, cache statistics) is the
    driver's own."""

    def __init__(self, driver: Driver, scale: Scale) -> None:
        self.driver, self.scale = driver, scale
        self._t0: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.driver, name)

    def _real(self, wall_ns: int) -> int:
        assert self._t0 is not None, "the driver is not started"
        return self.scale.real_ns(wall_ns, self._t0)

    def _wall(self, messages: list[Message]) -> list[Message]:
        assert self._t0 is not None
        return [replace(m, t_ns=self.scale.wall_ns(m.t_ns, self._t0)) for m in messages]

    def start(self, t0_ns: int) -> list[Message]:
        self._t0 = t0_ns  # the two clocks agree at t0
        return self._wall(self.driver.start(t0_ns))

    def on_received(self, flow_id: int, t_end_ns: int) -> list[Message]:
        return self._wall(self.driver.on_received(flow_id, self._real(t_end_ns)))

    def on_failed(self, flow_id: int, error: str, now_ns: int) -> list[Message]:
        return self._wall(self.driver.on_failed(flow_id, error, self._real(now_ns)))

    def next_timer_ns(self) -> int | None:
        due = self.driver.next_timer_ns()
        return None if due is None or self._t0 is None else self.scale.wall_ns(due, self._t0)

    def on_timer(self, now_ns: int) -> list[Message]:
        return self._wall(self.driver.on_timer(self._real(now_ns)))

    def finished(self) -> bool:
        return self.driver.finished()

    def finish(self, now_ns: int, why: str) -> None:
        self.driver.finish(self._real(now_ns), why)


def dilated(driver: Driver | None, scale: Scale) -> Driver | None:
    """``driver`` as the fleet runs it at ``scale``: itself at d = 1, else ``Dilated``."""
    if driver is None or scale.d == 1:
        return driver
    return Dilated(driver, scale)  # type: ignore[return-value]

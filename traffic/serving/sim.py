"""A fluid network simulator that runs any ``traffic.driver.Driver`` without a network.

Each message is a store-and-forward transfer over one *link*: it starts at
max(its ``t_ns``, the instant its link is free) and is received ``bytes × 8 / rate``
later; the link is busy until then (FIFO by send instant). ``rate_bps(src, dst)`` gives
the real-equivalent rate in bit/s and ``link_key(src, dst)`` names the link a message
occupies (default: the ordered host pair, i.e. every pair has its own pipe; use
``lambda s, d: d`` to model a receiver's downlink shared by many senders). Timers and
receptions are processed in time order (ties: sends, then receptions, then timers).

It ignores protocol overhead, multi-hop contention and packet loss: an analytic
estimate to set beside the measurement, and a way to unit-test drivers.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import pandas as pd

from topologies import Fabric

from ..driver import Driver, Message

FLOW_COLUMNS = [
    "flow_id",
    "kind",
    "tenant",
    "src",
    "dst",
    "bytes",
    "dscp",
    "request_id",
    "layer",
    "step",
    "t_sched_ns",
    "t_start_ns",
    "t_end_ns",
    "fct_ms",
]


@dataclass
class SimResult:
    flows: pd.DataFrame  # one row per message, FLOW_COLUMNS
    end_ns: int  # instant of the last event
    finished: bool  # the driver finished on its own (not cut by ``until_ns``)


def fabric_rate(fabric: Fabric, scale: float = 1.0) -> Callable[[str, str], float]:
    """Rate of a host pair = the slowest link on its first fewest-hop path (bit/s)."""
    cache: dict[tuple[str, str], float] = {}

    def rate(src: str, dst: str) -> float:
        if (src, dst) not in cache:
            path = fabric.shortest_paths(src, dst)[0]
            gbps = min(
                fabric.link_between(a, b).real_gbps for a, b in zip(path, path[1:], strict=False)
            )
            cache[(src, dst)] = gbps * 1e9 * scale
        return cache[(src, dst)]

    return rate


def simulate(
    driver: Driver,
    rate_bps: Callable[[str, str], float],
    *,
    t0_ns: int = 0,
    link_key: Callable[[str, str], Hashable] | None = None,
    until_ns: int | None = None,
    max_events: int = 10_000_000,
) -> SimResult:
    """Run ``driver`` from ``t0_ns`` until it finishes (or ``until_ns``, then ``finish``)."""
    key = link_key or (lambda s, d: (s, d))
    free: dict[Hashable, int] = {}
    sends: list[tuple[int, int, Message]] = []  # (t_ns, flow_id, message)
    recvs: list[tuple[int, int]] = []  # (t_end_ns, flow_id)
    rows: dict[int, dict] = {}

    def queue(msgs: list[Message], now: int) -> None:
        for m in msgs:
            heapq.heappush(sends, (max(m.t_ns, now), m.flow_id, m))

    now = t0_ns
    queue(driver.start(t0_ns), now)
    for _ in range(max_events):
        timer = driver.next_timer_ns()
        candidates = [
            (sends[0][0], 0) if sends else None,
            (recvs[0][0], 1) if recvs else None,
            (timer, 2) if timer is not None else None,
        ]
        candidates = [c for c in candidates if c is not None]
        if not candidates or driver.finished():
            return SimResult(_frame(rows), now, driver.finished())
        t, what = min(candidates)
        if until_ns is not None and t > until_ns:
            driver.finish(until_ns, "simulation horizon reached")
            return SimResult(_frame(rows), until_ns, False)
        now = max(now, t)
        if what == 0:
            _, fid, m = heapq.heappop(sends)
            link = key(m.src, m.dst)
            begin = max(now, free.get(link, now))
            end = begin + round(m.bytes * 8 / rate_bps(m.src, m.dst) * 1e9)
            free[link] = end
            rows[fid] = {
                "flow_id": fid,
                "kind": m.kind,
                "tenant": m.tenant,
                "src": m.src,
                "dst": m.dst,
                "bytes": m.bytes,
                "dscp": m.dscp,
                "request_id": m.request_id,
                "layer": m.layer,
                "step": m.step,
                "t_sched_ns": m.t_ns,
                "t_start_ns": begin,
                "t_end_ns": end,
                "fct_ms": (end - m.t_ns) / 1e6,
            }
            heapq.heappush(recvs, (end, fid))
        elif what == 1:
            _, fid = heapq.heappop(recvs)
            queue(driver.on_received(fid, now), now)
        else:
            queue(driver.on_timer(now), now)
    raise RuntimeError(f"simulation did not finish within {max_events} events")


def _frame(rows: dict[int, dict]) -> pd.DataFrame:
    return pd.DataFrame(list(rows.values()), columns=FLOW_COLUMNS)

"""A run as it stands: the new rows of its tables in, a ``LiveSnapshot`` out.

    tally = Standing(ports, thresholds=config.fidelity, fabric=fabric)
    tally.add("queues", chunk)               # any table's new rows, in the order recorded
    tally.add("tokens", chunk)
    snap = tally.snapshot("run 1", "running", elapsed_s=3.2, flows_in_flight=12)

Pure: no I/O, no clock; what it is given is what the run saved so far (the chunks of
``experiments.output.chunks``: flows, requests, tokens, queues, links, cpu). Each row is
looked at once, when it is added, and folded into something small, so a snapshot costs
the same at the first second and the thousandth: latencies into log-spaced histograms
(p50/p99 within 1 % of the exact quantile), queues and links into each port's latest
figures, the dequeue-rate evidence into each port's standing-queue sums. Only the CPU
samples are kept whole (a few per second).

Times, rates and capacities are wall-clock (the chunks' ``t_ns``; ``Egress.rate_bps``):
the run converts its tables to real-equivalent time only at its end.

Each fidelity check stands as ``ok``, ``at risk`` (within 20 % of its limit),
``failing`` or ``pending`` (no evidence yet, or judged only at the end), judged as
``experiments.analysis.fidelity`` judges the run at its end, on what is known so far:
``cpu`` and ``dequeue_rate`` by the same functions, ``lateness`` on the flows settled so
far (whose issue instants only the workers know until the end: the send instant's
lateness stands in), ``sampler_rate`` by the queue samples' spacing against the rate
asked (the end judges against the rate a sampler lowered itself to), ``offered_load``
over the flows settled so far, and ``unmodelled_loss`` only at the end (it needs the
hosts' TCP counters).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from experiments.analysis.fidelity import (
    DEFAULT_THRESHOLDS,
    MIN_BUSY_MS,
    MIN_SAMPLER_RATIO,
    cpu_check,
    judge_dequeue,
    switch_counter,
    switch_work,
    switching_capacity,
)
from experiments.analysis.port_series import PortIds, column, series, standing_stretches
from experiments.spec.config import Fidelity
from topologies.fabric import Fabric
from topologies.shaping import MTU_BYTES

AT_RISK = 0.8  # a value past this share of its limit is at risk
# The columns ``Standing.add`` reads of each sampled table (None: all): a reader of the
# run's chunks need decode no more.
FOLDED: dict[str, tuple[str, ...] | None] = {
    "queues": ("t_ns", "node", "port", "backlog_pkts", "backlog_bytes", "drops", "sent_bytes"),
    "links": ("t_ns", "node", "port", "tx_bytes"),
    "cpu": None,
}


@dataclass(frozen=True)
class Port:
    """A switch egress as the screen names and judges it: ``name`` by its neighbour,
    ``rate_bps`` as shaped (wall clock), ``buffer_pkts`` its queue's limit."""

    name: str
    rate_bps: float | None = None
    buffer_pkts: int | None = None


@dataclass(frozen=True)
class QueueLoad:
    """One egress queue: backlog at the latest sample and its peak over the latest
    samples (packets), its buffer (packets), drops since the run began."""

    port: str
    backlog_pkts: int
    peak_pkts: int
    buffer_pkts: int | None
    drops: int = 0

    @property
    def peak_pct(self) -> float | None:
        return 100.0 * self.peak_pkts / self.buffer_pkts if self.buffer_pkts else None


@dataclass(frozen=True)
class LinkLoad:
    """One switch egress: what it sent over the latest samples (Mbit/s, wall clock)
    against its shaped rate."""

    port: str
    mbps: float
    capacity_mbps: float | None

    @property
    def pct(self) -> float | None:
        return 100.0 * self.mbps / self.capacity_mbps if self.capacity_mbps else None


@dataclass(frozen=True)
class Latency:
    """A latency so far: how many values, p50 and p99 (ms; None before the first)."""

    n: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None


@dataclass(frozen=True)
class CheckStanding:
    """A fidelity check as it stands: ``status`` ``ok``, ``at risk``, ``failing`` or
    ``pending``; ``measured`` the value against its limit, in words; ``detail`` where the
    value comes from."""

    name: str
    status: str
    measured: str
    detail: str = ""


@dataclass(frozen=True)
class Traffic:
    """Flows and (with a serving workload) requests so far; requests are ``None``
    without one."""

    flows_in_flight: int = 0
    flows_settled: int = 0
    flows_failed: int = 0
    requests_total: int | None = None
    requests_in_flight: int = 0
    requests_done: int = 0
    requests_failed: int = 0
    ttft: Latency = field(default_factory=Latency)
    itl: Latency = field(default_factory=Latency)


@dataclass(frozen=True)
class LiveSnapshot:
    """What the run knows so far (see the module docstring)."""

    run: str
    phase: str
    elapsed_s: float | None = None
    duration_s: float | None = None
    queues: tuple[QueueLoad, ...] = ()
    links: tuple[LinkLoad, ...] = ()
    traffic: Traffic = field(default_factory=Traffic)
    checks: tuple[CheckStanding, ...] = ()
    note: str = ""


class Spread:
    """A histogram of positive values on log-spaced bins, ``step`` apart (1 %): its
    quantiles are within ``step`` of the exact ones, in constant memory."""

    LOW, HIGH = 1e-3, 1e7  # ms: a microsecond to almost three hours

    def __init__(self, step: float = 0.01) -> None:
        self.edges = np.exp(np.arange(math.log(self.LOW), math.log(self.HIGH), math.log1p(step)))
        self.counts = np.zeros(len(self.edges) + 1, dtype=np.int64)
        self.n = 0

    def add(self, values: Any) -> None:
        x = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
        x = x[np.isfinite(x)]
        if x.size:
            np.add.at(self.counts, np.searchsorted(self.edges, x, side="right"), 1)
            self.n += int(x.size)

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (the geometric middle of its bin), ``None`` when empty."""
        if not self.n:
            return None
        i = int(np.searchsorted(np.cumsum(self.counts), math.ceil(q * self.n)))
        lo = self.edges[i - 1] if i > 0 else 0.0
        hi = self.edges[i] if i < len(self.edges) else self.edges[-1]
        return math.sqrt(lo * hi) if lo > 0 else hi

    def latency(self) -> Latency:
        return Latency(self.n, self.quantile(0.5), self.quantile(0.99))


def stand(value: float | None, limit: float, ok: bool | None = None, lower: bool = False) -> str:
    """``ok``, ``at risk`` or ``failing`` for ``value`` against an upper ``limit`` (a
    lower one with ``lower``), or ``pending`` for no value; ``ok``: the check's own
    judgement, when it has one (a check can fail on more than its value)."""
    if value is None:
        return "failing" if ok is False else "pending"
    over = value < limit if lower else value > limit
    if over or ok is False:
        return "failing"
    if lower:
        risky = value < limit + (1 - AT_RISK) * (1 - limit) if limit < 1 else False
    else:
        risky = limit > 0 and value >= AT_RISK * limit
    return "at risk" if risky else "ok"


class Standing:
    """Folds a run's new rows into what ``snapshot`` shows (see the module docstring).

    ``ports``: (node, port) -> ``Port`` for every switch egress; ``thresholds``: the run's
    ``config.fidelity``; ``fabric`` (optional): for the offered switch-hop load, judged
    against ``capacity_mbps`` (a figure, or Mbit/s by path length: the envelope's, wall
    clock); ``sampler_hz``: the queue sampler's requested rate; ``requests_total``: a
    serving workload's request count (None: no serving workload); ``frame``: the bytes a
    full frame moves the queue counters by."""

    def __init__(
        self,
        ports: Mapping[tuple[str, int], Port],
        thresholds: Fidelity | None = None,
        fabric: Fabric | None = None,
        capacity_mbps: float | Callable[[float], float] | None = None,
        sampler_hz: float | None = None,
        requests_total: int | None = None,
        frame: int = MTU_BYTES,
    ) -> None:
        self.ports = dict(ports)
        self.th = thresholds or DEFAULT_THRESHOLDS
        self.fabric, self.capacity_mbps = fabric, capacity_mbps
        self.sampler_hz, self.requests_total, self.frame = sampler_hz, requests_total, frame
        self.rates_bps = {k: p.rate_bps for k, p in self.ports.items() if p.rate_bps}
        self.ids = PortIds()  # (node, port) -> a small integer, for the folds below
        self.queue_now: dict[tuple[str, int], tuple[int, int]] = {}  # backlog, recent peak
        self.drops_first: dict[tuple[str, int], int] = {}
        self.drops_last: dict[tuple[str, int], int] = {}
        self.busy: dict[tuple[str, int], list[float]] = {}  # stretches, busy_s, busy_bytes
        self.queue_tail: tuple[np.ndarray, ...] | None = None  # each port's last sample
        self.ticks, self.tick_span = 0, (None, None)
        self.link_mbps: dict[tuple[str, int], float] = {}
        self.link_tail: tuple[np.ndarray, ...] | None = None
        self.cpu: list[pd.DataFrame] = []
        self.flows_settled = self.flows_failed = 0
        self.lateness = Spread()
        self.hops = switch_counter(fabric) if fabric is not None else None
        self.switch_bits: dict[int, float] = {}
        self.flow_span: tuple[float, float] = (math.inf, -math.inf)
        self.requests_done = self.requests_failed = 0
        self.ttft, self.itl = Spread(), Spread()
        self.added = 0  # chunks folded in: what the screen shows changes with it only
        self.shown: tuple[int, Any] | None = None  # (added, what it showed)
        self.judged = False  # the checks shown were worked out on the rows shown

    # ----- rows in ----------------------------------------------------------------------
    def add(self, table: str, rows: pd.DataFrame | pa.Table | None) -> None:
        """Fold the new ``rows`` of ``table`` (one of the run's table names) in: a frame,
        or for the sampled ``queues`` and ``links`` an Arrow table as read."""
        if rows is None or not len(rows):
            return
        fold = {
            "queues": self._queues,
            "links": self._links,
            "cpu": self.cpu.append,
            "flows": self._flows,
            "requests": self._requests,
            "tokens": lambda r: self.itl.add(r["itl_ms"]) if "itl_ms" in r else None,
        }.get(table)
        if fold is not None:
            fold(rows)
            self.added += 1

    def _queues(self, rows: pd.DataFrame | pa.Table) -> None:
        pid, t = self.ids.of(rows), column(rows, "t_ns", np.int64)
        sent = column(rows, "sent_bytes", np.int64)
        backlog = column(rows, "backlog_pkts", np.int64)
        held = column(rows, "backlog_bytes", np.float64)
        drops = column(rows, "drops", np.int64)
        order, starts = series(pid, t)
        ends = np.r_[starts[1:], order.size] - 1
        peak = np.maximum.reduceat(backlog[order], starts)
        lo, hi = (
            np.minimum.reduceat(drops[order], starts),
            np.maximum.reduceat(drops[order], starts),
        )
        for i, start in enumerate(starts.tolist()):
            k = self.ids.keys[pid[order[start]]]
            self.queue_now[k] = (int(backlog[order[ends[i]]]), int(peak[i]))
            self.drops_first.setdefault(k, int(lo[i]))
            self.drops_last[k] = int(hi[i])
        latest = (pid, t, sent, backlog, held)
        last = order[ends]
        joined = (
            [np.concatenate(pair) for pair in zip(self.queue_tail, latest, strict=True)]
            if (self.queue_tail is not None)
            else list(latest)
        )
        self.queue_tail = tuple(x[last] for x in latest)
        j_order, _ = series(joined[0], joined[1])
        n, span_ns, nbytes = standing_stretches(
            *(x[j_order] for x in joined), self.ids.values(self.rates_bps), MIN_BUSY_MS * 1e6
        )
        for i in np.flatnonzero(n).tolist():
            sums = self.busy.setdefault(self.ids.keys[i], [0, 0.0, 0])
            sums[0] += int(n[i])
            sums[1] += span_ns[i] / 1e9
            sums[2] += int(nbytes[i])
        first = int(t.min()) if self.tick_span[0] is None else self.tick_span[0]
        self.ticks += int(np.unique(t).size)
        self.tick_span = (first, int(t.max()))

    def _links(self, rows: pd.DataFrame | pa.Table) -> None:
        latest = (
            self.ids.of(rows),
            column(rows, "t_ns", np.int64),
            column(rows, "tx_bytes", np.int64),
        )
        joined = (
            latest
            if self.link_tail is None
            else tuple(np.concatenate(pair) for pair in zip(self.link_tail, latest, strict=True))
        )
        order, starts = series(joined[0], joined[1])
        pid, t, tx = (x[order] for x in joined)
        ends = np.r_[starts[1:], order.size] - 1
        dt = (t[ends] - t[starts]) / 1e9
        sent = np.maximum(0, tx[ends] - tx[starts])
        for i in np.flatnonzero(dt > 0).tolist():
            self.link_mbps[self.ids.keys[pid[starts[i]]]] = sent[i] * 8 / dt[i] / 1e6
        self.link_tail = (pid[ends], t[ends], tx[ends])

    def _flows(self, rows: pd.DataFrame) -> None:
        self.flows_settled += len(rows)
        if "ok" in rows:
            self.flows_failed += int((~rows["ok"].astype(bool)).sum())
        timed = rows[rows["after"].fillna(-1).astype(int) < 0] if "after" in rows else rows
        if "lateness_ms" in timed:
            self.lateness.add(timed["lateness_ms"])
        if self.fabric is not None and {"src", "dst", "bytes", "t_start_ns"} <= set(rows):
            _, by_hops, _ = switch_work(rows, self.fabric, self.hops)
            for hops, bits in by_hops.items():
                self.switch_bits[hops] = self.switch_bits.get(hops, 0.0) + bits
            starts = pd.to_numeric(rows["t_start_ns"], errors="coerce").dropna()
            ends = pd.to_numeric(rows.get("t_end_ns"), errors="coerce").dropna()
            lo, hi = self.flow_span
            if len(starts):
                lo = min(lo, float(starts.min()))
            if len(ends):
                hi = max(hi, float(ends.max()))
            self.flow_span = (lo, hi)

    def _requests(self, rows: pd.DataFrame) -> None:
        failed = int(rows["error"].notna().sum()) if "error" in rows else 0
        self.requests_failed += failed
        self.requests_done += len(rows) - failed
        if "ttft_ms" in rows:
            self.ttft.add(rows["ttft_ms"])

    # ----- a snapshot out ------------------------------------------------------------------
    def snapshot(
        self,
        run: str,
        phase: str,
        *,
        elapsed_s: float | None = None,
        duration_s: float | None = None,
        flows_in_flight: int = 0,
        requests_arrived: int | None = None,
        note: str = "",
        judge: bool = True,
    ) -> LiveSnapshot:
        """What the rows added so far show; ``requests_arrived``: requests whose arrival
        has come (the rest of those not yet done or failed are in flight). ``judge``:
        work the checks out again (their folds cover the whole run so far, the view's
        largest cost after drawing); False keeps the last ones, if any."""
        stale = self.shown is None or self.shown[0] != self.added
        if stale or (judge and not self.judged):  # else as shown before
            keep = not judge and self.shown is not None and self.shown[1][2]
            checks = self.shown[1][2] if keep else tuple(self.checks())
            self.judged = not keep
            folded = (
                tuple(self._queue_loads()),
                tuple(self._link_loads()),
                checks,
                self.ttft.latency(),
                self.itl.latency(),
            )
            self.shown = (self.added, folded)
        queues, links, checks, ttft, itl = self.shown[1]
        settled = self.requests_done + self.requests_failed
        arrived = max(requests_arrived or 0, settled)
        traffic = Traffic(
            flows_in_flight=flows_in_flight,
            flows_settled=self.flows_settled,
            flows_failed=self.flows_failed,
            requests_total=self.requests_total,
            requests_in_flight=arrived - settled,
            requests_done=self.requests_done,
            requests_failed=self.requests_failed,
            ttft=ttft,
            itl=itl,
        )
        return LiveSnapshot(
            run=run,
            phase=phase,
            elapsed_s=elapsed_s,
            duration_s=duration_s,
            queues=queues,
            links=links,
            traffic=traffic,
            checks=checks,
            note=note,
        )

    def _name(self, key: tuple[str, int]) -> str:
        port = self.ports.get(key)
        return port.name if port else f"{key[0]}:{key[1]}"

    def _queue_loads(self) -> list[QueueLoad]:
        out = []
        for key, (backlog, peak) in self.queue_now.items():
            port = self.ports.get(key)
            drops = max(0, self.drops_last.get(key, 0) - self.drops_first.get(key, 0))
            buffer = port.buffer_pkts if port else None
            out.append(QueueLoad(self._name(key), backlog, peak, buffer, drops))
        return out

    def _link_loads(self) -> list[LinkLoad]:
        out = []
        for key, mbps in self.link_mbps.items():
            port = self.ports.get(key)
            capacity = port.rate_bps / 1e6 if port and port.rate_bps else None
            out.append(LinkLoad(self._name(key), mbps, capacity))
        return out

    # ----- fidelity as it stands -------------------------------------------------------------
    def checks(self) -> list[CheckStanding]:
        """Each check of the run's verdict as it stands (see the module docstring)."""
        return [
            self._cpu(),
            self._dequeue(),
            self._lateness(),
            self._sampler(),
            self._offered(),
            CheckStanding(
                "unmodelled_loss",
                "pending",
                "judged at the end",
                f"needs the hosts' TCP counters; queues dropped {self._drops()} so far",
            ),
        ]

    def _cpu(self) -> CheckStanding:
        limit = self.th.cpu_max_pct
        if not self.cpu:
            return CheckStanding("cpu", "pending", "no samples yet")
        if len(self.cpu) > 1:  # one frame from here on: the next check adds to it only
            self.cpu = [pd.concat(self.cpu, ignore_index=True)]
        c = cpu_check(self.cpu[0], limit)
        return CheckStanding(
            "cpu",
            stand(c["value"], limit, c["ok"]),
            _of(c["value"], limit, "%", "p95 "),
            c["detail"],
        )

    def _dequeue(self) -> CheckStanding:
        tolerance = self.th.dequeue_rate_tolerance
        busy = pd.DataFrame(
            [
                [node, port, int(n), s, int(b), b * 8 / s if s > 0 else 0.0]
                for (node, port), (n, s, b) in self.busy.items()
            ],
            columns=["node", "port", "stretches", "busy_s", "busy_bytes", "bps"],
        )
        c = judge_dequeue(busy, self.rates_bps, tolerance, self.frame)
        off = None if c["value"] is None else abs(c["value"] - 1)
        measured = "no standing queue yet" if c["value"] is None else f"{c['value']:.3f}×"
        return CheckStanding(
            "dequeue_rate",
            stand(off, tolerance, c["ok"]),
            measured + f" (±{tolerance:.0%})",
            c["detail"],
        )

    def _lateness(self) -> CheckStanding:
        limit = self.th.lateness_p99_ms
        p99 = self.lateness.quantile(0.99)
        return CheckStanding(
            "lateness",
            stand(p99, limit),
            _of(p99, limit, "ms", "p99 "),
            f"over {self.lateness.n} settled timer-driven flows",
        )

    def _sampler(self) -> CheckStanding:
        lo, hi = self.tick_span
        if not self.sampler_hz or lo is None or hi is None or hi - lo < 1e9:
            return CheckStanding("sampler_rate", "pending", "under a second of samples")
        achieved = (self.ticks - 1) / ((hi - lo) / 1e9)
        ratio = achieved / self.sampler_hz
        return CheckStanding(
            "sampler_rate",
            stand(ratio, MIN_SAMPLER_RATIO, lower=True),
            f"{ratio:.0%} of requested (min {MIN_SAMPLER_RATIO:.0%})",
            f"queues {achieved:.1f} of {self.sampler_hz:.4g} Hz; the end judges a sampler "
            "that lowered its rate by the rate it kept to",
        )

    def _offered(self) -> CheckStanding:
        lo, hi = self.flow_span
        if self.fabric is None or not self.switch_bits or not hi > lo:
            return CheckStanding("offered_load", "pending", "no flow settled yet")
        cap, where = switching_capacity(self.switch_bits, self.capacity_mbps)
        mbps = sum(self.switch_bits.values()) / ((hi - lo) / 1e9) / 1e6
        return CheckStanding(
            "offered_load",
            stand(mbps, cap),
            _of(mbps, cap, "Mbit/s"),
            f"switch-hop work of {self.flows_settled} settled flows; capacity{where} "
            f"{cap:g} Mbit/s",
        )

    def _drops(self) -> int:
        return sum(max(0, self.drops_last[k] - self.drops_first.get(k, 0)) for k in self.drops_last)


def _of(value: float | None, limit: float, unit: str, what: str = "") -> str:
    if value is None:
        return "no data yet"
    shown = f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{what}{shown} {unit} (≤ {limit:g})"

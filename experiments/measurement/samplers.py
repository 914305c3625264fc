"""Background samplers: switch egress queues and link counters (netlink) and the
machine's CPU (psutil), each on its own thread at a fixed rate.

    ports = {net.intf(sw, p): (sw, p) for sw, p in switch_ports}
    with QueueSampler(ports, 200) as q, LinkSampler(ports) as links, CpuSampler() as cpu:
        ...                                   # run the experiment
    q.table()                                  # t_ns, node, port, backlog_pkts, ...

Every sampler ticks at absolute instants ``t0 + k / rate_hz``; when a sample
runs late, the ticks it overran are skipped (the latest one is still taken if
less than half a period late), never caught up in a burst. A sampler that
cannot keep its rate over a one-second window halves it (down to an eighth of
what was asked) and records when: it never falls behind silently, and its
resolution is stated (``resolution_ms``, ``adaptations``). One tick is one
netlink dump for all ports, never one request per port. Rows are kept as flat ``array('q')`` of
integers, names as small indexes, so an hour at 200 Hz × 50 ports stays small.

A sampler thread that fails stores its exception in ``.error``; ``stop()``
raises it (``SamplerError``) unless told not to, so a run never reports data
from a sampler that silently died. ``t_ns`` is ``time.monotonic_ns()`` at the
middle of the dump (the kernel reads the counters while the dump runs).

Queue counters are those of the bounded pfifo(s) under each shaped egress's
HTB (``topologies.shaping`` / ``topologies.qos``): backlog, drops and bytes
dequeued as the qdisc counts them, i.e. whole Ethernet frames (14-byte header
included, as HTB's rate counts them). With QoS classes an egress has one pfifo
per class; the sampler sums them, so a row is always the whole egress.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
from array import array
from collections.abc import Iterator
from typing import Self

import numpy as np
import pandas as pd

log = logging.getLogger("kvfabric.samplers")

TC_H_ROOT = 0xFFFFFFFF
QUEUE_COLUMNS = ["t_ns", "node", "port", "backlog_pkts", "backlog_bytes", "drops", "sent_bytes"]
LINK_COLUMNS = [
    "t_ns",
    "node",
    "port",
    "tx_bytes",
    "rx_bytes",
    "tx_packets",
    "rx_packets",
    "tx_dropped",
]
CPU_COLUMNS = ["t_ns", "cpu_pct", "max_core_pct", "steal_pct"]


ADAPT_WINDOW_NS = 1_000_000_000  # a sampler judges its own pace over this window
MIN_KEPT = 0.9  # below this share of its ticks in a window, it halves its rate
MAX_SLOWDOWN = 8  # never below an eighth of the requested rate


class SamplerError(RuntimeError):
    """A sampler's thread failed; ``__cause__`` is the original exception."""


class Sampler:
    """Thread and tick machinery shared by every sampler.

    Subclasses implement ``_open`` (called in ``start``, in the caller's thread,
    so a bad port name fails there), ``_sample(t_ns)`` (one tick) and ``_close``.
    """

    name = "sampler"

    def __init__(self, rate_hz: float) -> None:
        if not isinstance(rate_hz, int | float) or not 0 < rate_hz <= 10_000:
            raise ValueError(f"rate_hz={rate_hz!r}: must be in (0, 10000]")
        self.requested_hz = float(rate_hz)
        self.samples = 0
        self.error: BaseException | None = None
        self._period_ns = int(round(1e9 / self.requested_hz))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t_start: int | None = None
        self._t_stop: int | None = None
        self._busy_ns = 0  # thread CPU time spent sampling (for the cost figure)
        self._opened = False
        self._raised = False
        self.adaptive = True
        self.adaptations: list[tuple[int, float]] = []  # (t_ns, new rate in Hz)
        self._segments: list[tuple[int, int]] = []  # (t_ns, period_ns) from then on

    # ----- lifetime ------------------------------------------------------
    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._open()
        self._opened = True
        self._t_start = time.monotonic_ns()
        self._thread = threading.Thread(target=self._run, name=f"kvfabric-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, raise_error: bool = True) -> None:
        """Stop the thread, join it and release the socket; idempotent. Raises
        ``SamplerError`` if the thread failed (once; ``.error`` keeps it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if self._t_stop is None:
                self._t_stop = time.monotonic_ns()  # the first stop ends the sampled span
        if self._opened:
            self._opened = False
            try:
                self._close()
            except Exception as exc:  # closing must not hide the run's result
                log.warning("%s: close failed: %s", self.name, exc)
        if raise_error and self.error is not None and not self._raised:
            self._raised = True
            raise SamplerError(f"{self.name} failed: {self.error!r}") from self.error

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop(raise_error=False)
            raise

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # An exception already on its way out wins; a sampler failure is kept in .error.
        self.stop(raise_error=exc_type is None)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def elapsed_s(self) -> float:
        if self._t_start is None:
            return 0.0
        end = self._t_stop if self._t_stop is not None else time.monotonic_ns()
        return (end - self._t_start) / 1e9

    @property
    def achieved_hz(self) -> float:
        """Samples taken ÷ time from start to stop (or to now): a thread that died
        early shows as a low rate over the whole run, not a good one over its life."""
        elapsed = self.elapsed_s
        return self.samples / elapsed if elapsed > 0 else 0.0

    @property
    def target_hz(self) -> float:
        """The rate asked of the sampler over its span, time-weighted: ``requested_hz``
        until it adapted, then each lower rate for as long as it held."""
        if self._t_start is None or not self._segments:
            return self.requested_hz
        end = self._t_stop if self._t_stop is not None else time.monotonic_ns()
        bounds = [t for t, _ in self._segments[1:]] + [end]
        expected = sum((b - t) / p for (t, p), b in zip(self._segments, bounds, strict=True))
        span = end - self._t_start
        return expected / span * 1e9 if span > 0 else self.requested_hz

    @property
    def resolution_ms(self) -> float:
        """The sampling period at the end (ms): what the table resolves in time."""
        period = self._segments[-1][1] if self._segments else self._period_ns
        return period / 1e6

    def rates(self) -> dict[str, float]:
        """What the fidelity verdict and summary.json report of this sampler."""
        return {
            "achieved_hz": self.achieved_hz,
            "requested_hz": self.requested_hz,
            "target_hz": self.target_hz,
            "resolution_ms": self.resolution_ms,
            "adaptations": len(self.adaptations),
        }

    @property
    def cpu_ms_per_sample(self) -> float:
        """Mean thread CPU time of one tick (the cost of a dump and its parsing)."""
        return self._busy_ns / self.samples / 1e6 if self.samples else 0.0

    # ----- the tick loop ---------------------------------------------------
    def _run(self) -> None:
        period, t0, k = self._period_ns, self._t_start or time.monotonic_ns(), 0
        self._segments = [(t0, period)]
        window_start, window_samples = t0, 0
        slowest = period * MAX_SLOWDOWN
        try:
            while not self._stop.is_set():
                now = time.monotonic_ns()
                target = t0 + k * period
                if now < target and self._stop.wait((target - now) / 1e9):
                    break
                c0 = time.thread_time_ns()
                self._sample()
                self._busy_ns += time.thread_time_ns() - c0
                self.samples += 1
                window_samples += 1
                now = time.monotonic_ns()
                if now - window_start >= ADAPT_WINDOW_NS:
                    kept = window_samples / ((now - window_start) / period)
                    window_start, window_samples = now, 0
                    if self.adaptive and kept < MIN_KEPT and period * 2 <= slowest:
                        period, t0, k = period * 2, now, 1  # half the rate, from now on
                        self._segments.append((now, period))
                        self.adaptations.append((now, 1e9 / period))
                        log.warning(
                            "%s kept %.0f%% of its rate: now %.4g Hz (%.3g ms)",
                            self.name,
                            kept * 100,
                            1e9 / period,
                            period / 1e6,
                        )
                        continue
                # Next tick: k+1; if that is already past, the latest due tick when it is
                # less than half a period late, else the next one: missed ticks are
                # skipped, never burst, and no two samples come closer than period/2.
                late = time.monotonic_ns() - t0
                due = late // period
                k = max(k + 1, due if late - due * period <= period // 2 else due + 1)
        except BaseException as exc:  # kept for stop(); the runner reports it
            self.error = exc
            log.error("%s stopped: %r", self.name, exc)

    # ----- for subclasses ------------------------------------------------------
    def _open(self) -> None:  # pragma: no cover - trivial default
        pass

    def _sample(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:  # pragma: no cover - trivial default
        pass

    def table(self, start: int = 0) -> pd.DataFrame:
        """The rows sampled so far, from row ``start`` on (a caller saving rows as they
        come asks for those after the ones it has); safe while the sampler runs."""
        raise NotImplementedError


class _PortSampler(Sampler):
    """Per-port rows from one netlink dump per tick: ``_fields`` ints per port."""

    _columns: list[str] = []

    def __init__(self, ports: dict[str, tuple[str, int]], rate_hz: float) -> None:
        super().__init__(rate_hz)
        if not ports:
            raise ValueError(f"{type(self).__name__}: no ports to sample")
        self.ports = dict(ports)
        self._names = list(self.ports)  # row index -> interface name
        self._rows = array("q")  # t_ns, port index, then the counters, per row
        self._dropped = 0  # rows forgotten from the front (saved elsewhere: ``forget``)
        self._nl: Netlink | None = None
        self._by_index: dict[int, int] = {}  # ifindex -> row index

    def _open(self) -> None:
        self._nl = Netlink()
        try:
            index = self._nl.ifindexes()
            for i, name in enumerate(self._names):
                if name not in index:
                    raise LookupError(f"no interface named {name} in this network namespace")
                self._by_index[index[name]] = i
        except BaseException:
            self._close()
            raise

    def _close(self) -> None:
        if self._nl is not None:
            nl, self._nl = self._nl, None
            nl.close()

    def forget(self, upto: int) -> None:
        """Drop the rows before row ``upto`` (counted from the first ever sampled) from
        memory, once they are saved: a long run's samples then cost disk, not memory.
        ``table`` afterwards starts at ``upto``. Call it from one thread."""
        width = len(self._columns) - 1
        n = min(upto - self._dropped, len(self._rows) // width)
        if n > 0:
            del self._rows[: n * width]  # whole rows: the sampling thread extends by rows
            self._dropped += n

    def table(self, start: int = 0) -> pd.DataFrame:
        width = len(self._columns) - 1  # node and port come from one index
        if start < self._dropped:
            raise ValueError(f"rows before {self._dropped} were forgotten (saved): start={start}")
        start -= self._dropped
        # A slice is a copy taken under the GIL: safe while the thread appends (a
        # buffer view would make its next extend fail), cut to whole rows.
        snap = self._rows[start * width : len(self._rows) // width * width]
        data = np.frombuffer(snap, dtype=np.int64).reshape(-1, width)
        idx = data[:, 1]
        nodes = np.asarray([self.ports[n][0] for n in self._names], dtype=object)
        numbers = np.asarray([self.ports[n][1] for n in self._names], dtype=np.int64)
        out = {"t_ns": data[:, 0].copy(), "node": nodes[idx], "port": numbers[idx]}
        for j, col in enumerate(self._columns[3:]):
            out[col] = data[:, 2 + j].copy()
        return pd.DataFrame(out, columns=self._columns)


class QueueSampler(_PortSampler):
    """Switch egress queues: ``ports`` maps interface name -> (switch, port number).

    Table: ``t_ns, node, port, backlog_pkts, backlog_bytes, drops, sent_bytes``
    (cumulative drops and dequeued bytes as the kernel reports them).
    """

    name = "queues"
    _columns = QUEUE_COLUMNS

    def __init__(self, ports: dict[str, tuple[str, int]], rate_hz: float = 200.0) -> None:
        super().__init__(ports, rate_hz)

    def time_ticks(self, ticks: int) -> float:
        """Seconds that ``ticks`` samples take back to back on the calling thread (what
        one tick costs, without the rate loop around it)."""
        self._open()
        try:
            t0 = time.perf_counter()
            for _ in range(ticks):
                self._sample()
            return time.perf_counter() - t0
        finally:
            self._close()

    def _sample(self) -> None:
        assert self._nl is not None
        t_a = time.monotonic_ns()
        stats = self._nl.pfifo_stats(self._by_index)
        t_ns = (t_a + time.monotonic_ns()) // 2
        rows = self._rows
        for i in sorted(stats):
            rows.extend((t_ns, i, *stats[i]))


class LinkSampler(_PortSampler):
    """Interface counters from one link dump per tick. Table: ``t_ns, node, port,
    tx_bytes, rx_bytes, tx_packets, rx_packets, tx_dropped``."""

    name = "links"
    _columns = LINK_COLUMNS

    def __init__(self, ports: dict[str, tuple[str, int]], rate_hz: float = 10.0) -> None:
        super().__init__(ports, rate_hz)

    def _sample(self) -> None:
        assert self._nl is not None
        t_a = time.monotonic_ns()
        stats = self._nl.link_stats(self._by_index)
        t_ns = (t_a + time.monotonic_ns()) // 2
        rows = self._rows
        for i in sorted(stats):
            rows.extend((t_ns, i, *stats[i]))


class CpuSampler(Sampler):
    """Whole-machine CPU from ``/proc/stat`` deltas (psutil's per-core times; no
    shared state with other ``psutil.cpu_percent`` callers). Table: ``t_ns,
    cpu_pct`` (0–100, all cores), ``max_core_pct`` (the busiest core) and ``steal_pct``
    (the share of all cores the hypervisor gave to other machines: counted in
    ``cpu_pct`` as busy, since the emulation could not use it), each over the interval
    since the previous tick."""

    name = "cpu"

    def __init__(self, rate_hz: float = 10.0) -> None:
        super().__init__(rate_hz)
        self._t: list[int] = []
        self._pct: list[float] = []
        self._max: list[float] = []
        self._steal: list[float] = []
        self._last: list[tuple[float, float, float]] = []

    def _open(self) -> None:
        self._last = _core_times()

    def _sample(self) -> None:
        now = _core_times()
        t_ns = time.monotonic_ns()
        pcts, busy_sum, total_sum, steal_sum = [], 0.0, 0.0, 0.0
        for (busy0, total0, steal0), (busy1, total1, steal1) in zip(self._last, now, strict=False):
            d_busy, d_total = max(0.0, busy1 - busy0), total1 - total0
            pcts.append(100.0 * d_busy / d_total if d_total > 0 else 0.0)
            busy_sum += d_busy
            total_sum += max(0.0, d_total)
            # steal is part of busy; busy is a difference of large sums, so its delta can
            # come out a few ULPs below steal's: bound it, or steal_pct > cpu_pct by 1e-8
            steal_sum += min(max(0.0, steal1 - steal0), d_busy)
        self._last = now
        self._t.append(t_ns)
        self._pct.append(min(100.0, 100.0 * busy_sum / total_sum) if total_sum > 0 else 0.0)
        self._steal.append(min(100.0, 100.0 * steal_sum / total_sum) if total_sum > 0 else 0.0)
        self._max.append(min(100.0, max(pcts, default=0.0)))

    def table(self, start: int = 0) -> pd.DataFrame:
        n = len(self._max)  # appended last: the other two lists have at least n
        return pd.DataFrame(
            {
                "t_ns": np.asarray(self._t[start:n], dtype=np.int64),
                "cpu_pct": np.asarray(self._pct[start:n], dtype=np.float64),
                "max_core_pct": np.asarray(self._max[start:n], dtype=np.float64),
                "steal_pct": np.asarray(self._steal[start:n], dtype=np.float64),
            },
            columns=CPU_COLUMNS,
        )


def _core_times() -> list[tuple[float, float, float]]:
    """(busy, total, steal) seconds per core, as psutil.cpu_percent counts them."""
    import psutil

    out = []
    for t in psutil.cpu_times(percpu=True):
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        busy = total - t.idle - getattr(t, "iowait", 0.0)
        out.append((busy, total, getattr(t, "steal", 0.0)))
    return out


# ----- netlink, by hand ----------------------------------------------------------
# pyroute2 parses every attribute of every message into Python objects: 8 ms per
# qdisc dump and 21 ms per link dump of a 50-port fabric on the 2-core VM, too
# slow for 200 Hz. These dumps read only the fixed headers and the one attribute
# needed, straight from the receive buffer.

NETLINK_ROUTE = 0
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
RTM_NEWSTATS, RTM_GETSTATS = 92, 94
IFLA_IFNAME = 3
TCA_KIND, TCA_STATS = 1, 3
IFLA_STATS_LINK_64 = 1
_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_RTA = struct.Struct("=HH")  # len, type
_TCMSG = struct.Struct("=BBHiIII")  # family, pad, pad, ifindex, handle, parent, info
_IFINFO = struct.Struct("=BBHiII")  # family, pad, type, index, flags, change
_STATSMSG = struct.Struct("=BBHII")  # family, pad, pad, ifindex, filter_mask
_TC_STATS = struct.Struct("=QIIIIIII")  # bytes, packets, drops, overlimits, bps, pps, qlen, backlog
_LINK64 = struct.Struct("=8Q")  # rx/tx packets, rx/tx bytes, rx/tx errors, rx/tx dropped


class Netlink:
    """One NETLINK_ROUTE socket in this network namespace, for counter dumps."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self.sock.bind((0, 0))
        except BaseException:
            self.sock.close()
            raise
        self.buf = bytearray(1 << 18)
        self.seq = 0
        self._pfifo_at: dict[int, int] = {}  # pfifo message length -> TCA_STATS offset

    def close(self) -> None:
        self.sock.close()

    def dump(self, msg_type: int, body: bytes) -> Iterator[tuple[int, memoryview, int, int]]:
        """Yield (type, buffer, payload offset, payload end) of every message of a dump.
        The buffer is reused: read what you need before asking for the next one."""
        self.seq += 1
        seq = self.seq
        flags = NLM_F_REQUEST | NLM_F_DUMP
        self.sock.send(_NLMSG.pack(_NLMSG.size + len(body), msg_type, flags, seq, 0) + body)
        view = memoryview(self.buf)
        while True:
            n = self.sock.recv_into(self.buf)
            off = 0
            while off + _NLMSG.size <= n:
                length, mtype, _, mseq, _ = _NLMSG.unpack_from(view, off)
                if length < _NLMSG.size:
                    raise OSError(f"netlink: bad message length {length}")
                if mseq == seq:
                    if mtype == NLMSG_DONE:
                        return
                    if mtype == NLMSG_ERROR:
                        (err,) = struct.unpack_from("=i", view, off + _NLMSG.size)
                        if err:
                            raise OSError(-err, f"netlink dump {msg_type}: {os.strerror(-err)}")
                    else:
                        yield mtype, view, off + _NLMSG.size, off + length
                off += (length + 3) & ~3

    @staticmethod
    def attrs(view: memoryview, off: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(type, value offset, value end) of the attributes in [off, end)."""
        while off + _RTA.size <= end:
            length, atype = _RTA.unpack_from(view, off)
            if length < _RTA.size:
                return
            yield atype & 0x3FFF, off + _RTA.size, off + length
            off += (length + 3) & ~3

    def ifindexes(self) -> dict[str, int]:
        """Interface name -> index, for every interface of this namespace."""
        out: dict[str, int] = {}
        for mtype, view, off, end in self.dump(RTM_GETLINK, _IFINFO.pack(0, 0, 0, 0, 0, 0)):
            if mtype != RTM_NEWLINK:
                continue
            index = _IFINFO.unpack_from(view, off)[3]
            for atype, a, b in self.attrs(view, off + _IFINFO.size, end):
                if atype == IFLA_IFNAME:
                    out[bytes(view[a:b]).rstrip(b"\0").decode()] = index
                    break
        return out

    def pfifo_stats(self, wanted: dict[int, int]) -> dict[int, list[int]]:
        """key -> [backlog_pkts, backlog_bytes, drops, sent_bytes] for the interfaces
        ``wanted`` (ifindex -> key): the sum over their non-root pfifo qdiscs.

        Every pfifo message of a dump has the same layout, so once one has been
        parsed attribute by attribute, the offset of its ``TCA_STATS`` is known for
        every message of that length: the rest are read at that offset after two
        checks (the kind is pfifo, the attribute there is ``TCA_STATS``)."""
        out: dict[int, list[int]] = {}
        layout = self._pfifo_at
        kind_at = _TCMSG.size + _RTA.size
        header, rta, tc_stats = _TCMSG.unpack_from, _RTA.unpack_from, _TC_STATS.unpack_from
        for mtype, view, off, end in self.dump(RTM_GETQDISC, _TCMSG.pack(0, 0, 0, 0, 0, 0, 0)):
            if mtype != RTM_NEWQDISC:
                continue
            _, _, _, ifindex, _, parent, _ = header(view, off)
            key = wanted.get(ifindex)
            if key is None or parent == TC_H_ROOT:
                continue
            at = layout.get(end - off)
            if (
                at is not None
                and view[off + kind_at : off + kind_at + 6] == b"pfifo\0"
                and rta(view, off + at - _RTA.size)[1] & 0x3FFF == TCA_STATS
            ):
                stats = tc_stats(view, off + at)
            else:
                stats = self._pfifo_slow(view, off, end)
                if stats is None:
                    continue
            sent, _, drops, _, _, _, qlen, backlog = stats
            row = out.get(key)
            if row is None:
                out[key] = [qlen, backlog, drops, sent]
            else:  # one pfifo per QoS class: the egress is their sum
                row[0] += qlen
                row[1] += backlog
                row[2] += drops
                row[3] += sent
        return out

    def _pfifo_slow(self, view: memoryview, off: int, end: int) -> tuple | None:
        """A qdisc message's pfifo stats by walking its attributes (None: not a pfifo);
        learns the message layout for ``pfifo_stats``."""
        kind, stats, at = None, None, 0
        for atype, a, b in self.attrs(view, off + _TCMSG.size, end):
            if atype == TCA_KIND:
                kind = bytes(view[a:b]).rstrip(b"\0")
            elif atype == TCA_STATS and b - a >= _TC_STATS.size:
                stats, at = _TC_STATS.unpack_from(view, a), a - off
        if kind != b"pfifo" or stats is None:
            return None
        self._pfifo_at[end - off] = at
        return stats

    def link_stats(self, wanted: dict[int, int]) -> dict[int, tuple[int, ...]]:
        """key -> (tx_bytes, rx_bytes, tx_packets, rx_packets, tx_dropped) from one
        RTM_GETSTATS dump (64-bit link counters only, far smaller than a link dump)."""
        out: dict[int, tuple[int, ...]] = {}
        mask = 1 << (IFLA_STATS_LINK_64 - 1)
        for mtype, view, off, end in self.dump(RTM_GETSTATS, _STATSMSG.pack(0, 0, 0, 0, mask)):
            if mtype != RTM_NEWSTATS:
                continue
            key = wanted.get(_STATSMSG.unpack_from(view, off)[3])
            if key is None:
                continue
            for atype, a, b in self.attrs(view, off + _STATSMSG.size, end):
                if atype == IFLA_STATS_LINK_64 and b - a >= _LINK64.size:
                    rxp, txp, rxb, txb, _, _, _, txd = _LINK64.unpack_from(view, a)
                    out[key] = (txb, rxb, txp, rxp, txd)
        return out

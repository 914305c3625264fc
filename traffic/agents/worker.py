"""An agent worker: ``python -m traffic.agents.worker --hosts FILE --control SOCK``
(or ``--control-tcp ADDRESS:PORT``, the run's secret on stdin: ``channel``).

One process serves many emulated hosts (``FILE``: a JSON list of ``{name, ip,
netns}``): each host's sockets are created in its own network namespace and
kept by this process, so the process count follows the CPUs, not the hosts, and
an idle host costs only its idle sockets. One asyncio loop on a precise timer
(``kernel.PreciseSelector``) does everything; nothing on the send or receive
path blocks or sleeps.

Control, on a Unix socket (or, for a worker on another machine, on an authenticated
TCP channel: ``channel``, the same protocol once the handshake passed): one JSON
object per line, answered by one line ``{"ok": true, ...}`` or ``{"ok": false,
"error": ...}``. Commands: ``ping``;
``load {path}`` (a JSON file of the rows these hosts send, bytes already
scaled, each naming its ``src``; a worker on another machine gets ``load {rows,
part}`` instead, the rows inline in parts); ``prepare`` (open the persistent
connections); ``start {t0_ns}`` (rows with after == -1 are sent at ``t0_ns +
t``); ``release {group, t_ns}`` (the completion group finished at ``t_ns``: its
waiting rows are sent at ``t_ns + t``; no reply); ``add {rows}`` (a live driver's
rows at absolute ``t``; no reply); ``stop_host {host}`` (that host's agent dies: its
sockets close, its rows fail; ``kill_host {host, why}`` is the same posted mid-run,
without a reply); ``status``; ``collect {path}`` (write the
records, ``traffic.agents.records``, the spilled ones included; without ``path``, the
reply carries them); ``stop``. ``subscribe`` turns the
connection into an event stream: lines ``{"ev": [...]}`` with items ``["r",
flow_id, t_end_ns, t_send_ns]`` (a message fully received here; ``t_send_ns`` from its
header), ``["s", flow_id]`` (a
UDP datagram sent) and ``["f", flow_id, error]`` (failed). A TCP message's
completion is its receiver's ``r``; its sender reports only failures.

On another machine (``--control-tcp``) the worker reads its hosts from stdin after
the secret (``--hosts -``) and keeps the coordinator's clock: every instant it is
given, takes, or writes into a header is its own monotonic clock less
``--clock-offset-ns`` (``timebase``).

Rows fire from one heap of due instants behind one timer, so a million rows
cost one timer, not a million. With ``--spill FILE`` the finished records go to that
file every ``--spill-s`` seconds once the run has started (``spill``), so the worker
holds only the records of the last seconds; ``status`` tells how many it holds
(``held``, and ``held_peak`` at any spill) and how many it has written (``spilled``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import logging
import os
import signal
from collections.abc import Iterator
from typing import Any

from topologies.processes import die_with_parent

from ..wire import CONNECTIONS, F_FLOW, F_LEN, F_TSEND, HEADER_LEN, decode, encode
from . import timebase
from .auth import HANDSHAKE_TIMEOUT_S
from .channel import (
    TcpControl,
    announcement,
    end_on_stdin_eof,
    listen,
    parse_bind,
    read_line,
    read_secret,
)
from .host import Endpoint, describe_error, now_ns
from .kernel import PreciseSelector, set_timer_slack
from .pauses import no_full_collections
from .records import Received, Records, Sent, records_doc, write_records
from .spill import SPILL_S, Spill, read_spill

log = logging.getLogger("kvfabric.agent")

PRIORITIES = ("normal", "nice", "rt")
RECEIVE_BUFFER = 256 * 1024
CONTROL_LIMIT = 1 << 24  # a control line (``add``'s rows) may be this long
HOSTS_LINE_MAX = CONTROL_LIMIT
LOAD_PART = 20_000  # rows per inline load: a line well within CONTROL_LIMIT


class Worker:
    """The agent of every host in ``hosts`` (see the module docstring)."""

    def __init__(
        self,
        hosts: list[dict[str, Any]],
        control: str | TcpControl,
        cc: str = "cubic",
        connection: str = "persistent",
        spill: str | None = None,
        spill_s: float = SPILL_S,
    ) -> None:
        if connection not in CONNECTIONS:
            raise ValueError(f"connection={connection!r}; allowed: {', '.join(CONNECTIONS)}")
        self.host_specs = hosts
        self.control, self.cc, self.connection = control, cc, connection
        self.endpoints: dict[str, Endpoint] = {}
        self.rows: list[dict] = []
        self.waiting: dict[int, list[dict]] = {}
        self.sent_records: dict[int, Sent] = {}
        self.recv_records: dict[int, Received] = {}
        self.subscribers: list[asyncio.StreamWriter] = []
        self.events: list[list] = []
        self.counts = {
            "released": 0,
            "fired": 0,
            "framing_errors": 0,
            "sent_ok": 0,
            "sent_failed": 0,
            "received": 0,
            "held_peak": 0,
            "spilled": 0,
        }
        self.spill = Spill(spill) if spill else None
        self.spill_s = spill_s
        self._writing = False
        self.due: list[tuple[int, int, dict]] = []  # (t_ns, seq, row)
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self.buffer = memoryview(bytearray(RECEIVE_BUFFER))
        self._quiet_gc = no_full_collections()
        self.done = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop

    # ----- lifetime -------------------------------------------------------------------
    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        persistent = self.connection == "persistent"
        try:
            for spec in self.host_specs:
                ep = Endpoint(
                    self, spec["name"], spec["ip"], spec.get("netns"), self.cc, persistent
                )
                self.endpoints[ep.name] = ep
                ep.open()
            ctl = await self._listen()
        except BaseException:
            self._close_endpoints()
            raise
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.done.set)
        log.info(
            "agent worker for %d hosts (%s ...)",
            len(self.endpoints),
            ", ".join(list(self.endpoints)[:4]),
        )
        try:
            await self.done.wait()
        finally:
            ctl.close()
            self._close_endpoints()
            if isinstance(self.control, str):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.control)

    async def _listen(self) -> asyncio.Server:
        """The control server: on the Unix socket, or on TCP, its port announced on stdout."""
        if isinstance(self.control, str):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.control)
            return await asyncio.start_unix_server(self._control, self.control, limit=CONTROL_LIMIT)
        server = await listen(self._control, self.control, CONTROL_LIMIT)
        host, port = server.sockets[0].getsockname()[:2]
        os.write(1, announcement(host, port))
        end_on_stdin_eof(self.loop, self.done.set)
        return server

    def _close_endpoints(self) -> None:
        for ep in self.endpoints.values():
            ep.close("the agent stopped")

    # ----- control --------------------------------------------------------------------
    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    msg = decode(line)
                    cmd = msg.get("cmd")
                    if cmd == "subscribe":
                        self.subscribers.append(writer)
                        writer.write(encode({"ok": True}))
                        continue
                    if cmd == "add":  # run-time commands have no reply: nobody waits
                        self._add(msg["rows"])
                        continue
                    if cmd == "release":
                        self._release(int(msg["group"]), int(msg["t_ns"]))
                        continue
                    if cmd == "kill_host":  # an agent_kill, posted mid-run: no reply
                        ep = self.endpoints[msg["host"]]
                        ep.close(f"agent on {ep.name} {msg.get('why', 'killed')}")
                        continue
                    reply = {"ok": True} | await self._command(msg)
                except Exception as exc:  # a bad command is answered, never fatal
                    reply = {"ok": False, "error": describe_error(exc)}
                writer.write(encode(reply))
                await writer.drain()
                if reply.get("stopping"):
                    self.done.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if writer in self.subscribers:
                self.subscribers.remove(writer)
            writer.close()

    async def _command(self, msg: dict[str, Any]) -> dict[str, Any]:
        cmd = msg.get("cmd")
        if cmd == "ping":
            return {"hosts": list(self.endpoints), "pid": os.getpid(), "cc": self.cc}
        if cmd == "load":  # from a file here, or (a worker on another machine) inline
            if "rows" in msg:  # in parts of at most LOAD_PART rows; part 0 starts anew
                self.rows = (self.rows if msg.get("part", 0) else []) + msg["rows"]
            else:
                with open(msg["path"]) as fh:
                    self.rows = json.load(fh)
            unknown = {r["src"] for r in self.rows} - set(self.endpoints)
            if unknown:
                raise ValueError(f"rows from hosts this worker does not serve: {sorted(unknown)}")
            self.waiting = {}
            for row in self.rows:
                if row["after"] >= 0:
                    self.waiting.setdefault(row["after"], []).append(row)
            return {"rows": len(self.rows)}
        if cmd == "prepare":
            return {"failed": await self._prepare()}
        if cmd == "start":
            self._quiet_gc.__enter__()  # until the worker stops: no full collection mid-run
            t0 = int(msg["t0_ns"])
            self._schedule([(t0 + r["t"], r) for r in self.rows if r["after"] < 0])
            if self.spill is not None and self.spill_s > 0:
                self.loop.call_later(self.spill_s, self._spill_due)
            return {}
        if cmd == "stop_host":
            ep = self.endpoints[msg["host"]]
            ep.close(f"agent on {ep.name} {msg.get('why', 'stopped')}")
            return {}
        if cmd == "status":
            return self.counts | {
                "rows": len(self.rows),
                "held": self._held(),
                "due": len(self.due),
                "t_ns": now_ns(),
            }
        if cmd == "collect":
            self._gather_spill()
            records = Records(
                list(self.endpoints),
                self.cc,
                list(self.sent_records.values()),
                list(self.recv_records.values()),
            )
            if "path" not in msg:  # a worker on another machine: the records in the reply
                return {"records": records_doc(records)}
            write_records(msg["path"], records)
            return {"sent": len(records.sent), "recv": len(records.received)}
        if cmd == "stop":
            return {"stopping": True}
        raise ValueError(f"unknown command {cmd!r}")

    async def _prepare(self) -> dict[str, str]:
        """Open every persistent connection the loaded rows will use, all at once."""
        if self.connection != "persistent":
            return {}
        keys = sorted(
            {(r["src"], r["ip"], r["dscp"], r["lane"]) for r in self.rows if r["proto"] == "tcp"}
        )
        failed: dict[str, str] = {}
        for src, *key in keys:
            self.endpoints[src].connect(*key)
        deadline = now_ns() + 6_000_000_000
        while now_ns() < deadline:
            pending = [k for k in keys if self.endpoints[k[0]].outgoing[k[1:]].connecting]
            if not pending:
                break
            await asyncio.sleep(0.01)
        for src, ip, dscp, lane in keys:
            if not self.endpoints[src].outgoing[(ip, dscp, lane)].open:
                where = f"{src}->{ip}/dscp{dscp}" + (f"/lane{lane}" if lane else "")
                failed[where] = "could not connect"
        return failed

    def _add(self, rows: list[dict]) -> None:
        """Rows of a live driver, each sent at its absolute instant ``t``; a row that
        cannot be scheduled is reported failed on the event stream."""
        good = []
        for row in rows:
            if row.get("src") in self.endpoints and isinstance(row.get("t"), int):
                good.append((row["t"], row))
            else:
                self._emit(["f", row.get("fid", -1), f"add: a bad row {str(row)[:120]}"])
        self._schedule(good)

    def _release(self, group: int, t_ns: int) -> None:
        """The completion group finished at ``t_ns``: its rows go out ``t`` after that."""
        self._schedule([(t_ns + r["t"], r) for r in self.waiting.pop(group, [])])

    # ----- firing ---------------------------------------------------------------------
    def _schedule(self, items: list[tuple[int, dict]]) -> None:
        due = self.due
        for t, row in items:
            self._seq += 1
            heapq.heappush(due, (t, self._seq, row))
        self.counts["released"] += len(items)
        self._arm()

    def _arm(self) -> None:
        if not self.due:
            return
        head = self.due[0][0]
        if self._timer is not None:
            if self._timer_at <= head:
                return
            self._timer.cancel()
        self._timer_at = head
        self._timer = self.loop.call_at(timebase.loop_time(head), self._fire_due)

    def _fire_due(self) -> None:
        self._timer = None
        due, now = self.due, now_ns()
        while due and due[0][0] <= now:
            t_sched, _, row = heapq.heappop(due)
            self._fire(row, t_sched)
        self._arm()

    # ----- spilling (``spill``) ----------------------------------------------------------
    def _held(self) -> int:
        queued = len(self.spill.queued) if self.spill else 0
        return len(self.sent_records) + len(self.recv_records) + queued

    def _spill_due(self) -> None:
        """Every ``spill_s``: hand what finished since the last time to the spill file."""
        if self.spill is None or not self.spill_s > 0:
            return
        self.loop.call_later(self.spill_s, self._spill_due)
        self.counts["held_peak"] = max(self.counts["held_peak"], self._held())
        if not self.sent_records and not self.recv_records:
            return
        self.spill.take(self.sent_records, self.recv_records)
        self.sent_records, self.recv_records = {}, {}
        if not self._writing:
            self._writing = True
            self.loop.call_soon(self._spill_batch)

    def _spill_batch(self) -> None:
        """One batch per turn of the loop: the sockets are served between batches."""
        if self.spill is None:  # collected meanwhile
            return
        try:
            more = self.spill.write()
        except OSError as exc:  # a full disk: what is queued stays in memory, for collect
            log.warning("spilling records to %s failed, no more spills: %s", self.spill.path, exc)
            self.spill_s = 0.0
            return
        self.counts["spilled"] = self.spill.written
        if more:
            self.loop.call_soon(self._spill_batch)
        else:
            self._writing = False

    def _gather_spill(self) -> None:
        """Everything spilled back into memory for ``collect`` (the run is over), and
        no more spilling: the file, oldest first, then the queue, then what is held."""
        spill, self.spill = self.spill, None
        if spill is None:
            return
        spill.close()
        sent, recv = read_spill(spill.path)
        for rec in spill.queued:
            if isinstance(rec, Sent):
                sent[rec.flow_id] = rec
            else:
                recv[rec.flow_id] = rec
        self.sent_records = sent | self.sent_records
        self.recv_records = recv | self.recv_records
        self._writing = False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spill.path)  # the records file now holds every record

    def _fire(self, row: dict, t_sched: int) -> None:
        self.counts["fired"] += 1
        ep = self.endpoints[row["src"]]
        if row["proto"] == "udp":
            ep.send_udp(row, t_sched, now_ns())
        else:
            ep.send_tcp(row, t_sched, now_ns())

    # ----- what endpoints report (host.Sink) ------------------------------------------
    def sent(self, row: dict, t_sched: int, t_issue: int, t_start: int) -> None:
        fid = row["fid"]
        self.counts["sent_ok"] += 1
        self.sent_records[fid] = Sent(fid, t_sched, t_issue, t_start, row["bytes"], True, "")
        if row["proto"] == "udp":
            self._emit(["s", fid])

    def failed(self, row: dict, t_sched: int, t_issue: int, t_start: int, error: str) -> None:
        fid = row["fid"]
        self.counts["sent_failed"] += 1
        self.sent_records[fid] = Sent(fid, t_sched, t_issue, t_start, row["bytes"], False, error)
        self._emit(["f", fid, error])

    def received(self, fields: tuple, t_end: int, peer: str) -> None:
        fid = fields[F_FLOW]
        self.counts["received"] += 1
        self.recv_records[fid] = Received(
            fid, t_end, HEADER_LEN + fields[F_LEN], fields[F_TSEND], peer, True, ""
        )
        self._emit(["r", fid, t_end, fields[F_TSEND]])

    def partial(self, fields: tuple, got: int, total: int, peer: str, why: str) -> None:
        fid = fields[F_FLOW]
        err = f"from {peer}: {why} after {got} of {total} bytes"
        self.recv_records[fid] = Received(fid, None, got, fields[F_TSEND], peer, False, err)
        self._emit(["f", fid, err])

    def framing_error(self) -> None:
        self.counts["framing_errors"] += 1

    # ----- events ---------------------------------------------------------------------
    def _emit(self, item: list) -> None:
        if not self.subscribers:
            return
        if not self.events:
            self.loop.call_soon(self._flush)
        self.events.append(item)

    def _flush(self) -> None:
        data, self.events = encode({"ev": self.events}), []
        for w in self.subscribers:
            w.write(data)


def set_priority(priority: str) -> None:
    """Raise this process's CPU priority (root only; a failure is logged, not fatal)."""
    try:
        if priority == "nice":
            os.nice(-10)
        elif priority == "rt":
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError as exc:
        log.warning("could not set priority %s: %s", priority, exc)


@contextlib.contextmanager
def thread_priority(priority: str) -> Iterator[None]:
    """The calling thread at ``priority`` (``set_priority``) while the body runs, then back:
    the coordinator decides what the workers send, so it must not wait behind them."""
    old = os.sched_getscheduler(0), os.sched_getparam(0), os.getpriority(os.PRIO_PROCESS, 0)
    set_priority(priority)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, old[0], old[1])
            os.setpriority(os.PRIO_PROCESS, 0, old[2])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m traffic.agents.worker", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--hosts",
        required=True,
        help="JSON file: [{name, ip, netns}, ...]; "
        "with --control-tcp, '-': one JSON line on stdin after the secret",
    )
    p.add_argument(
        "--clock-offset-ns",
        type=int,
        default=0,
        help="this machine's monotonic clock minus the coordinator's (timebase)",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--control", help="Unix socket path for control")
    where.add_argument(
        "--control-tcp",
        metavar="ADDRESS:PORT",
        help="control over TCP on this cluster address (port 0: any), "
        "authenticated with the secret read from stdin",
    )
    p.add_argument(
        "--handshake-timeout-s",
        type=float,
        default=HANDSHAKE_TIMEOUT_S,
        help="a TCP control peer that has not proved the secret by then is closed",
    )
    p.add_argument("--cc", default="cubic")
    p.add_argument("--connection", default="persistent", choices=CONNECTIONS)
    p.add_argument("--spill", help="append finished records to this file during the run")
    p.add_argument("--spill-s", type=float, default=SPILL_S, help="seconds between spills")
    p.add_argument("--log-level", default="INFO")
    p.add_argument(
        "--priority",
        default="normal",
        choices=PRIORITIES,
        help="normal; nice (-10); rt (SCHED_FIFO 1): prompter wake-ups",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s: %(message)s")
    control: str | TcpControl = args.control
    hosts: list[dict[str, Any]] | None = None
    if args.control_tcp is not None:
        try:
            host, port = parse_bind(args.control_tcp)
            control = TcpControl(host, port, read_secret(), args.handshake_timeout_s)
            if args.hosts == "-":
                hosts = json.loads(read_line(0, "the hosts line", HOSTS_LINE_MAX))
        except ValueError as exc:
            log.error("%s", exc)
            return 2
    elif args.hosts == "-":
        log.error("--hosts - needs --control-tcp (stdin carries the secret, then the hosts)")
        return 2
    timebase.set_offset(args.clock_offset_ns)
    die_with_parent()
    set_priority(args.priority)
    with contextlib.suppress(OSError):
        set_timer_slack(1)
    if hosts is None:
        with open(args.hosts) as fh:
            hosts = json.load(fh)
    worker = Worker(hosts, control, args.cc, args.connection, args.spill, args.spill_s)
    loop = asyncio.SelectorEventLoop(PreciseSelector())
    try:
        loop.run_until_complete(worker.serve())
    except OSError as exc:
        log.error("%s", exc)
        return 3
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

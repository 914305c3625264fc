"""The per-host traffic agent: ``python -m traffic.agent --host h0 --ip 10.0.0.1 --control SOCK``.

One process per emulated host, started in the host's network namespace by
``traffic.fleet.AgentFleet``. A single asyncio loop does everything, so a
sender busy writing one big flow never delays another flow's start:

- **control** on a Unix socket (namespaces share the filesystem): one JSON
  object per line, answered by one line ``{"ok": true, ...}`` or
  ``{"ok": false, "error": ...}``. Commands: ``ping``; ``load {path}`` (a JSON
  file of this host's rows, bytes already scaled); ``prepare`` (open the
  persistent connections); ``start {t0_ns}`` (rows with after == -1 are sent at
  ``t0_ns + t``); ``release {group, t_ns}`` (the completion group finished at
  ``t_ns``: its waiting rows are sent at ``t_ns + t``); ``status``; ``collect
  {path}`` (write the records there); ``stop``. ``subscribe`` turns the
  connection into an event stream: lines ``{"ev": [...]}`` with items
  ``["r", flow_id, t_end_ns]`` (a message fully received here), ``["s",
  flow_id]`` (sent completely) and ``["f", flow_id, error]`` (failed).
- **senders**: each row fires at its absolute ``time.monotonic_ns()`` instant
  (the loop wakes ``early_ns`` before and sleeps the rest, because epoll
  waits in whole milliseconds). TCP sockets get ``TCP_CONGESTION`` (default
  cubic), ``TCP_NODELAY`` and ``IP_TOS = dscp << 2`` when dscp > 0. In
  ``persistent`` mode there is one connection per (destination, DSCP), opened
  by ``prepare`` (or on first use); concurrent messages on it are serialised
  in the order they fired, so a message's ``t_start`` is when its header is
  written, after the messages ahead of it (``t_issue`` is when it fired). In
  ``per_flow`` mode each message connects, sends and closes; ``t_start`` is
  taken before the connect. UDP rows are one datagram each.
- **receiver** on ``AGENT_PORT`` (TCP and UDP) at the host's IP: messages are
  framed back to back by the header length; ``t_end`` is taken when the read
  holding a message's last byte is processed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
from typing import Any

from .agent_recv import CHUNK, TcpReceiver, UdpReceiver, describe_error, now_ns
from .agent_wire import AGENT_PORT, F_FLOW, F_LEN, F_TSEND, HEADER_LEN, decode, encode, pack

log = logging.getLogger("kvfabric.agent")

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
ZEROS = memoryview(bytes(CHUNK))
CONNECT_TIMEOUT_S = 5.0
_err = describe_error


class _Conn:
    """A persistent connection. The peer never writes on it, so readability means the
    peer closed or reset it: the socket is shut down, and the next message reconnects."""

    __slots__ = ("lock", "sock", "broken")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.sock: socket.socket | None = None
        self.broken = False

    def attach(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.sock, self.broken = sock, False
        loop.add_reader(sock.fileno(), self._readable, loop)

    def _readable(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.sock is not None
        try:
            if self.sock.recv(4096):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        loop.remove_reader(self.sock.fileno())
        self.broken = True
        with contextlib.suppress(OSError):  # a write in progress now fails at once
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.sock is not None:
            loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None


class Agent:
    def __init__(self, host: str, ip: str, control: str, cc: str, connection: str,
                 early_ns: int = 1_500_000) -> None:  # fmt: skip
        if connection not in ("persistent", "per_flow"):
            raise ValueError(f"connection={connection!r}; allowed: persistent, per_flow")
        self.host, self.ip, self.control = host, ip, control
        self.cc, self.cc_bytes = cc, cc.encode()
        self.persistent = connection == "persistent"
        self.early_ns = early_ns
        self.rows: list[dict] = []
        self.waiting: dict[int, list[dict]] = {}
        # flow_id -> [t_sched, t_issue, t_start, bytes, ok, error]
        self.sent: dict[int, list] = {}
        # flow_id -> [t_end, bytes, t_send, peer, ok, error]
        self.recv: dict[int, list] = {}
        self.conns: dict[tuple[str, int], _Conn] = {}
        self.udp: dict[int, socket.socket] = {}
        self.tasks: set[asyncio.Task] = set()
        self.subscribers: list[asyncio.StreamWriter] = []
        self.events: list[list] = []
        self.counts = {"released": 0, "fired": 0, "framing_errors": 0}
        self.done = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop

    # ----- lifetime ---------------------------------------------------------------
    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((self.ip, AGENT_PORT))
        lsock.listen(1024)
        tcp = await self.loop.create_server(lambda: TcpReceiver(self), sock=lsock)
        udp, _ = await self.loop.create_datagram_endpoint(
            lambda: UdpReceiver(self), local_addr=(self.ip, AGENT_PORT)
        )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.control)
        ctl = await asyncio.start_unix_server(self._control, self.control, limit=1 << 20)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.done.set)
        log.info("agent %s listening on %s:%d", self.host, self.ip, AGENT_PORT)
        try:
            await self.done.wait()
        finally:
            ctl.close()
            tcp.close()
            udp.close()
            for task in list(self.tasks):
                task.cancel()
            for conn in self.conns.values():
                conn.close(self.loop)
            for s in self.udp.values():
                s.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.control)

    # ----- control ----------------------------------------------------------------
    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    msg = decode(line)
                    if msg.get("cmd") == "subscribe":
                        self.subscribers.append(writer)
                        writer.write(encode({"ok": True}))
                        continue
                    if msg.get("cmd") == "add":
                        self._add(msg["rows"])  # no reply: the coordinator does not wait
                        continue
                    reply = {"ok": True} | await self._command(msg)
                except Exception as exc:  # a bad command is answered, never fatal
                    reply = {"ok": False, "error": _err(exc)}
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
            return {"host": self.host, "pid": os.getpid(), "cc": self.cc}
        if cmd == "load":
            with open(msg["path"]) as fh:
                self.rows = json.load(fh)
            self.waiting = {}
            for row in self.rows:
                if row["after"] >= 0:
                    self.waiting.setdefault(row["after"], []).append(row)
            return {"rows": len(self.rows)}
        if cmd == "prepare":
            return {"failed": await self._prepare()}
        if cmd == "start":
            t0 = int(msg["t0_ns"])
            for row in self.rows:
                if row["after"] < 0:
                    self._schedule(row, t0 + row["t"])
            return {}
        if cmd == "release":
            t = int(msg["t_ns"])
            rows = self.waiting.pop(int(msg["group"]), [])
            for row in rows:
                self._schedule(row, t + row["t"])
            return {"released": len(rows)}
        if cmd == "status":
            ok = sum(1 for r in self.sent.values() if r[4])
            return self.counts | {"rows": len(self.rows), "sent_ok": ok,
                                  "sent_failed": len(self.sent) - ok, "received": len(self.recv),
                                  "active": len(self.tasks), "t_ns": now_ns()}  # fmt: skip
        if cmd == "collect":
            records = {"host": self.host, "cc": self.cc,
                       "sent": [[f, *r] for f, r in self.sent.items()],
                       "recv": [[f, *r] for f, r in self.recv.items()]}  # fmt: skip
            with open(msg["path"], "w") as fh:
                json.dump(records, fh, separators=(",", ":"))
            return {"sent": len(self.sent), "recv": len(self.recv)}
        if cmd == "stop":
            return {"stopping": True}
        raise ValueError(f"unknown command {cmd!r}")

    def _add(self, rows: list[dict]) -> None:
        """Rows of a live driver, each sent at its absolute instant ``t``. ``add`` has no
        reply: a row that cannot be scheduled is reported failed on the event stream."""
        for row in rows:
            try:
                self._schedule(row, int(row["t"]))
            except Exception as exc:
                self._emit(["f", row.get("fid", -1), f"add: {_err(exc)}"])

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

    # ----- sending ----------------------------------------------------------------
    async def _prepare(self) -> dict[str, str]:
        failed: dict[str, str] = {}
        if not self.persistent:
            return failed
        for key in sorted({(r["ip"], r["dscp"]) for r in self.rows if r["proto"] == "tcp"}):
            conn = self.conns.setdefault(key, _Conn())
            async with conn.lock:
                if conn.sock is None:
                    try:
                        conn.attach(self.loop, await self._connect(*key))
                    except (OSError, TimeoutError) as exc:
                        failed[f"{key[0]}/dscp{key[1]}"] = _err(exc)
        return failed

    def _schedule(self, row: dict, t_sched: int) -> None:
        self.counts["released"] += 1
        self.loop.call_at((t_sched - self.early_ns) / 1e9, self._fire, row, t_sched)

    def _fire(self, row: dict, t_sched: int) -> None:
        left = t_sched - now_ns()
        if left > 0:
            time.sleep(left / 1e9)
        self.counts["fired"] += 1
        if row["proto"] == "udp":
            self._send_udp(row, t_sched)
        else:
            task = self.loop.create_task(self._send_tcp(row, t_sched, now_ns()))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _record(self, row: dict, t_sched: int, t_issue: int, t_start: int, err: str) -> None:
        fid = row["fid"]
        self.sent[fid] = [t_sched, t_issue, t_start, row["bytes"], not err, err]
        self._emit(["f", fid, err] if err else ["s", fid])

    async def _connect(self, ip: str, dscp: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, self.cc_bytes)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if dscp > 0:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await self.loop.sock_connect(sock, (ip, AGENT_PORT))
        except BaseException:
            sock.close()
            raise
        return sock

    async def _write(self, sock: socket.socket, row: dict, t_start: int) -> None:
        length = row["bytes"] - HEADER_LEN
        head = pack(row["kind"], row["fid"], length, row["req"], row["layer"], row["chunk"],
                    row["tenant"], t_start)  # fmt: skip
        first = min(length, CHUNK - HEADER_LEN)
        await self.loop.sock_sendall(sock, head + ZEROS[:first])
        left = length - first
        while left > 0:
            n = min(left, CHUNK)
            await self.loop.sock_sendall(sock, ZEROS[:n])
            left -= n

    async def _send_tcp(self, row: dict, t_sched: int, t_issue: int) -> None:
        key = (row["ip"], row["dscp"])
        t_start = t_issue
        try:
            if self.persistent:
                conn = self.conns.setdefault(key, _Conn())
                async with conn.lock:
                    if conn.broken:
                        conn.close(self.loop)
                    if conn.sock is None:
                        conn.attach(self.loop, await self._connect(*key))
                    t_start = now_ns()
                    try:
                        await self._write(conn.sock, row, t_start)
                    except BaseException:
                        conn.close(self.loop)  # the stream is broken mid-message
                        raise
            else:
                t_start = now_ns()
                sock = await self._connect(*key)
                try:
                    await self._write(sock, row, t_start)
                finally:
                    sock.close()
        except (OSError, TimeoutError) as exc:
            self._record(row, t_sched, t_issue, t_start, f"{row['dst']}: {_err(exc)}")
        else:
            self._record(row, t_sched, t_issue, t_start, "")

    def _send_udp(self, row: dict, t_sched: int) -> None:
        dscp = row["dscp"]
        sock = self.udp.get(dscp)
        t_start = now_ns()
        try:
            if sock is None:
                sock = self.udp[dscp] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.setblocking(False)
                if dscp > 0:
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
            length = row["bytes"] - HEADER_LEN
            head = pack(row["kind"], row["fid"], length, row["req"], row["layer"], row["chunk"],
                        row["tenant"], t_start)  # fmt: skip
            sock.sendto(head + ZEROS[:length], (row["ip"], AGENT_PORT))
        except OSError as exc:
            self._record(row, t_sched, t_start, t_start, f"{row['dst']}: {_err(exc)}")
        else:
            self._record(row, t_sched, t_start, t_start, "")

    # ----- receiving --------------------------------------------------------------
    def received(self, fields: tuple, t_end: int, peer: str) -> None:
        fid = fields[F_FLOW]
        self.recv[fid] = [t_end, HEADER_LEN + fields[F_LEN], fields[F_TSEND], peer, True, ""]
        self._emit(["r", fid, t_end])

    def partial(self, fields: tuple, got: int, total: int, peer: str, why: str) -> None:
        fid = fields[F_FLOW]
        err = f"from {peer}: {why} after {got} of {total} bytes"
        self.recv[fid] = [None, got, fields[F_TSEND], peer, False, err]
        self._emit(["f", fid, err])


PRIORITIES = ("normal", "nice", "rt")


def set_priority(priority: str) -> None:
    """Raise this process's CPU priority (root only; a failure is logged, not fatal)."""
    try:
        if priority == "nice":
            os.nice(-10)
        elif priority == "rt":
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError as exc:
        log.warning("could not set priority %s: %s", priority, exc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traffic.agent", description=__doc__.split("\n")[0])
    p.add_argument("--host", required=True)
    p.add_argument("--ip", required=True)
    p.add_argument("--control", required=True, help="Unix socket path for control")
    p.add_argument("--cc", default="cubic")
    p.add_argument("--connection", default="persistent", choices=["persistent", "per_flow"])
    p.add_argument("--early-us", type=int, default=1500)
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--priority", default="normal", choices=PRIORITIES,
                   help="normal; nice (-10); rt (SCHED_FIFO 1): prompter wake-ups")  # fmt: skip
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s: %(message)s")
    set_priority(args.priority)
    agent = Agent(args.host, args.ip, args.control, args.cc, args.connection,
                  args.early_us * 1000)  # fmt: skip
    asyncio.run(agent.serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

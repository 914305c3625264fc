"""One emulated host inside an agent worker: its sockets, created in the host's
network namespace, and the non-blocking send and receive paths on them.

- ``Endpoint``: the host's TCP listener and UDP socket on ``(ip, AGENT_PORT)``,
  its outgoing connections (one per destination, DSCP and lane when persistent) and
  UDP senders (one per DSCP). Every socket is made inside the host's namespace
  (``kernel.netns``) and used from the worker's one event loop.
- ``Outgoing``: one TCP connection's send queue. A message is written the moment
  it fires if the connection is free; messages that fire while it is busy wait in
  order and are written together, several per ``sendmsg`` (small messages are
  thus coalesced only when the socket is the bottleneck, never delayed).
  ``t_start`` is the instant of the ``sendmsg`` that took the message's first byte.
- ``Incoming``: one accepted connection: reads into the worker's shared buffer,
  deframes, and timestamps each message when the read holding its last byte
  returns.

The endpoint reports to its ``Sink`` (the worker): ``sent``, ``failed``,
``received``, ``partial``; it never touches the schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from collections import deque
from typing import Protocol

from ..wire import AGENT_PORT, HEADER_LEN, Deframer, FramingError, pack
from .kernel import netns
from .timebase import now_ns  # the coordinator's clock (another machine: offset)

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
CHUNK = 256 * 1024
ZEROS = memoryview(bytes(CHUNK))
WRITE_BYTES = 1 << 20  # at most this much per sendmsg
WRITE_MESSAGES = 64
CONNECT_TIMEOUT_S = 5.0


def describe_error(exc: BaseException | int) -> str:
    """``ExceptionType: reason`` for a flow's error column (an errno as OSError would name it)."""
    if isinstance(exc, int):
        return f"{_ERRNO_NAMES.get(exc, 'OSError')}: {os.strerror(exc)}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


_ERRNO_NAMES = {
    errno.ECONNREFUSED: "ConnectionRefusedError",
    errno.ECONNRESET: "ConnectionResetError",
    errno.EPIPE: "BrokenPipeError",
    errno.ETIMEDOUT: "TimeoutError",
    errno.EHOSTUNREACH: "OSError",
}


class Sink(Protocol):
    """What an endpoint reports to (the worker)."""

    loop: asyncio.AbstractEventLoop
    buffer: memoryview

    def sent(self, row: dict, t_sched: int, t_issue: int, t_start: int) -> None: ...

    def failed(self, row: dict, t_sched: int, t_issue: int, t_start: int, error: str) -> None: ...

    def received(self, fields: tuple, t_end: int, peer: str) -> None: ...

    def partial(self, fields: tuple, got: int, total: int, peer: str, why: str) -> None: ...

    def framing_error(self) -> None: ...


class _Out:
    """A message on its way out: the row, its instants, and how much is written."""

    __slots__ = ("row", "t_sched", "t_issue", "t_start", "total", "done", "head")

    def __init__(self, row: dict, t_sched: int, t_issue: int) -> None:
        self.row, self.t_sched, self.t_issue = row, t_sched, t_issue
        self.t_start = 0
        self.total = row["bytes"]  # header included
        self.done = 0
        self.head = b""


class Outgoing:
    """One TCP connection and its ordered send queue (see the module docstring)."""

    def __init__(self, ep: Endpoint, ip: str, dscp: int, persistent: bool) -> None:
        self.ep, self.ip, self.dscp, self.persistent = ep, ip, dscp, persistent
        self.sock: socket.socket | None = None
        self.queue: deque[_Out] = deque()
        self.connecting = False
        self.waiting_writable = False
        self._timeout: asyncio.TimerHandle | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.ep.sink.loop

    @property
    def open(self) -> bool:
        return self.sock is not None and not self.connecting

    def send(self, out: _Out) -> None:
        self.queue.append(out)
        if self.sock is None:
            self.connect()
        elif not self.connecting and not self.waiting_writable:
            self.pump()

    # ----- connecting ----------------------------------------------------------------
    def connect(self) -> None:
        try:
            sock = self.ep.socket(socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, self.ep.cc)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.dscp > 0:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.dscp << 2)
        except OSError as exc:
            self._fail_all(describe_error(exc))
            return
        for out in self.queue:
            if not self.persistent:  # per_flow: the message's start includes the connect
                out.t_start = now_ns()
        code = sock.connect_ex((self.ip, AGENT_PORT))
        self.sock = sock
        if code == 0:
            self._connected()
        elif code == errno.EINPROGRESS:
            self.connecting = True
            self.loop.add_writer(sock.fileno(), self._connect_done)
            self._timeout = self.loop.call_later(CONNECT_TIMEOUT_S, self._connect_timeout)
        else:
            self._close()
            self._fail_all(describe_error(code))

    def _connect_done(self) -> None:
        assert self.sock is not None
        self.loop.remove_writer(self.sock.fileno())
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None
        self.connecting = False
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._close()
            self._fail_all(describe_error(code))
            return
        self._connected()

    def _connect_timeout(self) -> None:
        self._timeout = None
        if self.sock is not None:
            self.loop.remove_writer(self.sock.fileno())
        self.connecting = False
        self._close()
        self._fail_all("TimeoutError: connect timed out")

    def _connected(self) -> None:
        assert self.sock is not None
        # The peer never writes on this connection: readability means it closed or reset.
        self.loop.add_reader(self.sock.fileno(), self._readable)
        if self.queue:
            self.pump()

    def _readable(self) -> None:
        assert self.sock is not None
        try:
            if self.sock.recv(4096):
                return
            why = "connection closed by the peer"
        except BlockingIOError:
            return
        except OSError as exc:
            why = describe_error(exc)
        self._broken(why)

    # ----- writing -------------------------------------------------------------------
    def pump(self) -> None:
        """Write queued messages until the queue is empty or the socket is full."""
        sock = self.sock
        assert sock is not None
        queue = self.queue
        while queue:
            iov: list = []
            size = 0
            now = now_ns()
            for out in queue:
                if len(iov) >= WRITE_MESSAGES or size >= WRITE_BYTES:
                    break
                if out.done < HEADER_LEN:
                    if out.done == 0:
                        if self.persistent:  # per_flow: t_start was taken before the connect
                            out.t_start = now
                        r = out.row
                        out.head = pack(
                            r["kind"],
                            r["fid"],
                            out.total - HEADER_LEN,
                            r["req"],
                            r["layer"],
                            r["chunk"],
                            r["tenant"],
                            out.t_start,
                        )
                    iov.append(out.head[out.done :])
                    size += HEADER_LEN - out.done
                left = out.total - max(out.done, HEADER_LEN)
                while left > 0 and size < WRITE_BYTES:
                    n = min(left, CHUNK, WRITE_BYTES - size)
                    iov.append(ZEROS[:n])
                    size += n
                    left -= n
                if left > 0:
                    break
            try:
                n = sock.sendmsg(iov)
            except BlockingIOError:
                n = -1
            except OSError as exc:
                self._broken(describe_error(exc))
                return
            if n < 0:
                if not self.waiting_writable:
                    self.waiting_writable = True
                    self.loop.add_writer(sock.fileno(), self._writable)
                return
            self._advance(n)
        if self.waiting_writable:
            self.waiting_writable = False
            self.loop.remove_writer(sock.fileno())
        if not self.persistent and not queue:
            self._close()

    def _writable(self) -> None:
        self.pump()

    def _advance(self, n: int) -> None:
        """``n`` more bytes were taken by the kernel: finish the messages they complete."""
        queue = self.queue
        while n > 0 and queue:
            out = queue[0]
            take = min(n, out.total - out.done)
            out.done += take
            n -= take
            if out.done == out.total:
                queue.popleft()
                self.ep.sink.sent(out.row, out.t_sched, out.t_issue, out.t_start)

    # ----- failure -------------------------------------------------------------------
    def _broken(self, why: str) -> None:
        """The connection failed: a message it was half way through fails; the
        messages behind it go out on a new connection."""
        self._close()
        if self.queue and self.queue[0].done > 0:  # only the head can be half written
            self._fail(self.queue.popleft(), why)
        if self.queue:
            self.connect()

    def _fail(self, out: _Out, why: str) -> None:
        self.ep.sink.failed(
            out.row,
            out.t_sched,
            out.t_issue,
            out.t_start or out.t_issue,
            f"{out.row['dst']}: {why}",
        )

    def _fail_all(self, why: str) -> None:
        while self.queue:
            self._fail(self.queue.popleft(), why)

    def _close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is None:
            return
        fd = sock.fileno()
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(fd)
            self.loop.remove_writer(fd)
        self.waiting_writable = self.connecting = False
        sock.close()

    def close(self, why: str) -> None:
        """Stop: every queued message fails with ``why``."""
        self._close()
        self._fail_all(why)


class Incoming:
    """One accepted connection (see the module docstring)."""

    __slots__ = ("ep", "sock", "peer", "deframer")

    def __init__(self, ep: Endpoint, sock: socket.socket, peer: str) -> None:
        self.ep, self.sock, self.peer = ep, sock, peer
        self.deframer = Deframer()
        ep.sink.loop.add_reader(sock.fileno(), self.readable)

    def readable(self) -> None:
        sink = self.ep.sink
        buf = sink.buffer
        try:
            n = self.sock.recv_into(buf)
        except BlockingIOError:
            return
        except OSError as exc:
            self.end(describe_error(exc))
            return
        if n == 0:
            self.end("connection closed")
            return
        t = now_ns()
        try:
            for fields in self.deframer.feed(buf[:n]):
                sink.received(fields, t, self.peer)
        except FramingError:
            sink.framing_error()
            self.deframer = Deframer()
            self.close()

    def end(self, why: str) -> None:
        pending = self.deframer.pending
        if pending and pending[0] is not None:
            self.ep.sink.partial(pending[0], pending[1], pending[2], self.peer, why)
        self.close()

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.ep.sink.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        self.ep.incoming.discard(self)


class Endpoint:
    """One emulated host's sockets (see the module docstring)."""

    def __init__(
        self, sink: Sink, name: str, ip: str, netns_path: str | None, cc: str, persistent: bool
    ) -> None:
        self.sink, self.name, self.ip, self.netns_path = sink, name, ip, netns_path
        self.cc = cc.encode()
        self.persistent = persistent
        self.outgoing: dict[tuple[str, int, int], Outgoing] = {}  # (ip, dscp, lane)
        self.incoming: set[Incoming] = set()
        self.udp_out: dict[int, socket.socket] = {}
        self.listener: socket.socket | None = None
        self.udp_in: socket.socket | None = None
        self.stopped = ""

    def socket(self, kind: int) -> socket.socket:
        """A non-blocking socket in this host's network namespace."""
        with netns(self.netns_path):
            sock = socket.socket(socket.AF_INET, kind)
        sock.setblocking(False)
        return sock

    def open(self) -> None:
        """Listen for TCP and UDP on ``(ip, AGENT_PORT)``; raises OSError naming the host."""
        loop = self.sink.loop
        try:
            lsock = self.socket(socket.SOCK_STREAM)
            self.listener = lsock
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind((self.ip, AGENT_PORT))
            lsock.listen(1024)
            usock = self.socket(socket.SOCK_DGRAM)
            self.udp_in = usock
            usock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
            usock.bind((self.ip, AGENT_PORT))
        except OSError as exc:
            self.close("could not listen")
            raise OSError(
                exc.errno,
                f"{self.name} cannot listen on {self.ip}:{AGENT_PORT}: {exc.strerror or exc}",
            ) from None
        loop.add_reader(lsock.fileno(), self._accept)
        loop.add_reader(usock.fileno(), self._datagrams)

    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(False)
            self.incoming.add(Incoming(self, sock, addr[0]))

    def _datagrams(self) -> None:
        assert self.udp_in is not None
        sink, buf = self.sink, self.sink.buffer
        while True:
            try:
                n, addr = self.udp_in.recvfrom_into(buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            t = now_ns()
            try:
                for fields in Deframer().feed(buf[:n]):
                    sink.received(fields, t, addr[0])
            except FramingError:
                sink.framing_error()

    # ----- sending -------------------------------------------------------------------
    def send_tcp(self, row: dict, t_sched: int, t_issue: int) -> None:
        out = _Out(row, t_sched, t_issue)
        if self.stopped:
            self.sink.failed(row, t_sched, t_issue, t_issue, self.stopped)
            return
        if not self.persistent:
            Outgoing(self, row["ip"], row["dscp"], persistent=False).send(out)
            return
        self._persistent(row["ip"], row["dscp"], row["lane"]).send(out)

    def send_udp(self, row: dict, t_sched: int, t_issue: int) -> None:
        if self.stopped:
            self.sink.failed(row, t_sched, t_issue, t_issue, self.stopped)
            return
        dscp = row["dscp"]
        t_start = now_ns()
        try:
            sock = self.udp_out.get(dscp)
            if sock is None:
                sock = self.udp_out[dscp] = self.socket(socket.SOCK_DGRAM)
                if dscp > 0:
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
            length = row["bytes"] - HEADER_LEN
            head = pack(
                row["kind"],
                row["fid"],
                length,
                row["req"],
                row["layer"],
                row["chunk"],
                row["tenant"],
                t_start,
            )
            sock.sendto(head + ZEROS[:length], (row["ip"], AGENT_PORT))
        except OSError as exc:
            self.sink.failed(row, t_sched, t_issue, t_start, f"{row['dst']}: {describe_error(exc)}")
        else:
            self.sink.sent(row, t_sched, t_issue, t_start)

    def connect(self, ip: str, dscp: int, lane: int = 0) -> Outgoing:
        """Open the persistent connection to ``ip`` with ``dscp`` in ``lane`` ahead of the
        traffic."""
        conn = self._persistent(ip, dscp, lane)
        if conn.sock is None:
            conn.connect()
        return conn

    def _persistent(self, ip: str, dscp: int, lane: int) -> Outgoing:
        """The persistent connection of (``ip``, ``dscp``, ``lane``), made on first use."""
        key = (ip, dscp, lane)
        conn = self.outgoing.get(key)
        if conn is None:
            conn = self.outgoing[key] = Outgoing(self, ip, dscp, persistent=True)
        return conn

    # ----- lifetime ------------------------------------------------------------------
    def close(self, why: str = "stopped") -> None:
        """Close every socket of the host; queued messages fail with ``why``."""
        self.stopped = self.stopped or why
        loop = self.sink.loop
        for sock in (self.listener, self.udp_in):
            if sock is not None:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(sock.fileno())
                sock.close()
        self.listener = self.udp_in = None
        for conn in list(self.outgoing.values()):
            conn.close(self.stopped)
        self.outgoing.clear()
        for inc in list(self.incoming):
            inc.close()
        for sock in self.udp_out.values():
            sock.close()
        self.udp_out.clear()

"""The agent's receiving side: asyncio protocols for TCP connections and UDP datagrams.

Both timestamp a message when the read holding its last byte is processed and
hand ``(header tuple, t_end_ns, peer)`` to the agent (``received``), or a
half-received message at EOF/reset to ``partial``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .agent_wire import Deframer, FramingError

log = logging.getLogger("kvfabric.agent")

CHUNK = 256 * 1024
now_ns = time.monotonic_ns


def describe_error(exc: BaseException) -> str:
    """``ExceptionType: reason`` for a flow's error column."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class TcpReceiver(asyncio.BufferedProtocol):
    """One accepted TCP connection: deframes messages and timestamps their ends."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.buf = memoryview(bytearray(CHUNK))
        self.deframer = Deframer()
        self.peer = "?"
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if peer else "?"

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        t = now_ns()
        try:
            for fields in self.deframer.feed(self.buf[:nbytes]):
                self.agent.received(fields, t, self.peer)
        except FramingError as exc:
            self.agent.counts["framing_errors"] += 1
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.deframer = Deframer()
            assert self.transport is not None
            self.transport.abort()

    def eof_received(self) -> bool:
        self._partial("connection closed")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._partial(describe_error(exc) if exc else "connection closed")

    def _partial(self, why: str) -> None:
        pending = self.deframer.pending
        if pending and pending[0] is not None:
            self.agent.partial(pending[0], pending[1], pending[2], self.peer, why)
        self.deframer = Deframer()


class UdpReceiver(asyncio.DatagramProtocol):
    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        t = now_ns()
        try:
            fields = Deframer().feed(data)
        except FramingError:
            self.agent.counts["framing_errors"] += 1
            return
        for f in fields:
            self.agent.received(f, t, addr[0])

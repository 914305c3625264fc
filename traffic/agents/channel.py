"""The TCP control channel of a worker on another machine: where it listens, how it
learns the run's secret and tells its port, and the authenticated connection.

``--control-tcp HOST:PORT`` names a cluster address of the worker's machine (an IP
literal; never the unspecified ``0.0.0.0`` or ``::``: the channel must not be
reachable from the fabric or the outside) and a port (0: any). The worker reads the
secret as one hex line on its stdin (never argv or the environment, which ``ps``
shows), listens, and writes one line on its stdout, ``{"control_tcp": [host, port]}``,
which the launcher reads. Each connection must pass ``auth.server_handshake`` before
its first control line; a refusal is logged with the peer's address and the
connection closed with no reply. The worker also ends when its stdin closes: behind
ssh, that is when the coordinator's ssh process ends, however it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..wire import decode, encode
from . import auth

log = logging.getLogger("kvfabric.agent")

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
ANNOUNCE_KEY = "control_tcp"
_SECRET_LINE_MAX = 2 * auth.SECRET_LEN + 2


@dataclass(frozen=True)
class TcpControl:
    """Where a worker's TCP control channel listens, and the run's secret."""

    host: str
    port: int
    secret: bytes
    handshake_timeout_s: float = auth.HANDSHAKE_TIMEOUT_S


def parse_bind(text: str) -> tuple[str, int]:
    """``10.251.0.12:0`` or ``[fd00::2]:4711`` -> (host, port); refuses a host that is
    not an IP literal, the unspecified addresses and a port outside 0..65535."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        address = ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise ValueError(f"--control-tcp {text!r}: give ADDRESS:PORT, e.g. 10.251.0.12:0") from None
    if not sep or not 0 <= number <= 65535:
        raise ValueError(f"--control-tcp {text!r}: the port must be 0..65535 (0: any)")
    if address.is_unspecified:
        raise ValueError(
            f"--control-tcp {text!r}: bind a cluster address, not every address of the machine"
        )
    return str(address), number


def read_line(fd: int, what: str, limit: int) -> bytes:
    """One line of ``fd``, read byte by byte so that nothing after it is taken from the
    stream (the stdin watchdog reads the rest)."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise ValueError(f"stdin closed before {what} was read")
        line += byte
        if len(line) > limit:
            raise ValueError(f"{what} on stdin is longer than {limit} bytes")
    return bytes(line)


def read_secret(fd: int = 0) -> bytes:
    """The run's secret: one hex line on ``fd`` (``read_line``)."""
    line = read_line(fd, "the run's secret", _SECRET_LINE_MAX)
    try:
        secret = bytes.fromhex(line.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise ValueError("the secret on stdin is not hex") from None
    if len(secret) != auth.SECRET_LEN:
        raise ValueError(f"the secret on stdin has {len(secret)} bytes, not {auth.SECRET_LEN}")
    return secret


def secret_line(secret: bytes) -> bytes:
    """What the launcher writes on a worker's stdin (``read_secret``)."""
    return secret.hex().encode() + b"\n"


def announcement(host: str, port: int) -> bytes:
    return encode({ANNOUNCE_KEY: [host, port]})


def read_announcement(line: bytes) -> tuple[str, int]:
    """(host, port) of a worker's announcement line; raises ValueError if it is not one."""
    host, port = decode(line)[ANNOUNCE_KEY]
    return str(host), int(port)


async def listen(handler: Handler, tcp: TcpControl, limit: int) -> asyncio.Server:
    """A TCP server on ``tcp``'s address whose connections reach ``handler`` only once
    they passed the handshake."""

    async def authenticated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            await auth.server_handshake(reader, writer, tcp.secret, tcp.handshake_timeout_s)
            await writer.drain()
        except (auth.HandshakeError, ConnectionError) as exc:
            log.warning("refused a control connection from %s: %s", _peer_text(peer), exc)
            writer.transport.abort()  # no reply, nothing buffered goes out
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:  # posted commands are small and due now: no Nagle delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await handler(reader, writer)

    return await asyncio.start_server(
        authenticated, tcp.host, tcp.port, limit=limit, reuse_address=True
    )


def _peer_text(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def end_on_stdin_eof(
    loop: asyncio.AbstractEventLoop, end: Callable[[], None], fd: int = 0
) -> threading.Thread:
    """A daemon thread that reads ``fd`` to its end, then calls ``end`` on ``loop``."""

    def watch() -> None:
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(end)

    thread = threading.Thread(target=watch, name="stdin-watchdog", daemon=True)
    thread.start()
    return thread


def connect(address: tuple[str, int], secret: bytes, timeout: float) -> socket.socket:
    """A blocking TCP connection to a worker's control channel, authenticated both ways."""
    sock = socket.create_connection(address, timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        auth.client_handshake(sock, secret)
    except BaseException:
        sock.close()
        raise
    return sock

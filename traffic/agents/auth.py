"""The run's secret and the handshake that opens a worker's TCP control channel.

A worker on another machine is reached over TCP on the cluster's addresses; only
the coordinator that started it, which knows the run's secret (``new_secret``,
handed to the worker on its stdin), may drive it. Before any control line, both
sides prove they know the secret without sending it (HMAC-SHA256 over both nonces):

    worker -> client   CHALLENGE = MAGIC version server_nonce           (37 bytes)
    client -> worker   RESPONSE  = MAGIC version client_nonce mac_c     (69 bytes)
    worker -> client   PROOF     = mac_s                                (32 bytes)

    mac_c = HMAC(secret, LABEL version "client" server_nonce client_nonce)
    mac_s = HMAC(secret, LABEL version "server" server_nonce client_nonce)

The worker speaks first, so a peer without the secret gets a random nonce and
nothing computed from the secret; a response replayed from another connection
answers another nonce; the roles in the MACs keep one side's proof from serving as
the other's. Every read has a fixed size and a deadline: a silent or garbage peer is
closed, with no reply, as soon as its bytes cannot be a response.

The message functions are pure; ``client_handshake`` (blocking socket) and
``server_handshake`` (asyncio streams) put them on a connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import socket

MAGIC = b"KVFA"
VERSION = 1
LABEL = b"kvfabric agent control channel"
SECRET_LEN = 32
NONCE_LEN = 32
MAC_LEN = hashlib.sha256().digest_size
PREFIX_LEN = len(MAGIC) + 1
CHALLENGE_LEN = PREFIX_LEN + NONCE_LEN
RESPONSE_LEN = PREFIX_LEN + NONCE_LEN + MAC_LEN
PROOF_LEN = MAC_LEN
HANDSHAKE_TIMEOUT_S = 5.0


class HandshakeError(Exception):
    """The peer did not complete the handshake; the message says how."""


def new_secret() -> bytes:
    """A fresh per-run secret."""
    return secrets.token_bytes(SECRET_LEN)


def _prefix() -> bytes:
    return MAGIC + bytes([VERSION])


def _check_prefix(data: bytes, what: str) -> None:
    if data[: len(MAGIC)] != MAGIC:
        raise HandshakeError(f"the {what} does not start with {MAGIC!r}: {data[:8]!r}")
    if data[len(MAGIC)] != VERSION:
        raise HandshakeError(f"the {what} has version {data[len(MAGIC)]}, not {VERSION}")


def _mac(secret: bytes, role: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    if len(secret) != SECRET_LEN:
        raise ValueError(f"the secret has {len(secret)} bytes, not {SECRET_LEN}")
    text = LABEL + bytes([VERSION]) + role + server_nonce + client_nonce
    return hmac.new(secret, text, hashlib.sha256).digest()


def challenge(server_nonce: bytes) -> bytes:
    """The worker's first message."""
    return _prefix() + server_nonce


def read_challenge(data: bytes) -> bytes:
    """The server nonce of a challenge; raises ``HandshakeError`` if it is not one."""
    if len(data) != CHALLENGE_LEN:
        raise HandshakeError(f"a challenge of {len(data)} bytes, not {CHALLENGE_LEN}")
    _check_prefix(data, "challenge")
    return data[PREFIX_LEN:]


def response(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The client's answer to ``server_nonce``."""
    mac = _mac(secret, b"client", server_nonce, client_nonce)
    return _prefix() + client_nonce + mac


def check_response(secret: bytes, server_nonce: bytes, data: bytes) -> bytes:
    """The client nonce of a response that proves the secret for ``server_nonce``;
    raises ``HandshakeError`` otherwise."""
    if len(data) != RESPONSE_LEN:
        raise HandshakeError(f"a response of {len(data)} bytes, not {RESPONSE_LEN}")
    _check_prefix(data, "response")
    client_nonce, mac = data[PREFIX_LEN : PREFIX_LEN + NONCE_LEN], data[-MAC_LEN:]
    if not hmac.compare_digest(mac, _mac(secret, b"client", server_nonce, client_nonce)):
        raise HandshakeError("the response does not prove the run's secret")
    return client_nonce


def proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The worker's proof, sent once the client's response checked."""
    return _mac(secret, b"server", server_nonce, client_nonce)


def check_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes, data: bytes) -> None:
    if not hmac.compare_digest(data, proof(secret, server_nonce, client_nonce)):
        raise HandshakeError("the agent does not prove the run's secret")


# ----- on a connection ------------------------------------------------------------------


def _recv_exactly(sock: socket.socket, n: int, what: str) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise HandshakeError(f"the agent closed the connection during the {what}")
        data += chunk
    return data


def client_handshake(sock: socket.socket, secret: bytes) -> None:
    """Authenticate both ends of a connected blocking socket (its timeout bounds each
    read); raises ``HandshakeError`` (or ``OSError``) unless the worker proved the secret."""
    server_nonce = read_challenge(_recv_exactly(sock, CHALLENGE_LEN, "challenge"))
    client_nonce = secrets.token_bytes(NONCE_LEN)
    sock.sendall(response(secret, server_nonce, client_nonce))
    check_proof(secret, server_nonce, client_nonce, _recv_exactly(sock, PROOF_LEN, "proof"))


async def server_handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    secret: bytes,
    timeout_s: float = HANDSHAKE_TIMEOUT_S,
) -> None:
    """The worker's side: returns once the client proved the secret, having sent the
    proof; raises ``HandshakeError`` (the caller closes the connection, replying nothing)."""
    server_nonce = secrets.token_bytes(NONCE_LEN)
    writer.write(challenge(server_nonce))
    try:
        async with asyncio.timeout(timeout_s):
            await writer.drain()
            head = await reader.readexactly(PREFIX_LEN)  # garbage is refused here
            _check_prefix(head, "response")
            rest = await reader.readexactly(RESPONSE_LEN - PREFIX_LEN)
    except TimeoutError:
        raise HandshakeError(f"no response within {timeout_s:g} s") from None
    except asyncio.IncompleteReadError as exc:
        raise HandshakeError(f"closed after {len(exc.partial)} bytes of a response") from None
    client_nonce = check_response(secret, server_nonce, head + rest)
    writer.write(proof(secret, server_nonce, client_nonce))

"""The KV wire format, pure: header packing on the agents' hot path, the stream
deframer, byte scaling and the agents' control protocol line encoding.

The agents (``traffic.agents``) must start fast in every namespace, so they do not
import ``traffic.header`` (which loads scapy); this module owns the header's struct
layout, and ``traffic.header`` builds its scapy layer and helpers on it.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topologies.scale import Scale

AGENT_PORT = 47000
# One TCP connection per (src, dst) host pair, made before t0, or one per flow.
CONNECTIONS = ("persistent", "per_flow")
MAGIC = 0x4B56
VERSION = 1
_FORMAT = struct.Struct("!HBBQqhHiQQ")
HEADER_LEN = _FORMAT.size  # 44
# Indices into the unpacked header tuple.
F_KIND, F_FLOW, F_REQ, F_LAYER, F_TENANT, F_CHUNK, F_LEN, F_TSEND = 2, 3, 4, 5, 6, 7, 8, 9


class FramingError(ValueError):
    """A byte stream that does not start a message with a valid header."""


def pack(
    kind_code: int,
    flow_id: int,
    length: int,
    request_id: int = -1,
    layer: int = -1,
    chunk: int = -1,
    tenant: int = 0,
    t_send_ns: int = 0,
) -> bytes:
    """The 44 header bytes (``kind`` as its wire code; ``length`` = bytes after the header)."""
    return _FORMAT.pack(
        MAGIC, VERSION, kind_code, flow_id, request_id, layer, tenant, chunk, length, t_send_ns
    )


def unpack(data: bytes | memoryview, offset: int = 0) -> tuple:
    """The raw header tuple at ``offset``; raises ``FramingError`` on bad magic/version."""
    fields = _FORMAT.unpack_from(data, offset)
    if fields[0] != MAGIC or fields[1] != VERSION:
        raise FramingError(f"not a kvfabric header (magic 0x{fields[0]:04x}, version {fields[1]})")
    return fields


class Deframer:
    """Splits a TCP byte stream into messages framed back to back by their header.

    ``feed(chunk)`` returns the header tuples of the messages whose last byte was
    in ``chunk``; payload bytes are counted, never copied. ``pending`` tells
    whether a message is half received (for errors at EOF).
    """

    __slots__ = ("_hdr", "_cur", "_left")

    def __init__(self) -> None:
        self._hdr = bytearray()
        self._cur: tuple | None = None
        self._left = 0

    @property
    def pending(self) -> tuple[tuple | None, int, int] | None:
        """``(header or None, bytes received, bytes expected)`` of a partial message."""
        if self._cur is not None:
            total = HEADER_LEN + self._cur[F_LEN]
            return self._cur, total - self._left, total
        if self._hdr:
            return None, len(self._hdr), HEADER_LEN
        return None

    def feed(self, data: bytes | memoryview) -> list[tuple]:
        done: list[tuple] = []
        pos, n = 0, len(data)
        while pos < n:
            if self._cur is None:
                if self._hdr or n - pos < HEADER_LEN:
                    take = min(HEADER_LEN - len(self._hdr), n - pos)
                    self._hdr += data[pos : pos + take]
                    pos += take
                    if len(self._hdr) < HEADER_LEN:
                        break
                    fields = unpack(self._hdr)
                    self._hdr.clear()
                else:
                    fields = unpack(data, pos)
                    pos += HEADER_LEN
                self._cur, self._left = fields, fields[F_LEN]
            take = min(self._left, n - pos)
            pos += take
            self._left -= take
            if self._left == 0:
                done.append(self._cur)
                self._cur = None
        return done


def scale_bytes(real_bytes: int, scaled: bool, scale: Scale) -> int:
    """Emulated message bytes (header included): ``max(HEADER_LEN,
    round(scale.emulated_bytes(bytes)))`` for scaled rows; unscaled rows (probes) keep
    their size, never below a header."""
    value = round(scale.emulated_bytes(real_bytes)) if scaled else int(real_bytes)
    return max(HEADER_LEN, int(value))


# ---- control protocol: one JSON object per line over a Unix stream socket ----------------


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError(f"control message is not a JSON object: {line[:80]!r}")
    return obj

"""The application header every kvfabric message starts with.

A capture of a run (``tcpdump -w``) should say which request, layer and chunk a
packet belongs to, so the header is a scapy layer bound to the agent's port.
The agent itself never builds scapy packets on its hot path: ``pack_header``
and ``unpack_header`` use ``struct`` and produce exactly the bytes
``KVHeader`` dissects (a unit test round-trips them through a pcap).

Wire format, network byte order, 44 bytes:

====== ===== ===========================================================
offset bytes field
====== ===== ===========================================================
0      2     magic ``0x4B56`` ("KV"): tells a header from mid-stream data
2      1     version (1)
3      1     kind (``KINDS``)
4      8     flow_id, unsigned
12     8     request_id, signed (-1: none)
20     2     layer, signed (-1: none)
22     2     tenant, unsigned (the runner maps tenant names to numbers)
24     4     chunk, signed (-1: none)
28     8     payload length: bytes of the message that follow the header
36     8     t_send_ns: sender's ``time.monotonic_ns()`` (one-way delay)
====== ===== ===========================================================

Only the first segment of a TCP message carries the header; later segments
(and headers that start mid-segment on a persistent connection) dissect as
``Raw`` because the magic does not match at the segment start.
"""

from __future__ import annotations

import struct

from scapy.fields import (
    ByteEnumField,
    ByteField,
    LongField,
    ShortField,
    SignedIntField,
    SignedLongField,
    SignedShortField,
    XShortField,
)
from scapy.layers.inet import TCP, UDP
from scapy.packet import Packet, Raw, bind_layers

# One wire format: the scapy-free ``traffic.wire`` owns the struct layout.
from .wire import _FORMAT, AGENT_PORT, HEADER_LEN, MAGIC, VERSION, pack  # noqa: E402

# Wire codes of the message kinds; the names are the ``kind`` column of flows.parquet.
KINDS = {
    1: "kv_transfer",
    2: "kv_layer",
    3: "token",
    4: "collective",
    5: "alltoall",
    6: "incast",
    7: "background",
    8: "cache_fetch",
    9: "probe",
    10: "tier_fetch",
}
KIND_CODES = {name: code for code, name in KINDS.items()}

_FIELDS = (
    "magic",
    "version",
    "kind",
    "flow_id",
    "request_id",
    "layer",
    "tenant",
    "chunk",
    "length",
    "t_send_ns",
)


class HeaderError(ValueError):
    """Bytes that are not a kvfabric header, or a field value that does not fit."""


class KVHeader(Packet):
    """Scapy view of the header (for captures and tests, not the hot path)."""

    name = "KVFabric"
    fields_desc = [
        XShortField("magic", MAGIC),
        ByteField("version", VERSION),
        ByteEnumField("kind", 1, KINDS),
        LongField("flow_id", 0),
        SignedLongField("request_id", -1),
        SignedShortField("layer", -1),
        ShortField("tenant", 0),
        SignedIntField("chunk", -1),
        LongField("length", 0),
        LongField("t_send_ns", 0),
    ]

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args, **kwargs):
        # A TCP segment in the middle of a message is payload, not a header.
        if _pkt is not None and (len(_pkt) < HEADER_LEN or _pkt[:2] != MAGIC.to_bytes(2, "big")):
            return Raw
        return cls


bind_layers(TCP, KVHeader, dport=AGENT_PORT)
bind_layers(TCP, KVHeader, sport=AGENT_PORT)
bind_layers(UDP, KVHeader, dport=AGENT_PORT)
bind_layers(UDP, KVHeader, sport=AGENT_PORT)


def pack_header(
    kind: str,
    flow_id: int,
    length: int,
    request_id: int = -1,
    layer: int = -1,
    chunk: int = -1,
    tenant: int = 0,
    t_send_ns: int = 0,
) -> bytes:
    """The 44 header bytes for one message; ``length`` counts the bytes after it."""
    code = KIND_CODES.get(kind)
    if code is None:
        raise HeaderError(f"unknown kind {kind!r}; known kinds: {', '.join(KIND_CODES)}")
    try:
        return pack(code, flow_id, length, request_id, layer, chunk, tenant, t_send_ns)
    except struct.error as exc:
        raise HeaderError(f"header field out of range: {exc}") from None


def unpack_header(data: bytes) -> dict:
    """The fields of the header at the start of ``data`` (``kind`` as its name)."""
    if len(data) < HEADER_LEN:
        raise HeaderError(f"need {HEADER_LEN} bytes for a header, got {len(data)}")
    fields = dict(zip(_FIELDS, _FORMAT.unpack_from(data), strict=True))
    if fields["magic"] != MAGIC:
        raise HeaderError(f"bad magic 0x{fields['magic']:04x}, expected 0x{MAGIC:04x}")
    if fields["version"] != VERSION:
        raise HeaderError(f"unsupported header version {fields['version']}, expected {VERSION}")
    fields["kind"] = KINDS.get(fields["kind"], fields["kind"])
    return fields

"""The agent's hot-path header packing, stream deframing and byte scaling."""

from __future__ import annotations

import pytest

from topologies.scale import Scale
from traffic import wire
from traffic.header import AGENT_PORT, HEADER_LEN, KIND_CODES, pack_header, unpack_header


def test_wire_constants_match_the_header_module():
    assert wire.HEADER_LEN == HEADER_LEN == 44
    assert wire.AGENT_PORT == AGENT_PORT


@pytest.mark.parametrize("kind", sorted(KIND_CODES))
def test_pack_produces_the_same_bytes_as_pack_header(kind):
    fields = dict(
        flow_id=2**40 + 7,
        length=123456,
        request_id=-1,
        layer=79,
        chunk=3,
        tenant=5,
        t_send_ns=987654321012345,
    )
    fast = wire.pack(KIND_CODES[kind], **fields)
    assert fast == pack_header(kind, **fields)
    back = unpack_header(fast)
    assert back["kind"] == kind and back["flow_id"] == fields["flow_id"]


def _message(fid: int, length: int) -> bytes:
    return wire.pack(6, fid, length, t_send_ns=fid * 10) + bytes(length)


def test_deframer_splits_back_to_back_messages_fed_at_every_boundary():
    stream = _message(1, 0) + _message(2, 5) + _message(3, 1000) + _message(4, 44)
    for size in (1, 2, 7, 43, 44, 45, 100, len(stream)):
        d = wire.Deframer()
        got = []
        for i in range(0, len(stream), size):
            got += [f[wire.F_FLOW] for f in d.feed(memoryview(stream)[i : i + size])]
        assert got == [1, 2, 3, 4], size
        assert d.pending is None


def test_deframer_reports_a_partial_message_and_bad_magic():
    d = wire.Deframer()
    assert d.feed(_message(9, 100)[:60]) == []
    header, got, total = d.pending
    assert header[wire.F_FLOW] == 9 and (got, total) == (60, 144)
    d = wire.Deframer()
    assert d.feed(b"\x00" * 10) == [] and d.pending == (None, 10, 44)
    with pytest.raises(wire.FramingError, match="magic"):
        wire.Deframer().feed(b"\x00" * 50)


@pytest.mark.parametrize(
    ("real", "scaled", "scale", "expected"),
    [
        (100_000_000, True, 1e-4, 10_000),
        (2_621_440_000, True, 1e-4, 262_144),
        (15_000, True, 1e-4, 44),  # never below one header
        (444_449, True, 1e-4, 44),
        (455_000, True, 1e-4, 46),  # 45.5 rounds to 46
        (100, False, 1e-4, 100),  # probes keep their size
        (10, False, 1e-4, 44),
    ],
)
def test_scale_bytes(real, scaled, scale, expected):
    assert wire.scale_bytes(real, scaled, Scale(scale)) == expected


def test_control_lines_round_trip():
    line = wire.encode({"cmd": "release", "group": 3, "t_ns": 12})
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert wire.decode(line) == {"cmd": "release", "group": 3, "t_ns": 12}
    with pytest.raises(ValueError):
        wire.decode(b"[1, 2]")

"""The application header: struct bytes and the scapy layer must agree, through a pcap."""

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import rdpcap, wrpcap

from traffic.header import (
    AGENT_PORT,
    HEADER_LEN,
    HeaderError,
    KVHeader,
    pack_header,
    unpack_header,
)

FIELDS = {
    "kind": "kv_layer",
    "flow_id": 2**40 + 7,
    "length": 3_276_800,
    "request_id": 12345,
    "layer": 79,
    "chunk": 79,
    "tenant": 3,
    "t_send_ns": 987_654_321_000,
}


def test_pack_unpack_round_trip():
    raw = pack_header(**FIELDS)
    assert len(raw) == HEADER_LEN
    got = unpack_header(raw + b"payload")
    assert {k: got[k] for k in FIELDS} == FIELDS


def test_none_values_survive_as_minus_one():
    got = unpack_header(pack_header("background", 1, 10))
    assert got["request_id"] == got["layer"] == got["chunk"] == -1


@pytest.mark.parametrize(("l4", "port_field"), [(TCP, "dport"), (TCP, "sport"), (UDP, "dport")])
def test_capture_dissects_into_header_fields(tmp_path, l4, port_field):
    raw = pack_header(**FIELDS)
    ports = {"sport": 40000, "dport": 40001} | {port_field: AGENT_PORT}
    pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / l4(**ports) / raw / (b"\0" * 100)
    path = tmp_path / "kv.pcap"
    wrpcap(str(path), [pkt])
    (back,) = rdpcap(str(path))
    assert back.haslayer(KVHeader)
    hdr = back[KVHeader]
    assert hdr.magic == 0x4B56
    assert hdr.sprintf("%KVHeader.kind%") == "kv_layer"
    for name, value in FIELDS.items():
        if name != "kind":
            assert getattr(hdr, name) == value, name
    assert bytes(hdr.payload) == b"\0" * 100


def test_mid_stream_segment_is_not_a_header(tmp_path):
    pkt = Ether() / IP() / TCP(sport=40000, dport=AGENT_PORT) / (b"\x11" * 200)
    wrpcap(str(tmp_path / "mid.pcap"), [pkt])
    (back,) = rdpcap(str(tmp_path / "mid.pcap"))
    assert not back.haslayer(KVHeader) and back.haslayer(Raw)


def test_scapy_built_header_unpacks():
    built = bytes(KVHeader(kind="probe", flow_id=5, length=20, layer=-1, tenant=9))
    got = unpack_header(built)
    assert got["kind"] == "probe" and got["flow_id"] == 5 and got["tenant"] == 9


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: pack_header("nonsense", 1, 1), "unknown kind"),
        (lambda: pack_header("probe", -1, 1), "out of range"),
        (lambda: pack_header("probe", 1, 1, tenant=70000), "out of range"),
        (lambda: unpack_header(b"\0" * 10), "need 44 bytes"),
        (lambda: unpack_header(b"\0" * HEADER_LEN), "bad magic"),
    ],
)
def test_bad_headers_raise(call, match):
    with pytest.raises(HeaderError, match=match):
        call()

"""The Wireshark dissector (traffic/wireshark/kvfabric.lua) decodes what the agents send.

A pcap written with scapy holds KV messages over TCP (several in one segment, a header
split across two segments) and UDP (one and two per datagram); ``tshark`` with the Lua
plugin must decode every header, field by field, as it was packed. Without tshark the
test is skipped with the reason; under CI (``CI`` set) it fails instead, so a machine
whose install step lost tshark cannot pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from traffic.header import KIND_CODES, pack_header
from traffic.wire import AGENT_PORT

PLUGIN = Path(__file__).resolve().parents[2] / "traffic" / "wireshark" / "kvfabric.lua"
FIELDS = ("flow_id", "request_id", "layer", "chunk", "tenant", "length", "t_send_ns")


def _tshark() -> str:
    path = shutil.which("tshark")
    if path:
        return path
    reason = "tshark is not installed (sudo make setup installs Debian's tshark)"
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"CI needs tshark: {reason}", pytrace=False)
    pytest.skip(reason)


def _message(kind: str, flow_id: int, payload: int, **fields) -> tuple[dict, bytes]:
    header = dict(kind=kind, flow_id=flow_id, length=payload, **fields)
    return header, pack_header(**header) + bytes(range(256))[:payload].ljust(payload, b"\x00")


# What the capture holds, in order of the message's last byte on the wire.
MESSAGES = [
    _message("kv_transfer", 11, 10, request_id=3, layer=-1, chunk=0, tenant=1, t_send_ns=5),
    _message(
        "kv_layer", 2**40 + 7, 5, request_id=4, layer=31, chunk=2, tenant=2, t_send_ns=2**62 + 1
    ),
    _message(
        "token", 13, 300, request_id=-1, layer=-1, chunk=-1, tenant=65535, t_send_ns=123456789
    ),
    _message(
        "alltoall", 14, 0, request_id=2**40, layer=-32768, chunk=2**31 - 1, tenant=0, t_send_ns=1
    ),
    # a KV transfer spread over seven full segments, as the agents send one
    _message("kv_transfer", 15, 10_000, request_id=7, chunk=0, tenant=1, t_send_ns=80),
    _message("probe", 21, 156, request_id=-1, tenant=9, t_send_ns=77),
    _message("incast", 22, 3, request_id=5, layer=1, chunk=-5, tenant=3, t_send_ns=78),
    _message("cache_fetch", 23, 0, request_id=6, layer=2, chunk=6, tenant=4, t_send_ns=79),
]


def _capture(path: Path) -> None:
    """TCP: segment 1 = messages 0, 1 and the first 20 header bytes of 2; segment 2 = the
    rest of 2 and message 3; then message 4 in 1448-byte segments. UDP: a datagram with
    message 5, one with messages 6 and 7."""
    stream = b"".join(wire for _, wire in MESSAGES[:4])
    cut = len(MESSAGES[0][1]) + len(MESSAGES[1][1]) + 20
    big = MESSAGES[4][1]
    mss, after = 1448, 1000 + len(stream)
    ip = IP(src="10.0.0.1", dst="10.0.0.2")
    sport, seq = 40001, 1000
    pkts = [
        Ether() / ip / TCP(sport=sport, dport=AGENT_PORT, flags="S", seq=seq - 1),
        Ether()
        / IP(src="10.0.0.2", dst="10.0.0.1")
        / TCP(sport=AGENT_PORT, dport=sport, flags="SA", seq=5000, ack=seq),
        Ether() / ip / TCP(sport=sport, dport=AGENT_PORT, flags="A", seq=seq, ack=5001),
        Ether()
        / ip
        / TCP(sport=sport, dport=AGENT_PORT, flags="PA", seq=seq, ack=5001)
        / stream[:cut],
        Ether()
        / ip
        / TCP(sport=sport, dport=AGENT_PORT, flags="PA", seq=seq + cut, ack=5001)
        / stream[cut:],
        *(
            Ether()
            / ip
            / TCP(sport=sport, dport=AGENT_PORT, flags="A", seq=after + i, ack=5001)
            / big[i : i + mss]
            for i in range(0, len(big), mss)
        ),
        Ether() / ip / UDP(sport=40002, dport=AGENT_PORT) / MESSAGES[5][1],
        Ether() / ip / UDP(sport=40002, dport=AGENT_PORT) / (MESSAGES[6][1] + MESSAGES[7][1]),
    ]
    wrpcap(str(path), pkts)


def _decode(tshark: str, pcap: Path) -> list[dict[str, str]]:
    names = (
        "frame.number",
        "kvfabric.magic",
        "kvfabric.version",
        "kvfabric.kind",
        *(f"kvfabric.{f}" for f in FIELDS),
    )
    cmd = [
        tshark,
        "-n",
        "-X",
        f"lua_script:{PLUGIN}",
        "-r",
        str(pcap),
        "-Y",
        "kvfabric",
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "separator=\t",
        "-o",
        "tcp.desegment_tcp_streams:TRUE",
    ]
    for name in names:
        cmd += ["-e", name]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(pcap.parent)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr.lower(), proc.stderr
    rows = []
    for line in proc.stdout.splitlines():
        frame, *columns = line.split("\t")
        split = [c.split(",") for c in columns]
        for values in zip(*split, strict=True):
            rows.append({"frame": frame, **dict(zip(names[1:], values, strict=True))})
    return rows


def test_tshark_decodes_every_header_as_written(tmp_path):
    tshark = _tshark()
    pcap = tmp_path / "kv.pcap"
    _capture(pcap)
    rows = _decode(tshark, pcap)
    assert len(rows) == len(MESSAGES), rows
    for row, (written, _) in zip(rows, MESSAGES, strict=True):
        assert int(row["kvfabric.magic"], 16) == 0x4B56
        assert row["kvfabric.version"] == "1"
        assert int(row["kvfabric.kind"]) == KIND_CODES[written["kind"]], row
        for name in FIELDS:
            assert int(row[f"kvfabric.{name}"]) == written.get(
                name, -1 if name in ("request_id", "layer", "chunk") else 0
            ), (name, row)


def test_packet_tree_names_the_kind(tmp_path):
    tshark = _tshark()
    pcap = tmp_path / "kv.pcap"
    _capture(pcap)
    proc = subprocess.run(
        [
            tshark,
            "-n",
            "-X",
            f"lua_script:{PLUGIN}",
            "-r",
            str(pcap),
            "-O",
            "kvfabric",
            "-Y",
            "kvfabric",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    for written, _ in MESSAGES:
        code = KIND_CODES[written["kind"]]
        assert f"Kind: {written['kind']} ({code})" in proc.stdout
    assert "Request id: -1" in proc.stdout and "Layer: 31" in proc.stdout


def test_split_header_decodes_in_the_segment_that_completes_it(tmp_path):
    tshark = _tshark()
    pcap = tmp_path / "kv.pcap"
    _capture(pcap)
    frames = [row["frame"] for row in _decode(tshark, pcap)]
    # Frames 4 and 5 are the first two data segments; 6-12 carry message 4, which decodes
    # in the segment with its last byte; 13 and 14 are the datagrams.
    assert frames == ["4", "4", "5", "5", "12", "13", "14", "14"]

"""What a message's completion time is made of: the real fabric's wire time, what the
emulation's coarse packets add, and the emulator's own excess; and the report's
account of it, which names the points whose latency is this machine's."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.analysis.latency_parts import (
    burst_ms,
    fct_parts,
    parts_p50,
    path_gbps,
    transfer_ms,
)
from experiments.bmwg.floor import latency_points, latency_section
from topologies import spine_leaf
from topologies.scale import Scale

# h0 - leaf0 - spine0 - leaf1 - h1: hops at 100, 200, 200, 100 Gbit/s
FABRIC = spine_leaf(spines=1, leaves=2, hosts_per_leaf=1, host_gbps=100, uplink_gbps=200)
SCALE = Scale(bandwidth=1e-3, mtu=1500)  # one emulated frame: 1,514 real KB
MB = 1 << 20


def test_store_and_forward_serialises_the_first_packet_on_every_hop_and_the_rest_once():
    hops = (100.0, 200.0, 200.0, 100.0)
    assert transfer_ms(1e6, hops, 1e6) == pytest.approx(0.08 + 0.04 + 0.04 + 0.08)
    assert transfer_ms(10e6, hops, 1e6) == pytest.approx(0.24 + 9e6 * 8 / 100e6)
    assert transfer_ms(1e6, (), 1e6) == 0.0
    assert path_gbps(FABRIC, "h0", "h1") == hops


def flow(fid: int, fct_ms: float, connection: str = "persistent", **kw) -> dict:
    row = {"flow_id": fid, "src": "h0", "dst": "h1", "bytes_real": MB, "fct_ms": fct_ms}
    return row | {"ok": True, "proto": "tcp", "connection": connection} | kw


def test_a_one_packet_message_is_mostly_grain_and_the_rest_is_the_emulators():
    flows = pd.DataFrame([flow(0, 0.5, "per_flow"), flow(1, 0.5)])
    parts = fct_parts(flows, FABRIC, SCALE).set_index("flow_id")
    real = MB + 725 * 66  # 725 frames of 1,448 bytes of payload, 66 bytes of headers each
    wire = (1514 * 8 / 100e6) * 2 + (1514 * 8 / 200e6) * 2 + (real - 1514) * 8 / 100e6
    emulated = MB + 66_000  # 1,049 emulated bytes: one frame, its 66 headers stand for 66 KB
    whole = emulated * 8 / 100e6 * 2 + emulated * 8 / 200e6 * 2  # under one emulated frame
    shake = 2 * (74_000 * 8 / 100e6 * 2 + 74_000 * 8 / 200e6 * 2)  # SYN, SYN-ACK
    assert parts.loc[1, "wire_ms"] == pytest.approx(wire)  # ~88 us at 100 Gbit/s
    assert parts.loc[1, "grain_ms"] == pytest.approx(whole - wire)  # triples it
    assert parts.loc[0, "grain_ms"] == pytest.approx(whole + shake - wire)
    assert parts.loc[0, "excess_ms"] == pytest.approx(0.5 - whole - shake)
    medians = parts_p50(parts.reset_index())  # the least-delayed tenth: the fresh one
    assert medians["excess_p10_ms"] < medians["excess_p50_ms"] < 0.5 - whole
    total = parts[["wire_ms", "grain_ms", "excess_ms"]].sum(axis=1).tolist()
    assert total == pytest.approx([0.5] * 2)
    # on an idle path the bursts could take the whole one-packet message off the model
    assert parts.loc[1, "burst_ms"] == pytest.approx(whole)


def test_a_shapers_burst_takes_at_most_a_wall_millisecond_of_what_the_model_charges():
    hops = (100.0, 200.0, 200.0, 100.0)
    packet = 1.514e6  # one emulated frame at scale 1e-3
    modelled = transfer_ms(16e6, hops, packet)
    # d = 1: a millisecond at each hop's rate (12.5 real MB at 100 Gbit/s, 25 at 200);
    # the slowest hop is charged the whole message, the others one packet
    d1 = 12.5e6 * 8 / 100e6 + packet * 8 / 200e6 * 2 + packet * 8 / 100e6
    assert burst_ms(16e6, hops, SCALE, 1.0) == pytest.approx(d1) and d1 < modelled
    # d = 8: 1/8 ms, but never under two frames (3,028 bytes: 3.028 real MB)
    d8 = 3.028e6 * 8 / 100e6 + packet * 8 / 200e6 * 2 + packet * 8 / 100e6
    assert burst_ms(16e6, hops, SCALE, 8.0) == pytest.approx(d8)
    assert burst_ms(1e6, hops, SCALE, 1.0) == pytest.approx(transfer_ms(1e6, hops, packet))


def test_failed_messages_and_datagrams_have_no_parts():
    flows = pd.DataFrame([flow(0, 0.4), flow(1, float("nan"), ok=False), flow(2, 0.1, proto="udp")])
    assert fct_parts(flows, FABRIC, SCALE)["flow_id"].tolist() == [0]
    assert parts_p50(fct_parts(flows.iloc[1:], FABRIC, SCALE))["excess_p50_ms"] is None


def row(test: str, point: str, excess: float, faithful: bool = True) -> dict:
    parts = {"fct_p50_ms": 1.0, "wire_p50_ms": 0.1, "grain_p50_ms": 0.9 - excess}
    parts |= {"burst_p50_ms": 0.3, "excess_p10_ms": excess - 0.1}
    return (
        {"test": test, "point": point, "faithful": faithful, "time_dilation": 4.0}
        | parts
        | {"excess_p50_ms": excess}
    )


def test_the_report_names_points_whose_latency_is_the_emulators():
    rows = [
        row("5.2", "1MB@0%", 0.6),
        row("5.2", "1MB@0%", 0.8),
        row("5.2", "16MB@0%", 0.1),
        row("5.2", "16MB@0%", 0.9, faithful=False),  # not counted
        row("5.1", "1MBx1qp", 0.9),  # 5.1's KPIs are rates, not latencies
    ]
    points = {(p["test"], p["point"]): p for p in latency_points(rows)}
    assert set(points) == {("5.2", "1MB@0%"), ("5.2", "16MB@0%")}
    assert points["5.2", "1MB@0%"]["excess_p50_ms"] == pytest.approx(0.7)
    assert points["5.2", "16MB@0%"]["n"] == 1
    text = "\n".join(latency_section(rows))
    # the floor (excess p10, 0.6) is twice the model's 0.3 ms at 1MB, none of it at 16MB
    assert "| 5.2 | 1MB@0% | 4 | 2 | 1 | 0.1 | 0.2 | 0.3 | 0.7 | 0.6 | 2 |" in text
    assert "time for the message (wire + grain) at 5.2 1MB@0%: the emulator's" in text
    assert "doubles the wire time at 5.2 1MB@0%, 5.2 16MB@0%" in text
    assert latency_section([row("5.1", "1MBx1qp", 0.9)]) == []


def test_the_report_says_where_bursts_made_messages_beat_the_real_wire():
    fast = row("5.2", "16MB@0%", -1.9) | {"fct_p50_ms": 1.3, "wire_p50_ms": 1.34}
    text = "\n".join(latency_section([fast, row("5.2", "1MB@0%", 0.6)]))
    assert "Faster than the real fabric's wire time at 5.2 16MB@0%:" in text
    assert "1MB@0%: the shapers' bursts" not in text

"""Jumbo frames (``scale.mtu``): whole 9,000-byte packets cross every switch, links keep
their emulated rate, and buffers keep their bytes."""

from __future__ import annotations

import json
import subprocess

import pytest

from controller.ofctl import StaticRules
from experiments.measurement.iperf import iperf3
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.scale import Scale

pytestmark = pytest.mark.root


def _ping_df(net, src: str, dst: str, payload: int) -> bool:
    """One ping of ``payload`` bytes that must not be fragmented."""
    out = net.mn(src).pexec(
        "ping", "-c", "1", "-W", "2", "-M", "do", "-s", str(payload), net.fabric.node(dst).ip
    )
    return out[2] == 0


def test_jumbo_frames_cross_the_spine_at_the_emulated_rate_with_buffers_of_the_same_bytes():
    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=1, host_gbps=100, uplink_gbps=400)
    path = fabric.shortest_paths("h0", "h1")[0]
    assert "spine0" in path
    with FabricNetwork(fabric, Scale(mtu=9000), rules=StaticRules()) as net:
        assert _ping_df(net, "h0", "h1", 9000 - 28), "a 9,000-byte packet did not cross"
        assert not _ping_df(net, "h0", "h1", 9001 - 28), "the MTU is larger than asked"
        port = net.intf("leaf0", fabric.port("leaf0", "spine0"))
        qdiscs = json.loads(
            subprocess.run(
                ["tc", "-j", "qdisc", "show", "dev", port],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        (fifo,) = [q for q in qdiscs if q["kind"] == "pfifo"]
        assert fifo["options"]["limit"] == 11  # 64 frames of 1,514 B in frames of 9,014 B
        t = iperf3(net, "h0", "h1", seconds=4)
    configured = 100e9 * 1e-4 / 1e6  # the 10 Mbit/s host link
    wire = t.goodput_mbps * 9014 / (9000 - 52)  # goodput of 8,948-byte segments, on the wire
    assert 0.90 * configured <= wire <= 1.05 * configured, (t.goodput_mbps, configured)

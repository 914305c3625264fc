"""Egress shaping plans and tc command builders."""

import pytest

from topologies import FabricError, rail_optimized, spine_leaf
from topologies.naming import RunNames, owned
from topologies.ovs_tx import PACKET_TRUESIZE, packet_truesize
from topologies.scale import Scale, check_bandwidth, check_mtu
from topologies.shaping import (
    batch_text,
    burst_bytes,
    egress_plan,
    htb_commands,
    queue_frames,
)


def test_every_egress_both_ends_is_shaped_at_scale():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2, host_gbps=100, uplink_gbps=400)
    plan = egress_plan(f, Scale(1e-4))
    assert len(plan) == 2 * len(f.links)
    rates = {(e.node, e.port): e.rate_bps for e in plan}
    assert rates[("h0", 0)] == 10_000_000 and rates[("leaf0", 1)] == 10_000_000
    assert rates[("leaf0", 3)] == 40_000_000 and rates[("spine0", 1)] == 40_000_000
    assert {e.buffer_pkts for e in plan} == {64}


def test_rates_the_machine_cannot_honour_are_errors():
    with pytest.raises(FabricError, match="above the 1000 Mbit/s"):
        egress_plan(rail_optimized(), Scale(1e-3))  # NVLink 3600G -> 3.6 Gbit/s
    with pytest.raises(FabricError, match="below the 0.1 Mbit/s"):
        egress_plan(spine_leaf(host_gbps=1), Scale(1e-5))
    with pytest.raises(FabricError, match="scale.bandwidth=0"):
        egress_plan(spine_leaf(), Scale(0))
    with pytest.raises(TypeError, match="must be a topologies.scale.Scale"):
        egress_plan(spine_leaf(), 1e-4)  # a bare number: which MTU? the Scale says


def test_htb_commands():
    cmds = htb_commands("kf00s1-eth2", 40_000_000, 16)
    assert cmds[0] == [
        "qdisc",
        "replace",
        "dev",
        "kf00s1-eth2",
        "root",
        "handle",
        "1:",
        "htb",
        "default",
        "1",
    ]
    cls = cmds[1]
    assert cls[cls.index("rate") + 1] == "40000000bit"
    assert cls[cls.index("ceil") + 1] == "40000000bit"
    assert cls[cls.index("burst") + 1] == str(burst_bytes(40_000_000)) == "5000"
    assert cmds[2][-3:] == ["pfifo", "limit", "16"]
    assert cmds[2][cmds[2].index("parent") + 1] == "1:1"
    assert batch_text(cmds).count("\n") == 3


def test_burst_never_below_two_packets():
    assert burst_bytes(1_000_000) == 2 * 1514


def test_names_carry_the_run_prefix_and_fit_linux_limits():
    f = rail_optimized(servers=16, gpus_per_server=8, spines=8)
    names = RunNames("kf7q")
    for node in f.nodes:
        for link in f.links_of(node.name):
            intf = names.intf(node, link.port_of(node.name))
            assert len(intf) <= 15
            assert owned(intf) == "kf7q"
    assert owned("eth0") is None and owned("kf7q") is None and owned("s1-eth1") is None


def test_jumbo_frames_keep_each_buffers_bytes_and_shape_by_the_larger_frame():
    assert queue_frames(64) == 64
    assert queue_frames(64, 9000) == 11  # 64 x 1,514 B = 96,896 B = 10.7 x 9,014 B
    assert queue_frames(1, 9000) == 1  # never a queue that holds nothing
    cmds = htb_commands("kf00s1-eth2", 40_000_000, 64, mtu=9000)
    cls = cmds[1]
    assert cls[cls.index("quantum") + 1] == "9014"
    assert cls[cls.index("burst") + 1] == str(burst_bytes(40_000_000, 9000)) == str(2 * 9014)
    assert cmds[2][-3:] == ["pfifo", "limit", "11"]
    plan = egress_plan(spine_leaf(), Scale(1e-4, 9000))
    assert {e.queue_pkts for e in plan} == {11} and {e.buffer_pkts for e in plan} == {64}
    assert {e.mtu for e in plan} == {9000}


@pytest.mark.parametrize("mtu", [1400, 9001, True, 9000.0, "9000"])
def test_an_mtu_outside_1500_to_9000_is_refused_with_its_key(mtu):
    with pytest.raises(FabricError, match=r"scale\.mtu=.*from 1500 to 9000"):
        Scale(1e-4, mtu)
    with pytest.raises(FabricError, match=r"^--mtu=.*from 1500 to 9000"):
        check_mtu(mtu, "--mtu")  # the one check, with the key the user typed


def test_a_scale_passed_through_shapes_as_before():
    """400 Gbit/s at 1e-4 runs at 40 Mbit/s, 100 Gbit/s at 10; at MTU 9000 the HTB quantum
    is one jumbo frame and each 64-frame buffer holds its bytes in 11 jumbo frames: the tc
    commands the builder sends for the plan's egresses."""
    f = spine_leaf(spines=1, leaves=2, hosts_per_leaf=1, host_gbps=100, uplink_gbps=400)
    plan = egress_plan(f, Scale(1e-4, 9000))
    up = next(e for e in plan if e.node == "leaf0" and e.link.b == "spine0")
    assert up.rate_bps == 40_000_000 and up.queue_pkts == 11
    cmds = htb_commands("kf00s1-eth2", up.rate_bps, up.buffer_pkts, up.mtu)
    assert cmds == htb_commands("kf00s1-eth2", 40_000_000, 64, mtu=9000)
    assert cmds[1][cmds[1].index("quantum") + 1] == "9014"
    assert cmds[2][-3:] == ["pfifo", "limit", "11"]
    assert {e.rate_bps for e in plan if e.link.real_gbps == 100} == {10_000_000}


@pytest.mark.parametrize("bad", [0, -1e-4, 1.5, float("nan"), True, "1e-4"])
def test_a_bandwidth_outside_0_to_1_is_refused_with_its_key(bad):
    with pytest.raises(FabricError, match=r"^--scale=.* must be in \(0, 1\]"):
        check_bandwidth(bad, "--scale")
    with pytest.raises(FabricError, match=r"^scale\.bandwidth="):
        Scale(bad)


def test_ovs_send_buffer_per_frame_grows_with_the_frame():
    assert packet_truesize(1514) == PACKET_TRUESIZE
    assert packet_truesize(9014) >= 2 * 9014

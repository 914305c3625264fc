"""Egress shaping plans and tc command builders."""

import pytest

from topologies import FabricError, rail_optimized, spine_leaf
from topologies.naming import RunNames, owned
from topologies.ovs_tx import PACKET_TRUESIZE, packet_truesize
from topologies.shaping import (
    batch_text,
    burst_bytes,
    egress_plan,
    htb_commands,
    queue_frames,
)


def test_every_egress_both_ends_is_shaped_at_scale():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2, host_gbps=100, uplink_gbps=400)
    plan = egress_plan(f, 1e-4)
    assert len(plan) == 2 * len(f.links)
    rates = {(e.node, e.port): e.rate_bps for e in plan}
    assert rates[("h0", 0)] == 10_000_000 and rates[("leaf0", 1)] == 10_000_000
    assert rates[("leaf0", 3)] == 40_000_000 and rates[("spine0", 1)] == 40_000_000
    assert {e.buffer_pkts for e in plan} == {64}


def test_rates_the_machine_cannot_honour_are_errors():
    with pytest.raises(FabricError, match="above the 1000 Mbit/s"):
        egress_plan(rail_optimized(), 1e-3)  # NVLink 3600G -> 3.6 Gbit/s
    with pytest.raises(FabricError, match="below the 0.1 Mbit/s"):
        egress_plan(spine_leaf(host_gbps=1), 1e-5)
    with pytest.raises(FabricError, match="scale.bandwidth=0"):
        egress_plan(spine_leaf(), 0)


def test_htb_commands():
    cmds = htb_commands("kf00s1-eth2", 40_000_000, 16)
    assert cmds[0] == ["qdisc", "replace", "dev", "kf00s1-eth2", "root", "handle", "1:",
                       "htb", "default", "1"]  # fmt: skip
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
    plan = egress_plan(spine_leaf(), 1e-4, 9000)
    assert {e.queue_pkts for e in plan} == {11} and {e.buffer_pkts for e in plan} == {64}


@pytest.mark.parametrize("mtu", [1400, 9001, True, 9000.0, "9000"])
def test_an_mtu_outside_1500_to_9000_is_refused_with_its_key(mtu):
    with pytest.raises(FabricError, match=r"scale\.mtu=.*from 1500 to 9000"):
        egress_plan(spine_leaf(), 1e-4, mtu)


def test_ovs_send_buffer_per_frame_grows_with_the_frame():
    assert packet_truesize(1514) == PACKET_TRUESIZE
    assert packet_truesize(9014) >= 2 * 9014

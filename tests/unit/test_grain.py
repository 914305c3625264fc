"""The grain of a fabric's queues, checked against numbers worked by hand: what one
packet and one buffer stand for on the real fabric, at scale 1e-4 and 1, at d 1 and 4."""

import pytest

from topologies import make_fabric
from topologies.fabric import FabricBuilder
from topologies.grain import base_rtt, dilation_sentence, limits_sentence, queue_grain
from topologies.scale import Scale


def small_spine_leaf():
    # 4 hosts at 100 Gbit/s, 2 leaves × 2 spines at 400 Gbit/s, 64-packet buffers
    return make_fabric(
        "spine_leaf", spines=2, leaves=2, hosts_per_leaf=2, host_gbps=100, uplink_gbps=400
    )


def test_the_longest_base_rtt_is_serialisation_over_the_cross_leaf_path():
    rtt = base_rtt(small_spine_leaf(), Scale(1e-4))
    assert rtt.path == ("h0", "leaf0", "spine0", "leaf1", "h2")
    assert rtt.hop_gbps == (100, 400, 400, 100)
    # one 15.14 MB frame: 1,211.2 µs per 100 Gbit/s hop, 302.8 per 400; ×2 both ways
    assert rtt.rtt_us == pytest.approx(2 * (1211.2 + 302.8 + 302.8 + 1211.2))
    assert base_rtt(small_spine_leaf(), Scale(1)).rtt_us == pytest.approx(0.6056)


@pytest.mark.parametrize(
    ("bandwidth", "grain", "host_us", "uplink_us"),
    [
        (1e-4, 15_140_000, 77_516.8, 19_379.2),  # 64 × 15.14 MB × 8 / 100 (400) Gbit/s
        (1.0, 1514, 7.75168, 1.93792),  # real packets: a real switch's microseconds
    ],
)
def test_each_rate_and_buffer_class_states_its_grain(bandwidth, grain, host_us, uplink_us):
    host, uplink = queue_grain(small_spine_leaf(), Scale(bandwidth))
    assert (host.real_gbps, host.n_ports, host.directions) == (100, 8, ("gpu→leaf", "leaf→gpu"))
    assert (uplink.real_gbps, uplink.n_ports) == (400, 8)
    assert ("leaf0", 1) in host.ports and ("spine1", 2) in uplink.ports
    for row in (host, uplink):
        assert row.real_bytes_per_packet == pytest.approx(grain)
        assert (row.buffer_pkts, row.buffer_bytes) == (64, 64 * 1514)
    assert host.buffer_real_us == pytest.approx(host_us)
    assert uplink.buffer_real_us == pytest.approx(uplink_us)
    # BDP = RTT × rate ÷ packet: 2 × (1 + ¼ + ¼ + 1) at 100, 4× that at 400, at any scale
    assert (host.bdp_pkts, uplink.bdp_pkts) == (pytest.approx(5.0), pytest.approx(20.0))


def test_time_dilation_changes_the_wall_rate_only():
    plain = queue_grain(small_spine_leaf(), Scale(1e-4))
    slow = queue_grain(small_spine_leaf(), Scale(1e-4, time_dilation=4))
    assert [r.wall_mbps for r in plain] == pytest.approx([10.0, 40.0])
    assert [r.wall_mbps for r in slow] == pytest.approx([2.5, 10.0])
    strip = [(r.real_bytes_per_packet, r.buffer_pkts, r.buffer_real_us, r.bdp_pkts) for r in slow]
    assert strip == [
        (r.real_bytes_per_packet, r.buffer_pkts, r.buffer_real_us, r.bdp_pkts) for r in plain
    ]
    assert queue_grain(small_spine_leaf(), Scale(1e-4, time_dilation="auto"))[0].wall_mbps is None
    assert "one wall second is 0.25 s of the real fabric" in dilation_sentence(Scale(1e-4, 1500, 4))
    assert "one wall second is one second" in dilation_sentence(Scale(1e-4))


def test_jumbo_frames_keep_the_buffers_bytes_in_fewer_coarser_packets():
    (host, _) = queue_grain(small_spine_leaf(), Scale(1e-4, 9000))
    assert host.buffer_pkts == 11  # 64 × 1,514 bytes ÷ 9,014, rounded
    assert host.real_bytes_per_packet == pytest.approx(90_140_000)
    assert host.buffer_real_us == pytest.approx(11 * 90.14e6 * 8 / 100e9 * 1e6)
    assert host.bdp_pkts == pytest.approx(5.0)


def test_ports_with_another_buffer_are_another_class():
    fb = FabricBuilder("custom", {})
    a, b, leaf = fb.host("a"), fb.host("b"), fb.switch("leaf", "leaf")
    fb.link(a, leaf, 100, 16, "host")
    fb.link(b, leaf, 100, 64, "host")
    shallow, deep = queue_grain(fb.build(), Scale(1e-4))
    assert shallow.ports == (("a", 0), ("leaf", 1)) and shallow.buffer_pkts == 16
    assert deep.ports == (("b", 0), ("leaf", 2)) and deep.buffer_pkts == 64
    assert shallow.bdp_pkts == pytest.approx(4.0)  # two 100 Gbit/s hops, both ways


def test_a_fabric_with_one_host_has_no_rtt():
    fb = FabricBuilder("custom", {})
    fb.link(fb.host("a"), fb.switch("leaf", "leaf"), 100, 16, "host")
    fabric = fb.build()
    assert base_rtt(fabric, Scale(1e-4)) is None
    assert queue_grain(fabric, Scale(1e-4))[0].bdp_pkts is None


def test_the_limits_count_tcps_constants_in_real_bytes():
    text = limits_sentence(Scale(1e-4))
    assert "not RDMA over lossless Ethernet" in text and "no PFC" in text and "ECN" in text
    assert "packets of 15.1 MB real" in text and "10 packets is 151 MB" in text
    assert "3 duplicate ACKs (45.4 MB" in text
    assert "packets of 1.51 kB real" in limits_sentence(Scale(1))

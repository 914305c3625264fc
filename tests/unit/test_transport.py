"""TCP timers stretched by the time dilation: the route options a host gets, and the
warnings a user reads before a dilated run."""

import pytest

from topologies import rail_optimized, spine_leaf
from topologies.builder import FabricNetwork
from topologies.hostconfig import host_routes, ip_commands
from topologies.scale import Scale
from topologies.transport import (
    Transport,
    dilation_warnings,
    route_commands,
    route_options,
    wall_rto_min_ms,
)


def ifname(node: str, port: int) -> str:
    return f"{node}-eth{port}"


def at(d: float) -> Scale:
    return Scale(time_dilation=d)


def test_rto_min_and_quickack_on_the_connected_route_at_d1():
    f = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2)
    cmds = route_commands(f, "h0", ifname, Transport(rto_min_ms=5, delayed_ack=False), at(1))
    assert cmds == [
        [
            "route",
            "replace",
            "10.0.0.0/8",
            "dev",
            "h0-eth0",
            "proto",
            "kernel",
            "scope",
            "link",
            "src",
            "10.0.0.1",
            "rto_min",
            "5ms",
            "quickack",
            "1",
        ]
    ]


def test_rto_min_is_stretched_by_the_dilation():
    f = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2)
    cmds = route_commands(f, "h1", ifname, Transport(rto_min_ms=5), at(4))
    assert cmds == [
        [
            "route",
            "replace",
            "10.0.0.0/8",
            "dev",
            "h1-eth0",
            "proto",
            "kernel",
            "scope",
            "link",
            "src",
            "10.0.0.2",
            "rto_min",
            "20ms",
        ]
    ]


def test_every_nvlink_route_gets_the_options_too():
    f = rail_optimized(servers=2, gpus_per_server=3)
    cmds = route_commands(f, "gpu0_0", ifname, Transport(rto_min_ms=200), at(4))
    assert [c[2] for c in cmds] == ["10.0.0.0/8", "10.0.0.2/32", "10.0.0.3/32"]
    assert all(c[-2:] == ["rto_min", "800ms"] for c in cmds)
    # the same NVLink routes hostconfig creates: replacing them changes no path
    created = [c[2:] for c in ip_commands(f, "gpu0_0", ifname) if c[0] == "route"]
    assert created == host_routes(f, "gpu0_0", ifname)[1:]


@pytest.mark.parametrize(
    ("rto_min_ms", "d", "wall"),
    [(5, 1, 5), (5, 4, 20), (0.3, 4, 1), (2.5, 1, 3), (1.25, 2, 3), (200, 1.5, 300)],
)
def test_wall_rto_min_rounds_half_up_to_whole_milliseconds(rto_min_ms, d, wall):
    assert wall_rto_min_ms(rto_min_ms, at(d)) == wall
    assert route_options(Transport(rto_min_ms=rto_min_ms), at(d)) == ["rto_min", f"{wall}ms"]


@pytest.mark.parametrize(("rto_min_ms", "d"), [(0.4, 1), (60_000, 4), (120_001, 1)])
def test_rto_min_the_kernel_cannot_honour_is_refused(rto_min_ms, d):
    with pytest.raises(ValueError, match="transport.rto_min_ms=.*allowed: 1 to 120000 ms"):
        route_options(Transport(rto_min_ms=rto_min_ms), at(d))


def test_defaults_change_no_route():
    f = spine_leaf()
    assert route_commands(f, "h0", ifname, None, at(4)) == []
    assert route_commands(f, "h0", ifname, Transport(), at(4)) == []
    assert route_options(Transport(delayed_ack=False), at(8)) == ["quickack", "1"]


def test_no_warnings_without_dilation():
    assert dilation_warnings("cubic", None, at(1)) == []
    assert dilation_warnings("bbr", Transport(), at(1)) == []


def test_reno_with_stretched_timers_dilates_exactly():
    settings = Transport(rto_min_ms=200, delayed_ack=False, tail_loss_probe=False)
    assert dilation_warnings("reno", settings, at(4)) == []


@pytest.mark.parametrize(
    ("cc", "names"),
    [("cubic", "C·(t−K)³"), ("bbr", "2.5 s real-equivalent"), ("htcp", "250 ms")],
)
def test_congestion_controls_with_wall_time_constants_are_named(cc, names):
    (line,) = dilation_warnings(
        cc, Transport(rto_min_ms=200, delayed_ack=False, tail_loss_probe=False), at(4)
    )
    assert line.startswith(f"congestion control {cc} at time dilation 4 does not dilate")
    assert names in line
    assert "reno is ACK-clocked" in line


def test_an_unknown_congestion_control_is_not_assumed_to_dilate():
    (line,) = dilation_warnings(
        "vegas", Transport(rto_min_ms=200, delayed_ack=False, tail_loss_probe=False), at(2)
    )
    assert "not known to kvfabric" in line


def test_kernel_rto_min_and_delayed_ack_are_named_at_d_above_1():
    lines = dilation_warnings("reno", Transport(), at(4))
    assert len(lines) == 3
    assert "200 ms minimum RTO is wall time: 50 ms real-equivalent" in lines[0]
    assert "transport.rto_min_ms: 200" in lines[0]
    assert "10–50 ms real-equivalent" in lines[1]
    assert "transport.delayed_ack: false" in lines[1]
    assert "tail-loss probe" in lines[2] and "up to 4 times sooner" in lines[2]


def test_the_tail_loss_probe_is_turned_off_in_each_host_only_when_asked():
    from topologies.transport import host_sysctls

    assert host_sysctls(None) == [] and host_sysctls(Transport()) == []
    assert host_sysctls(Transport(tail_loss_probe=False)) == ["net.ipv4.tcp_early_retrans=0"]


def test_the_builder_refuses_a_minimum_rto_before_building_anything():
    f = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2)
    with pytest.raises(ValueError, match="is 160000 ms of wall time"):
        FabricNetwork(f, at(8), rules=object(), transport=Transport(rto_min_ms=20_000))
    net = FabricNetwork(f, at(4), rules=object(), transport=Transport(rto_min_ms=5))
    assert net.names is None  # not started: nothing was built

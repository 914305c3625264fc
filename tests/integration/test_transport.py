"""TCP's timers in the host namespaces of a real fabric: the minimum RTO stretched by
the time dilation and delayed ACKs off, on every route, also after a link flap."""

from __future__ import annotations

import pytest

from controller.ofctl import StaticRules
from experiments.measurement.reach import all_pairs_ping
from topologies import rail_optimized
from topologies.builder import FabricNetwork
from topologies.scale import Scale
from topologies.transport import Transport

pytestmark = pytest.mark.root


def _routes(net: FabricNetwork, host: str) -> list[str]:
    out, err, rc = net.host_exec(host, ["ip", "route", "show"])
    assert rc == 0, err
    return [line.strip() for line in out.splitlines() if line.strip()]


def _early_retrans(net: FabricNetwork, host: str) -> str:
    out, err, rc = net.host_exec(host, ["sysctl", "-n", "net.ipv4.tcp_early_retrans"])
    assert rc == 0, err
    return out.strip()


def test_rto_min_is_dilated_and_quickack_is_on_every_host_route():
    fabric = rail_optimized(servers=2, gpus_per_server=2, spines=1)
    transport = Transport(rto_min_ms=5, delayed_ack=False, tail_loss_probe=False)
    with FabricNetwork(
        fabric, Scale(time_dilation=4), rules=StaticRules(), transport=transport
    ) as net:
        routes = _routes(net, "gpu0_0")
        # the connected /8 over the network port and the /32 to gpu0_1 over NVLink
        assert len(routes) == 2, routes
        assert any(r.startswith("10.0.0.0/8 ") for r in routes), routes
        assert any(r.startswith("10.0.0.2 ") for r in routes), routes
        for route in routes:
            # iproute2 always locks rto_min (the kernel uses a route's only when locked)
            assert "rto_min lock 20ms" in route, route
            assert "quickack 1" in route, route
        for host in fabric.hosts:
            assert all("rto_min lock 20ms" in r for r in _routes(net, host.name)), host.name
            assert _early_retrans(net, host.name) == "0", host.name  # no tail-loss probe
        reach = all_pairs_ping(net)
        assert all(reach.values()), [pair for pair, ok in reach.items() if not ok]

        # a link down removes its routes; the connected one comes back without options
        (uplink,) = [k for k in fabric.links_of("gpu0_0") if k.kind != "nvlink"]
        net.set_link("gpu0_0", uplink.other("gpu0_0"), up=False)
        net.set_link("gpu0_0", uplink.other("gpu0_0"), up=True)
        (connected,) = [r for r in _routes(net, "gpu0_0") if r.startswith("10.0.0.0/8 ")]
        assert "rto_min lock 20ms" in connected and "quickack 1" in connected, connected


def test_without_transport_the_routes_keep_the_kernels_timers():
    fabric = rail_optimized(servers=2, gpus_per_server=2, spines=1)
    with FabricNetwork(fabric, Scale(time_dilation=4), rules=StaticRules()) as net:
        routes = _routes(net, "gpu0_0")
        assert _early_retrans(net, "gpu0_0") != "0"  # the kernel's tail-loss probe stays
    assert len(routes) == 2, routes
    assert not [r for r in routes if "rto_min" in r or "quickack" in r], routes

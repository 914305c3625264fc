"""One fabric over two servers of a local cluster (``ClusterNetwork``): the hosts
reach each other through the controller's rules sent over TLS, the cut links are
VXLAN tunnels shaped like every other link, and neither server keeps anything of a
run after it stops, after a build failing half-way, or after Ctrl-C."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.process import ControllerProcess
from controller.tls import RunPKI
from experiments.measurement.reach import all_pairs_ping
from tests.integration.conftest import left_on
from tests.integration.rates import assert_shaped, wire_rates_mbps
from topologies import rail_optimized, spine_leaf
from topologies.builder import BuildError, Controller
from topologies.cluster.network import ClusterNetwork
from topologies.cluster.ssh import Server
from topologies.placement import MachineShare, place
from topologies.scale import Scale

pytestmark = pytest.mark.root


@contextlib.contextmanager
def cluster_fabric(rec, fabric, tmp: Path, **kw) -> Iterator[tuple[ClusterNetwork, dict]]:
    plan = rec.plan()
    servers = [Server(s.address) for s in plan.servers]
    placement = place(fabric, [MachineShare(str(s)) for s in servers])
    with (
        RunPKI(addresses=(plan.coordinator_address,), parent=tmp) as tls,
        ControllerProcess(
            fabric, "ecmp", tmp / "ctl", tls=tls, listen_host=plan.coordinator_address
        ) as proc,
    ):
        files = tuple(str(tls.path(n)) for n in ("switch.key", "switch.pem", "ca.pem"))
        ctl = Controller(host=plan.coordinator_address, port=proc.port, tls=files)
        with ClusterNetwork(
            fabric, Scale(), servers=servers, machine_of=placement.machine_of, controller=ctl, **kw
        ) as net:
            proc.wait_ready(timeout_s=60)
            yield net, {"placement": placement, "servers": servers, "controller": proc}


def test_every_pair_reaches_every_other_through_the_controller_across_two_servers(
    local_cluster, tmp_path
):
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with cluster_fabric(local_cluster, fabric, tmp_path) as (net, info):
        prefix, cut = net.prefix, info["placement"].cut
        assert len(set(info["placement"].machine_of.values())) == 2 and cut
        reach = all_pairs_ping(net)
        link = cut[0]  # a cut link is a VXLAN tunnel on its server, shaped by HTB
        dev = net.intf(link.a, link.a_port)
        place = net.place_of(link.a)
        kind = net.run_at(place, ["ip", "-d", "link", "show", dev])[0]
        qdisc = net.run_at(place, ["tc", "qdisc", "show", "dev", dev])[0]
        targets = net.run_at(place, ["ovs-vsctl", "get-controller", net.bridge(link.a)])[0]
    failed = [pair for pair, ok in reach.items() if not ok]
    assert not failed and len(reach) == 12, failed
    assert "vxlan id" in kind and "dstport 4789" in kind
    assert "htb" in qdisc and "pfifo" in qdisc
    assert targets.strip().startswith("ssl:10.251.")  # TLS to the cluster address
    for server in info["servers"]:
        assert left_on(server, prefix) == [], server


def test_a_transfer_between_gpus_on_different_servers_runs_at_the_shaped_rate(
    local_cluster, tmp_path
):
    fabric = rail_optimized(servers=2, gpus_per_server=2, spines=2)
    with cluster_fabric(local_cluster, fabric, tmp_path) as (net, info):
        machine_of = info["placement"].machine_of
        assert machine_of["gpu0_0"] != machine_of["gpu1_1"]  # each GPU server on its own
        configured = 400e9 * 1e-4 / 1e6  # 40 Mbit/s
        wires = wire_rates_mbps(net, "gpu0_0", "gpu1_1", 0.90 * configured)
        tx = net.tx_buffers
    assert_shaped(wires, configured)
    assert all(v and v["now"] > v["before"] for v in tx.values()), tx  # every server's OVS


@pytest.mark.parametrize("step", ["_configure_hosts", "_shape"])
def test_a_build_failing_half_way_leaves_nothing_on_either_server(
    local_cluster, tmp_path, monkeypatch, step
):
    seen = {}

    def boom(self):
        seen["prefix"] = self.prefix
        seen["made"] = {s: left_on(self.servers[s], self.prefix) for s in self.remote}
        raise BuildError("injected failure")

    monkeypatch.setattr(ClusterNetwork, step, boom)
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with (
        pytest.raises(BuildError, match="injected"),
        cluster_fabric(local_cluster, fabric, tmp_path),
    ):
        pass
    assert all(seen["made"].values()), "the failure should strike after both servers have parts"
    for dest in seen["made"]:
        assert left_on(Server(dest.split("@")[1]), seen["prefix"]) == []


def test_ctrl_c_during_use_leaves_nothing_on_either_server(local_cluster, tmp_path):
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with (
        pytest.raises(KeyboardInterrupt),
        cluster_fabric(local_cluster, fabric, tmp_path) as (
            net,
            info,
        ),
    ):
        prefix, servers = net.prefix, info["servers"]
        raise KeyboardInterrupt
    assert all(left_on(s, prefix) == [] for s in servers)
    leftover = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout
    assert prefix not in leftover

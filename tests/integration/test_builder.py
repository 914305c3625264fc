"""Real fabrics on Mininet + OVS: reachability, rates, bounded queues, teardown."""

from __future__ import annotations

import logging
import subprocess
import threading
import time

import psutil
import pytest

from controller.ofctl import StaticRules
from experiments.measurement.qstats import QdiscReader
from experiments.measurement.reach import all_pairs_ping
from tests.integration.rates import assert_shaped, wire_rates_mbps
from topologies import fat_tree, rail_optimized, spine_leaf
from topologies.builder import BuildError, FabricNetwork
from topologies.cleanup import bridges, interfaces
from topologies.naming import owned
from topologies.scale import Scale

pytestmark = pytest.mark.root
log = logging.getLogger(__name__)

SMALL = {
    "spine_leaf": lambda: spine_leaf(spines=2, leaves=2, hosts_per_leaf=2),
    "fat_tree": lambda: fat_tree(4),
    "rail_optimized": lambda: rail_optimized(servers=2, gpus_per_server=2, spines=2),
}


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_all_pairs_ping(kind):
    fabric = SMALL[kind]()
    with FabricNetwork(fabric, Scale(), rules=StaticRules()) as net:
        reach = all_pairs_ping(net)
    failed = [pair for pair, ok in reach.items() if not ok]
    assert not failed, f"{len(failed)} of {len(reach)} pairs unreachable, e.g. {failed[:5]}"
    assert len(reach) == len(fabric.hosts) * (len(fabric.hosts) - 1)


def test_transfer_across_the_spine_runs_at_the_emulated_rate():
    fabric = rail_optimized(servers=2, gpus_per_server=2, spines=2)
    assert "spine0" in fabric.shortest_paths("gpu0_0", "gpu1_1")[0]
    configured = 400e9 * 1e-4 / 1e6  # 40 Mbit/s
    with FabricNetwork(fabric, Scale(), rules=StaticRules()) as net:
        wires = wire_rates_mbps(net, "gpu0_0", "gpu1_1", 0.90 * configured)
    # goodput excludes headers: the wire rates it implies, never above the shaped rate
    assert_shaped(wires, configured)


def _three_into_h0(net, fabric, client_args: list[str], drain_s: float = 0.0) -> list:
    """h3, h4 and h5 run ``iperf3 -c 10.0.0.1 client_args`` at once into h0 while the
    queue of leaf0's port to h0 is sampled every 5 ms; returns the samples."""
    egress = net.intf("leaf0", fabric.port("leaf0", "h0"))
    servers = [
        net.mn("h0").popen(["iperf3", "-s", "-1", "-p", str(5201 + i)], stdout=subprocess.DEVNULL)
        for i in range(3)
    ]
    samples: list = []
    stop = threading.Event()
    try:
        time.sleep(0.3)
        with QdiscReader([egress]) as reader:

            def sample():
                while not stop.is_set():
                    samples.append(reader.read()[egress])
                    time.sleep(0.005)

            th = threading.Thread(target=sample)
            th.start()
            clients = [
                net.mn(src).popen(
                    ["iperf3", "-c", "10.0.0.1", "-p", str(5201 + i), *client_args],
                    stdout=subprocess.DEVNULL,
                )
                for i, src in enumerate(["h3", "h4", "h5"])
            ]
            for c in clients:
                c.wait(timeout=30)
            time.sleep(drain_s)
            stop.set()
            th.join()
    finally:
        stop.set()
        for srv in servers:
            srv.kill()
            srv.wait()
    return samples


def _incast_queue(buffer_pkts: int) -> tuple[int, int, int]:
    """3-to-1 incast at 10 Mbit/s; returns (max backlog, drops, samples) at
    the receiver's leaf egress."""
    fabric = spine_leaf(
        spines=1,
        leaves=2,
        hosts_per_leaf=3,
        host_gbps=100,
        uplink_gbps=400,
        buffer_pkts=buffer_pkts,
    )
    with FabricNetwork(fabric, Scale(), rules=StaticRules()) as net:
        samples = _three_into_h0(net, fabric, ["-t", "3", "-C", "cubic"])
    return max(s.backlog_pkts for s in samples), samples[-1].drops, len(samples)


def test_incast_builds_a_bounded_queue_and_drops_when_the_buffer_is_small():
    peak, drops, n = _incast_queue(buffer_pkts=8)
    assert n > 100
    assert 4 <= peak <= 8, peak
    assert drops > 0
    peak_big, _drops_big, _ = _incast_queue(buffer_pkts=64)
    assert peak_big > 8, "a deeper buffer should hold a longer queue"
    assert peak_big <= 64


def _owned_by(prefix: str) -> list[str]:
    return [n for n in bridges() + interfaces() if owned(n) == prefix]


def test_exit_removes_every_bridge_veth_and_process():
    net = FabricNetwork(
        rail_optimized(servers=2, gpus_per_server=2, spines=1), Scale(), rules=StaticRules()
    )
    with net:
        prefix = net.prefix
        pids = [n.pid for n in net.net.hosts + net.net.switches]
        assert len(_owned_by(prefix)) > 0
    assert _owned_by(prefix) == []
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


@pytest.mark.parametrize("step", ["_configure_hosts", "_shape"])
def test_a_failure_half_way_through_the_build_leaves_nothing(monkeypatch, step):
    seen = {}

    def boom(self):
        seen["prefix"] = self.prefix
        seen["before"] = len(_owned_by(self.prefix))
        raise BuildError("injected failure")

    monkeypatch.setattr(FabricNetwork, step, boom)
    with (
        pytest.raises(BuildError, match="injected"),
        FabricNetwork(spine_leaf(), Scale(), rules=StaticRules()),
    ):
        pass
    assert seen["before"] > 0, "the failure should strike after resources exist"
    assert _owned_by(seen["prefix"]) == []


def test_ctrl_c_during_use_tears_down():
    with (
        pytest.raises(KeyboardInterrupt),
        FabricNetwork(spine_leaf(), Scale(), rules=StaticRules()) as net,
    ):
        prefix = net.prefix
        raise KeyboardInterrupt
    assert _owned_by(prefix) == []


def _tx_buffers() -> list[int]:
    """Send-buffer sizes of ovs-vswitchd's transmit sockets (``ss -0 -m``)."""
    out = subprocess.run(["ss", "-0", "-m", "-p"], capture_output=True, text=True).stdout
    text = out.replace("\n\t", " ")  # ss may wrap skmem onto a second line
    return [
        int(line.split(",tb")[1].split(",")[0])
        for line in text.splitlines()
        if "ovs-vswitchd" in line and "[0]:*" in line and ",tb" in line
    ]


def test_a_deep_queue_fills_to_its_depth_and_loss_is_counted():
    """Three 15 Mbit/s UDP senders into one 10 Mbit/s egress with a 256-packet queue:
    more packets wait than OVS's default transmit buffer holds (about 90), so without
    ``topologies.ovs_tx`` the queue never fills and OVS drops instead. The queue must
    reach its depth, the loss must be mostly the queue's own drops (OVS also abandons
    the rest of a send batch when the queue drops one: at most one more per drop here),
    and OVS's buffer is back to its size after the fabric."""
    from experiments.measurement import tcpcount

    fabric = spine_leaf(
        spines=1, leaves=2, hosts_per_leaf=3, host_gbps=100, uplink_gbps=400, buffer_pkts=256
    )
    with FabricNetwork(fabric, Scale(), rules=StaticRules()) as net:
        if net.datapath != "user":
            pytest.skip("the transmit buffer matters on the userspace datapath only")
        assert net.tx_buffer is not None and net.tx_buffer["now"] >= 256 * 4096
        hosts = [h.name for h in fabric.hosts]
        intfs = {
            net.intf(sw.name, lk.port_of(sw.name))
            for sw in fabric.switches
            for lk in fabric.links_of(sw.name)
        }
        before = {
            "hosts": tcpcount.host_counters(net, hosts),
            "switches": tcpcount.switch_counters(intfs),
        }
        udp = ["-u", "-b", "15M", "-l", "1400", "-t", "3"]
        peak = max(x.backlog_pkts for x in _three_into_h0(net, fabric, udp, drain_s=0.5))
        got = tcpcount.ledger(
            before,
            {
                "hosts": tcpcount.host_counters(net, hosts),
                "switches": tcpcount.switch_counters(intfs),
            },
        )
        during = net.tx_buffer
    h, sw = got["hosts"], got["switch_ports"]
    sent, delivered = h.get("Udp.OutDatagrams", 0), h.get("Udp.InDatagrams", 0)
    queue_drops = sw.get("qdisc_pfifo_drops", 0)
    assert peak >= 200, f"the 256-packet queue held at most {peak}"
    assert queue_drops > 100, "the queue should overflow"
    lost = sent - delivered - queue_drops - h.get("qdisc_pfifo_drops", 0)
    lost -= h.get("Udp.RcvbufErrors", 0) + sw.get("ovs_socket_drops", 0)
    log.warning(
        "deep queue: peak %d packets, %d of %d datagrams dropped by the queue, %d lost "
        "beyond it (pytest -o log_cli=true shows this)",
        peak,
        queue_drops,
        sent,
        lost,
    )
    assert lost <= queue_drops, f"{lost} datagrams lost beyond {queue_drops} queue drops: {got}"
    assert during["before"] in _tx_buffers() or not _tx_buffers()

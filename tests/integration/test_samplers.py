"""Samplers on a real fabric: a 2-to-1 incast saturates one switch egress; the
queue sampler sees its standing backlog (bounded by the buffer) draining at the
configured rate, idle ports stay empty, and every sampler keeps its rate.
The tick machinery itself (absolute ticks, no catch-up bursts) needs no root."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from controller.ofctl import StaticRules
from experiments.analysis.fidelity import busy_dequeue, dequeue_rate_check, egress_rates_bps
from experiments.measurement.iperf import iperf3
from experiments.measurement.qstats import QdiscReader
from experiments.measurement.samplers import (
    CpuSampler,
    LinkSampler,
    Netlink,
    QueueSampler,
    Sampler,
    SamplerError,
)
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.scale import Scale

log = logging.getLogger("test_samplers")
SCALE = Scale()  # 1e-4: 100 Gbit/s host links -> 10 Mbit/s, 400 Gbit/s uplinks -> 40 Mbit/s
BUFFER = 64


@pytest.fixture(scope="module")
def net():
    # h0, h1 on leaf0; h2, h3 on leaf1; leaf1 port 1 faces h2, port 2 faces h3
    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2, buffer_pkts=BUFFER)
    with FabricNetwork(fabric, SCALE, rules=StaticRules()) as n:
        yield n


def switch_ports(net) -> dict[str, tuple[str, int]]:
    fab = net.fabric
    return {
        net.intf(sw.name, lk.port_of(sw.name)): (sw.name, lk.port_of(sw.name))
        for sw in fab.switches
        for lk in fab.links_of(sw.name)
    }


def incast(net, seconds: float) -> list[float]:
    """h0 and h1 send to h2 at once (iperf3, cubic): 20 Mbit/s offered to leaf1's
    10 Mbit/s egress toward h2. Goodput per sender, Mbit/s."""
    out: dict[str, float] = {}
    errors: list[BaseException] = []

    def send(src: str, port: int) -> None:
        try:
            out[src] = iperf3(net, src, "h2", seconds=seconds, port=port).goodput_mbps
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send, args=a) for a in (("h0", 5301), ("h1", 5302))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [out["h0"], out["h1"]]


@pytest.mark.root
def test_a_saturated_egress_stands_at_its_buffer_and_drains_at_its_rate(net):
    ports = switch_ports(net)
    assert len(ports) == 8  # leaf0: 3, leaf1: 3, spine0: 2
    with (
        QueueSampler(ports, 200.0) as queues,
        LinkSampler(ports, 10.0) as links,
        CpuSampler(10.0) as cpu,
    ):
        goodput = incast(net, seconds=3.0)
    q, lk, c = queues.table(), links.table(), cpu.table()
    log.info(
        "queues %.1f Hz (%.3f ms CPU per dump, %d ports), links %.1f Hz, cpu %.1f Hz; goodput %s",
        queues.achieved_hz,
        queues.cpu_ms_per_sample,
        len(ports),
        links.achieved_hz,
        cpu.achieved_hz,
        goodput,
    )

    # every sampler kept its rate, and its table has the promised shape
    for s in (queues, links, cpu):
        assert s.achieved_hz >= 0.9 * s.requested_hz, (s.name, s.achieved_hz)
        assert s.error is None
    assert list(q.columns) == [
        "t_ns",
        "node",
        "port",
        "backlog_pkts",
        "backlog_bytes",
        "drops",
        "sent_bytes",
    ]
    assert all(str(q[col].dtype) == "int64" for col in q.columns if col != "node")
    assert len(q) == queues.samples * len(ports)  # one row per port per tick
    assert q["t_ns"].is_monotonic_increasing

    # the saturated egress (leaf1 -> h2): a standing queue, never above its buffer
    hot = q[(q["node"] == "leaf1") & (q["port"] == 1)]
    assert hot["backlog_pkts"].max() <= BUFFER
    assert hot["backlog_pkts"].max() >= BUFFER // 2
    assert (hot["backlog_pkts"] > 0).mean() > 0.6
    assert hot["backlog_bytes"].max() <= BUFFER * 1514

    # ... draining at its configured rate, and it is the only standing queue
    rates = egress_rates_bps(net.plan)
    busy = busy_dequeue(q)
    assert {(r.node, r.port) for r in busy.itertuples()} == {("leaf1", 1)}, busy
    ratio = busy.iloc[0]["bps"] / rates[("leaf1", 1)]
    log.info("leaf1:1 busy %.2f s, dequeue %.4f x configured", busy.iloc[0]["busy_s"], ratio)
    assert abs(ratio - 1) <= 0.05, busy
    assert dequeue_rate_check(q, rates, 0.05)["ok"]

    # the port toward h3 carried nothing: never a backlog
    idle = q[(q["node"] == "leaf1") & (q["port"] == 2)]
    assert len(idle) == queues.samples and (idle["backlog_pkts"] == 0).all()

    # link counters: what left leaf1 toward h2 is what both senders got through
    toward_h2 = lk[(lk["node"] == "leaf1") & (lk["port"] == 1)]["tx_bytes"]
    sent_mbit = (toward_h2.iloc[-1] - toward_h2.iloc[0]) * 8 / 1e6
    assert sent_mbit == pytest.approx(sum(goodput) * 3.0 / (1448 / 1514), rel=0.15)
    assert ((c["cpu_pct"] >= 0) & (c["cpu_pct"] <= 100)).all() and len(c) >= 25


@pytest.mark.root
def test_the_hand_parsed_dump_agrees_with_pyroute2(net):
    ports = switch_ports(net)
    with QdiscReader(list(ports)) as reader:
        nl = Netlink()
        try:
            index = nl.ifindexes()
            ours = nl.pfifo_stats({index[name]: name for name in ports})
        finally:
            nl.close()
        theirs = reader.read()
    assert set(ours) == set(theirs) == set(ports)
    for name, (qlen, backlog, drops, sent) in ours.items():
        ref = theirs[name]
        assert (qlen, backlog, drops) == (ref.backlog_pkts, ref.backlog_bytes, ref.drops)
        assert abs(sent - ref.sent_bytes) <= 3000, name  # a stray IPv6 packet at most


@pytest.mark.root
def test_a_bad_port_fails_at_start_and_a_dead_thread_is_reported(net):
    with pytest.raises(LookupError, match="no interface named nosuch0"):
        QueueSampler({"nosuch0": ("leaf0", 9)}).start()

    sampler = QueueSampler(switch_ports(net), 200.0)

    def boom() -> None:
        raise RuntimeError("netlink went away")

    sampler.start()
    sampler._sample = boom  # the next tick fails
    time.sleep(0.05)
    assert not sampler.running and isinstance(sampler.error, RuntimeError)
    with pytest.raises(SamplerError, match="netlink went away"):
        sampler.stop()
    sampler.stop()  # idempotent, and the error is reported once
    assert sampler._nl is None  # the socket was released


class Ticker(Sampler):
    """Records when each tick ran; every ``slow_every``-th tick takes ``slow_s``."""

    name = "ticker"

    def __init__(self, rate_hz: float, slow_every: int = 0, slow_s: float = 0.0) -> None:
        super().__init__(rate_hz)
        self.t: list[int] = []
        self.slow_every, self.slow_s = slow_every, slow_s

    def _sample(self) -> None:
        self.t.append(time.monotonic_ns())
        if self.slow_every and len(self.t) % self.slow_every == 0:
            time.sleep(self.slow_s)


def test_ticks_are_absolute_and_missed_ones_are_skipped_not_burst():
    # 100 Hz; every 10th tick takes 35 ms (3.5 periods): the ticks it overran are skipped
    with Ticker(100.0, slow_every=10, slow_s=0.035) as s:
        time.sleep(1.0)
    gaps_ms = [(b - a) / 1e6 for a, b in zip(s.t, s.t[1:], strict=False)]
    assert min(gaps_ms) > 4.0, gaps_ms  # never two samples back to back to catch up
    # on the grid t0 + k * 10 ms (within scheduling noise)
    phase = [((t - s._t_start) / 1e6) % 10 for t in s.t]
    assert sum(p < 3 for p in phase) >= 0.8 * len(phase), phase
    # 1 s: ~100 ticks minus ~2.5 skipped per slow one
    assert 65 <= s.samples <= 85 and s.achieved_hz == pytest.approx(s.samples / s.elapsed_s)


def test_a_sampler_that_died_early_shows_a_low_rate_over_the_whole_run():
    s = Ticker(100.0)
    s.start()
    time.sleep(0.2)
    s._sample = lambda: (_ for _ in ()).throw(OSError("gone"))
    time.sleep(0.3)
    assert s.error is not None and not s.running
    s.stop(raise_error=False)
    assert s.achieved_hz < 60  # ~20 samples over 0.5 s, not 100 Hz over 0.2 s


def test_cpu_sampler_table():
    with CpuSampler(20.0) as cpu:
        time.sleep(0.5)
    c = cpu.table()
    assert list(c.columns) == ["t_ns", "cpu_pct", "max_core_pct", "steal_pct"] and len(c) >= 8
    assert ((c["steal_pct"] >= 0) & (c["steal_pct"] <= c["cpu_pct"] + 1e-9)).all()
    assert ((c["cpu_pct"] >= 0) & (c["cpu_pct"] <= c["max_core_pct"] + 1e-9)).all()
    assert (c["max_core_pct"] <= 100).all()

"""Agents on real fabrics: incast rounds, drops at a small buffer, all-to-all steps, probe
delay under load, schedule lateness at 200 flows/s and a refused peer."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from controller.ofctl import StaticRules
from experiments.analysis.metrics.flows import alltoall_step_ms, incast_goodput
from experiments.measurement.qstats import QdiscReader
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.scale import Scale
from traffic.agents import AgentFleet
from traffic.workloads import concat_schedules, incast, moe_alltoall, probe
from traffic.workloads.schedule import build_schedule

pytestmark = pytest.mark.root

log = logging.getLogger("test_agents")
SCALE = Scale()  # the default 1e-4: 100 Gbit/s host links -> 10 Mbit/s
HOSTS = [f"h{i}" for i in range(10)]


@pytest.fixture(scope="module")
def net():
    # h0..h4 on leaf0, h5..h9 on leaf1; the default 64-packet buffers
    with FabricNetwork(
        spine_leaf(spines=1, leaves=2, hosts_per_leaf=5), SCALE, rules=StaticRules()
    ) as n:
        yield n


def _all_stopped(fleet: AgentFleet) -> bool:
    return all(p.poll() is not None for p in fleet.procs.values())


@pytest.mark.parametrize("senders", [1, 4, 8])
def test_incast_completes_every_round(net, tmp_path, senders):
    rounds = 5
    sched = incast("h0", HOSTS[1 : senders + 1], 256_000_000, rounds)  # 25.6 kB per SRU
    with AgentFleet(net, tmp_path, sched, SCALE) as fleet:
        flows = fleet.run(timeout_s=30)
    assert _all_stopped(fleet)
    assert flows["ok"].all(), flows.loc[~flows["ok"], "error"].unique().tolist()
    assert len(flows) == rounds * senders
    table, stats = incast_goodput(flows)
    assert len(table) == rounds and stats["rounds"] == rounds
    assert (table["round_ms"] > 0).all()
    # bounded by the 10 Mbit/s receiver link (round 0 may ride HTB's initial burst)
    assert 1.0 < table["goodput_mbps"].median() < 10.5, table
    # round r+1 starts exactly when round r's last byte arrived (the barrier)
    ends = flows.groupby("round")["t_end_ns"].max()
    starts = flows.groupby("round")["t_release_ns"].min()
    assert all(starts[r + 1] == ends[r] for r in range(rounds - 1))
    log.info("incast %d senders: round_ms %s", senders, stats["round_ms"])


def test_alltoall_of_four_completes_its_steps(net, tmp_path):
    group, steps = ["h0", "h1", "h5", "h6"], 4
    sched = moe_alltoall(group, "moe", steps, 4096, step_interval_ms=50)
    with AgentFleet(net, tmp_path, sched, SCALE, connection="per_flow") as fleet:
        flows = fleet.run(timeout_s=30)
    assert flows["ok"].all(), flows.loc[~flows["ok"], "error"].unique().tolist()
    assert len(flows) == steps * 2 * 4 * 3
    table, per_tenant = alltoall_step_ms(flows)
    assert len(table) == steps and (table["failed"] == 0).all()
    assert per_tenant["moe"]["count"] == steps


def test_probe_delay_rises_when_a_competing_flow_fills_the_path(net, tmp_path):
    probes = probe([("h1", "h0")], 100, 100, 3.0)
    # one TCP flow h2 -> h0 from 1 s on, ~2.4 s at 10 Mbit/s: it fills h0's leaf egress
    bulk = incast("h0", ["h2"], 30_000_000_000, 1, start_ms=1000)
    sched = concat_schedules([probes, bulk])
    with AgentFleet(net, tmp_path, sched, SCALE) as fleet:
        flows = fleet.run(timeout_s=30)
    assert flows.loc[flows["kind"] == "incast", "ok"].all()
    p = flows[(flows["kind"] == "probe") & flows["ok"]]
    owd = (p["t_end_ns"] - p["t_start_ns"]) / 1e6
    since = (p["t_sched_ns"] - p["t_sched_ns"].min()) / 1e6
    idle, loaded = owd[since < 900], owd[(since > 1500) & (since < 2900)]
    assert len(idle) > 50 and len(loaded) > 50
    log.info("probe owd idle p50 %.2f ms, loaded p50 %.2f ms", idle.median(), loaded.median())
    assert loaded.median() > max(5.0, 5 * idle.median()), (idle.median(), loaded.median())


def test_agents_issue_on_schedule_at_200_flows_per_second(net, tmp_path):
    """Every message sent, none early, the median on time. The p99 target (2 ms) is the
    ``lateness`` benchmark's and the verdict's: on a shared VM the tail is the host's."""
    rng = np.random.default_rng(7)
    n = 600  # 3 s at 200 flows/s, Poisson arrivals, random pairs, 1 kB emulated each
    t = np.cumsum(rng.exponential(1 / 200, n)) * 1e9
    src = rng.integers(len(HOSTS), size=n)
    dst = (src + rng.integers(1, len(HOSTS), size=n)) % len(HOSTS)
    names = np.asarray(HOSTS, dtype=object)
    sched = build_schedule(
        {
            "kind": ["background"] * n,
            "tenant": ["bg"] * n,
            "src": names[src],
            "dst": names[dst],
            "bytes": np.full(n, 10_000_000),
            "t_sched_ns": t.astype(np.int64),
        }
    )
    with AgentFleet(net, tmp_path, sched, SCALE) as fleet:
        flows = fleet.run(timeout_s=30)
    assert flows["ok"].all(), flows.loc[~flows["ok"], "error"].unique().tolist()
    late = flows["lateness_ms"]
    p50, p99 = float(late.quantile(0.5)), float(late.quantile(0.99))
    log.info("lateness at 200 flows/s: p50 %.3f ms, p99 %.3f ms, max %.3f", p50, p99, late.max())
    assert (late >= 0).all()
    assert p50 < 1.0, (p50, p99)


def test_a_refused_peer_is_recorded_and_the_run_goes_on(net, tmp_path):
    sched = concat_schedules(
        [incast("h0", ["h1", "h2"], 10_000_000, 3), incast("h4", ["h3"], 10_000_000, 2)]
    )
    for connection in ("persistent", "per_flow"):
        with AgentFleet(net, tmp_path / connection, sched, SCALE, connection=connection) as fl:
            fl.stop_agent("h4")
            flows = fl.run(timeout_s=20)
        assert _all_stopped(fl)
        to_h4 = flows[flows["dst"] == "h4"].sort_values("flow_id")
        assert not to_h4["ok"].any()
        assert "refused" in to_h4["error"].iloc[0].lower(), to_h4["error"].tolist()
        assert "never released" in to_h4["error"].iloc[1]
        assert flows.loc[flows["dst"] == "h0", "ok"].all(), connection


def test_eight_senders_overflow_a_small_buffer(tmp_path):
    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=5, buffer_pkts=8)
    with FabricNetwork(fabric, SCALE, rules=StaticRules()) as net:
        egress = net.intf("leaf0", fabric.port("leaf0", "h0"))
        sched = incast("h0", HOSTS[1:9], 256_000_000, 3)
        with QdiscReader([egress]) as reader:
            before = reader.read()[egress].drops
            with AgentFleet(net, tmp_path, sched, SCALE) as fleet:
                flows = fleet.run(timeout_s=60)
            after = reader.read()[egress].drops
    assert flows["ok"].all(), flows.loc[~flows["ok"], "error"].unique().tolist()
    assert after - before > 0, (before, after)


def test_a_capture_of_a_kv_transfer_dissects_into_the_header_fields(net, tmp_path):
    """tcpdump on the decode GPU; scapy reads flow, request and layer back."""
    import select
    import subprocess
    import time

    from scapy.utils import rdpcap

    from traffic.header import KVHeader
    from traffic.workloads import kv_transfer

    sched = kv_transfer(["h1"], ["h6"], "llama-3-8b", 1000, mode="layer_pipelined")
    assert len(sched) == 32  # one chunk per layer
    pcap = tmp_path / "kv.pcap"
    dev = net.intf("h6", 0)
    dump = net.mn("h6").popen(
        ["tcpdump", "-i", dev, "-U", "-w", str(pcap), "tcp", "dst", "port", "47000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Send only once tcpdump says it listens: a fixed sleep lost the
        # whole transfer on a slow, cold CI machine.
        ready, _, _ = select.select([dump.stderr], [], [], 30)
        banner = dump.stderr.readline() if ready else ""
        assert "listening on" in banner, f"tcpdump did not start: {banner!r}"
        with AgentFleet(net, tmp_path, sched, SCALE, connection="per_flow") as fleet:
            flows = fleet.run(timeout_s=30)
        time.sleep(0.5)
    finally:
        dump.terminate()
        _, err = dump.communicate(timeout=10)
    assert flows["ok"].all()
    packets = rdpcap(str(pcap))
    headers = [p[KVHeader] for p in packets if p.haslayer(KVHeader)]
    assert headers, f"{len(packets)} packets captured, none with a header; tcpdump: {err!r}"
    seen = {(h.flow_id, h.request_id, h.layer, h.chunk) for h in headers}
    expected = set(
        sched[["flow_id", "request_id", "layer", "chunk"]].itertuples(index=False, name=None)
    )
    assert seen == expected
    assert {h.kind for h in headers} == {2}  # kv_layer


class PingPong:
    """A live driver: h2 and h7 answer each other's message ``rounds`` times, each reply
    sent ``gap_ns`` after the last one arrived."""

    hosts = ["h2", "h7"]
    tenants = ["live"]

    def __init__(self, rounds: int, gap_ns: int, first_flow_id: int) -> None:
        self.rounds, self.gap_ns, self.next_id = rounds, gap_ns, first_flow_id
        self.arrivals: list[int] = []
        self.failed: list[str] = []
        self.sent_at: dict[int, int] = {}

    def _msg(self, src: str, dst: str, t_ns: int) -> list:
        from traffic.driver import Message

        fid, self.next_id = self.next_id, self.next_id + 1
        self.sent_at[fid] = t_ns
        return [Message(fid, "token", src, dst, 2_000_000, t_ns, tenant="live")]

    def start(self, t0_ns):
        return self._msg("h2", "h7", t0_ns)

    def on_received(self, flow_id, t_end_ns):
        self.arrivals.append(t_end_ns)
        if len(self.arrivals) >= self.rounds:
            return []
        src, dst = ("h7", "h2") if len(self.arrivals) % 2 else ("h2", "h7")
        return self._msg(src, dst, t_end_ns + self.gap_ns)

    def on_failed(self, flow_id, error, now_ns):
        self.failed.append(error)
        return []

    def next_timer_ns(self):
        return None

    def on_timer(self, now_ns):
        return []

    def finished(self):
        return len(self.arrivals) >= self.rounds or bool(self.failed)

    def finish(self, now_ns, why):
        self.failed.append(why)


def test_a_live_driver_sends_each_message_after_the_previous_one_arrived(net, tmp_path):
    """The fleet hands a driver's messages to the agents as the run goes: each reply
    starts exactly ``gap`` after the previous message's receiver timestamp."""
    sched = probe([("h0", "h5")], 50, 200, 0.2)  # a static schedule alongside
    driver = PingPong(rounds=6, gap_ns=20_000_000, first_flow_id=len(sched))
    with AgentFleet(net, tmp_path, sched, SCALE, driver=driver) as fleet:
        flows = fleet.run(timeout_s=30)
    live = flows[flows["tenant"] == "live"].sort_values("flow_id")
    assert driver.failed == [] and len(driver.arrivals) == 6
    assert len(live) == 6 and live["ok"].all(), live["error"].tolist()
    assert list(live["src"]) == ["h2", "h7"] * 3
    assert (flows["tenant"] != "live").sum() == len(sched)
    # Each message was scheduled from the previous arrival and started on time.
    arrivals = live["t_end_ns"].to_numpy()
    scheduled = live["t_sched_ns"].to_numpy()
    assert (scheduled[1:] == arrivals[:-1] + 20_000_000).all()
    # never before its instant; how late is the verdict's business (lateness check)
    assert (live["lateness_ms"] >= 0).all() and live["lateness_ms"].median() < 5.0, live[
        "lateness_ms"
    ].tolist()

"""The agents and their fleet on loopback addresses (127.0.0.x), without root or Mininet:
a stand-in for ``FabricNetwork`` has no namespaces, so every host's sockets live here."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from topologies.scale import Scale
from traffic.agents import FLOW_COLUMNS, AgentFleet, FleetError
from traffic.workloads import concat_schedules, incast, probe

CC = "cubic" if os.geteuid() == 0 else "reno"  # non-root may only pick allowed algorithms


class LoopbackNet:
    """Enough of FabricNetwork for AgentFleet: host hN has address 127.0.0.(N+1)."""

    def __init__(self, n: int) -> None:
        hosts = [SimpleNamespace(name=f"h{i}", ip=f"127.0.0.{i + 1}", server=i) for i in range(n)]
        by_name = {h.name: h for h in hosts}
        self.fabric = SimpleNamespace(hosts=hosts, node=by_name.__getitem__)


def stopped(fleet: AgentFleet) -> bool:
    return bool(fleet.procs) and all(p.poll() is not None for p in fleet.procs.values())


@pytest.mark.parametrize(
    ("connection", "processes"), [("persistent", None), ("per_flow", 1), ("persistent", "per_host")]
)
def test_incast_and_probes_complete_over_loopback(tmp_path, connection, processes):
    net = LoopbackNet(4)
    schedule = concat_schedules(
        [incast("h0", ["h1", "h2", "h3"], 20_000_000, 4), probe([("h1", "h2")], 50, 200, 0.2)]
    )
    with AgentFleet(
        net, tmp_path, schedule, Scale(1e-3), cc=CC, connection=connection, processes=processes
    ) as fleet:
        flows = fleet.run(timeout_s=20)
    assert stopped(fleet), "an agent outlived the fleet"
    assert len(fleet.procs) == {None: min(4, os.cpu_count()), 1: 1, "per_host": 4}[processes]
    assert list(flows.columns) == FLOW_COLUMNS
    assert len(flows) == len(schedule)
    assert flows["ok"].all(), flows.loc[~flows["ok"], "error"].tolist()
    inc = flows[flows["kind"] == "incast"]
    assert (inc["bytes"] == 20_000).all()
    assert (inc["t_end_ns"] > inc["t_start_ns"]).all()
    # round r + 1 is released exactly when round r's last message arrived
    ends = inc.groupby("round")["t_end_ns"].max()
    rel = inc.groupby("round")["t_release_ns"].min()
    assert all(rel[r + 1] == ends[r] for r in range(3))
    assert (flows["lateness_ms"] >= 0).all()
    assert set(flows["cc"]) == {CC} and set(flows["connection"]) == {connection}
    assert (tmp_path / "agents" / "worker-0.records.json").exists()


@pytest.mark.parametrize("lanes", [(0, 1), (0, 0)], ids=["two lanes", "one lane"])
def test_streams_in_two_lanes_ride_side_by_side_and_in_one_lane_queue(tmp_path, lanes):
    """Two 40 MB messages of one pair released at once: in two lanes (two persistent
    connections, as two QPs) both start at once; in one lane the second waits until the
    first is nearly all handed to the kernel (head-of-line, as on one QP). One worker
    serves both hosts, so the receiver cannot drain while the sender writes: the socket
    buffers fill and the sender turns to its other connections, as a shaped link makes
    it do."""
    schedule = concat_schedules([incast("h1", ["h0"], 40_000_000_000, 1, lane=n) for n in lanes])
    with AgentFleet(LoopbackNet(2), tmp_path, schedule, Scale(1e-3), cc=CC, processes=1) as fleet:
        flows = fleet.run(timeout_s=30)
    assert flows["ok"].all(), flows.loc[~flows["ok"], "error"].tolist()
    first, second = flows.sort_values("t_start_ns").itertuples(index=False)
    gap_ms = (second.t_start_ns - first.t_start_ns) / 1e6
    if lanes == (0, 1):
        assert gap_ms < 0.25 * first.fct_ms, (gap_ms, first.fct_ms)
    else:
        assert gap_ms > 0.5 * first.fct_ms, (gap_ms, first.fct_ms)


def test_a_stopped_peer_is_refused_and_the_run_goes_on(tmp_path):
    net = LoopbackNet(4)
    schedule = concat_schedules(
        [incast("h0", ["h1", "h2"], 10_000_000, 2), incast("h3", ["h1"], 10_000_000, 2)]
    )
    with AgentFleet(net, tmp_path, schedule, Scale(1e-3), cc=CC) as fleet:
        fleet.stop_agent("h3")
        flows = fleet.run(timeout_s=20)
    to_h3 = flows[flows["dst"] == "h3"]
    assert not to_h3["ok"].any()
    first, second = to_h3.sort_values("flow_id")["error"].tolist()
    assert "refused" in first.lower()
    assert "never released" in second
    assert flows.loc[flows["dst"] == "h0", "ok"].all()


def test_an_agent_that_cannot_listen_is_named(tmp_path):
    net = LoopbackNet(2)
    net.fabric.hosts[1].ip = "192.0.2.99"  # not an address of this machine: bind fails
    fleet = AgentFleet(net, tmp_path, incast("h0", ["h1"], 1000, 1), Scale(1e-3), cc=CC)
    with pytest.raises(FleetError, match="h1"), fleet:
        pass
    assert stopped(fleet)


def test_bad_arguments_are_refused_before_anything_starts(tmp_path):
    net = LoopbackNet(2)
    s = incast("h0", ["h1"], 1000, 1)
    with pytest.raises(ValueError, match="connection"):
        AgentFleet(net, tmp_path, s, Scale(1e-3), connection="pooled")
    with pytest.raises(ValueError, match="cc="):
        AgentFleet(net, tmp_path, s, Scale(1e-3), cc="dctcp-nope")
    with pytest.raises(ValueError, match="h7"):
        AgentFleet(net, tmp_path, incast("h0", ["h7"], 1000, 1), Scale(1e-3))
    with pytest.raises(ValueError, match="processes"):
        AgentFleet(net, tmp_path, s, Scale(1e-3), processes=0)
    assert not (tmp_path / "agents").exists()


def test_an_agent_killed_mid_run_fails_its_flows_with_the_reason_and_the_rest_go_on(tmp_path):
    net = LoopbackNet(3)
    schedule = probe([("h0", "h1"), ("h0", "h2")], 50, 200, 1.0)  # every 20 ms for 1 s
    with AgentFleet(net, tmp_path, schedule, Scale(1e-3), cc=CC) as fleet:
        flows = fleet.run(timeout_s=20, agent_kills=[(0.5, "h1")])
    assert len(fleet.killed) == 1 and fleet.killed[0]["ok"], fleet.killed
    kill_ns = fleet.killed[0]["t_ns"]
    assert abs(fleet.killed[0]["t_start_ns"] - (fleet.t0_ns + 500_000_000)) < 50_000_000
    to_h1 = flows[flows["dst"] == "h1"]
    before = to_h1[to_h1["t_sched_ns"] < kill_ns - 30_000_000]
    after = to_h1[to_h1["t_sched_ns"] > kill_ns + 30_000_000]
    assert before["ok"].all() and len(before) >= 20
    assert len(after) >= 20 and not after["ok"].any()
    assert after["error"].str.contains("killed").all(), after["error"].unique()
    assert flows.loc[flows["dst"] == "h2", "ok"].all()  # the others' traffic went on

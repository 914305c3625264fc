"""What the agents and the coordinator hold during a long run: workers spill their
finished records to a file, the coordinator forgets flows once they are saved, and the
final flows table is the same as if everything had been held. No root: loopback."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pandas as pd

from experiments.orchestration.live import LiveTables
from experiments.output.chunks import ChunkWriter, read_chunks
from topologies.scale import Scale
from traffic.agents import FLOW_COLUMNS, AgentFleet
from traffic.agents.fleet import in_run_order
from traffic.agents.merge import flows_table, live_frame, plan, with_records
from traffic.agents.records import Received, Sent, read_records
from traffic.agents.spill import Spill, read_spill
from traffic.driver import Message
from traffic.workloads import concat_schedules, incast, probe
from traffic.workloads.deps import DependencyTracker

CC = "cubic" if os.geteuid() == 0 else "reno"


class LoopbackNet:
    """Enough of FabricNetwork for AgentFleet: host hN has address 127.0.0.(N+1)."""

    def __init__(self, n: int) -> None:
        hosts = [SimpleNamespace(name=f"h{i}", ip=f"127.0.0.{i + 1}", server=i) for i in range(n)]
        by_name = {h.name: h for h in hosts}
        self.fabric = SimpleNamespace(hosts=hosts, node=by_name.__getitem__)


def test_a_spill_file_cut_short_is_read_up_to_its_last_whole_line(tmp_path):
    path = tmp_path / "worker-0.spill.jsonl"
    spill = Spill(path)
    first = {1: Sent(1, 10, 11, 12, 500, True, ""), 2: Sent(2, 20, 21, 22, 500, False, "refused")}
    spill.take(first, {7: Received(7, 90, 544, 80, "127.0.0.2", True, "")})
    while spill.write(limit=2):
        pass
    spill.take({1: Sent(1, 10, 11, 15, 500, True, "")}, {})  # flow 1 recorded again
    spill.write()
    spill.close()
    whole = path.read_bytes()
    with open(path, "ab") as fh:
        fh.write(b'["r",8,95,544,81,"127.0.0.2",tr')  # the worker died mid-line
    sent, received = read_spill(path)
    assert sent == {1: Sent(1, 10, 11, 15, 500, True, ""), 2: first[2]}  # the later one wins
    assert list(received) == [7]
    assert spill.written == 4 and whole.count(b"\n") == 4
    assert read_spill(tmp_path / "absent.jsonl") == ({}, {})


def test_rows_saved_during_the_run_and_completed_by_the_records_equal_the_held_table(tmp_path):
    """The final table built from saved chunks + the workers' records is row for row,
    dtype for dtype, the table built from everything held in memory."""
    probes = probe([("h1", "h2")], 50, 200, 0.1, first_flow_id=100)
    schedule = concat_schedules([incast("h0", ["h1", "h2"], 20_000, 2), probes])
    planned = plan(schedule, Scale(1e-3), {"default": 0, "probe": 1, "live": 2})
    live = [Message(500 + i, "kv", "h2", "h0", 4000, 10**9, tenant="live") for i in range(3)]
    fids = planned["flow_id"].tolist() + [m.flow_id for m in live]
    failed = {fids[1]: "sent, but agent on h2 stopped", fids[-1]: "refused"}
    outcomes = {f: (False, failed[f]) if f in failed else (True, "") for f in fids}
    release = {f: 1_000_000 + f for f in fids}
    t_end = {f: 9_000_000 + 7 * f for f in fids if f not in failed}
    sent = [
        Sent(
            f,
            1,
            1_100_000 + f,
            1_200_000 + f,
            100,
            f != fids[-1],
            "h2: connection refused" if f == fids[-1] else "",
        )
        for f in fids
    ]
    received = [Received(f, t_end[f], 100, 1_200_000 + f, "h", True, "") for f in t_end]
    frame = live_frame(live, Scale(1e-3))
    held = flows_table(planned, frame, outcomes, release, t_end, sent, received, CC, "persistent")
    # What the live tables save as the run goes: the coordinator's view and header instants.
    headers = [Received(f, t_end[f], 0, 1_200_000 + f, "", True, "") for f in t_end]
    writer = ChunkWriter(tmp_path, "flows")
    writer.append(
        flows_table(planned.iloc[:3], None, outcomes, release, t_end, [], headers, CC, "persistent")
    )
    writer.append(
        flows_table(
            planned.iloc[3:], frame, outcomes, release, t_end, [], headers, CC, "persistent"
        )
    )
    saved = read_chunks(tmp_path, "flows").frame.iloc[::-1]  # in the order flows settled
    rebuilt = in_run_order(with_records(saved, sent, received, CC, "persistent"), planned)
    pd.testing.assert_frame_equal(rebuilt, held)
    assert rebuilt.loc[rebuilt["flow_id"] == fids[-1], "error"].item() == "h2: connection refused"


def test_a_settled_flow_outside_any_group_is_forgotten_and_a_group_member_kept():
    # flows 0 and 1: two incast rounds (groups); 2 and 3: probes, in no group
    probes = probe([("h1", "h2")], 50, 200, 0.04)
    t = DependencyTracker.from_schedule(concat_schedules([incast("h0", ["h1"], 1000, 2), probes]))
    t.start(0)
    t.received(0, 5_000)  # round 0 completes: flow 1 is released
    t.received(2, 6_000)
    assert not t.forget(3)  # not settled yet
    assert not t.forget(0)  # round 0's only member: the group's fate depends on it
    assert t.forget(2)
    t.received(1, 9_000)
    t.received(3, 9_500)
    assert t.settled(10_000, 0)
    assert sorted(t.outcomes(10_000, 0)) == [0, 1, 3]


def run_probes(tmp_path, *, spill_s: float | None, saving: bool) -> tuple[pd.DataFrame, dict, int]:
    """A 2 s loopback run of UDP probes and TCP messages; its flows, the workers' status
    after it and how many flows the coordinator forgot."""
    pairs = [("h0", "h1"), ("h1", "h2"), ("h2", "h3"), ("h3", "h0")]
    tcp = probe(pairs, 50, 300, 2.0, tenant="tcp", first_flow_id=10_000).assign(proto="tcp")
    schedule = concat_schedules([probe(pairs, 50, 200, 2.0), tcp])
    fleet = AgentFleet(
        LoopbackNet(4),
        tmp_path,
        schedule,
        Scale(1e-3),
        cc=CC,
        processes=2,
        priority="normal",
        spill_s=spill_s,
    )
    with fleet:
        if saving:
            with LiveTables(tmp_path, fleet, None, flush_s=0.1):
                flows = fleet.run(timeout_s=20)
        else:
            flows = fleet.run(timeout_s=20)
        status = fleet.status()
    assert fleet.coordinator is not None
    return flows, status, fleet.coordinator.forgotten


def test_a_run_that_spills_and_forgets_gives_the_table_of_one_that_holds_everything(tmp_path):
    held, held_status, none = run_probes(tmp_path / "held", spill_s=None, saving=False)
    flows, status, forgotten = run_probes(tmp_path / "spilled", spill_s=0.1, saving=True)
    assert none == 0 and forgotten > len(flows) / 2  # most flows left the coordinator
    assert list(flows.columns) == FLOW_COLUMNS
    pd.testing.assert_series_equal(flows.dtypes, held.dtypes)
    plan_cols = ["flow_id", "kind", "tenant", "src", "dst", "bytes", "proto", "chunk"]
    pd.testing.assert_frame_equal(flows[plan_cols], held[plan_cols])
    for table in (held, flows):
        assert table["ok"].all(), table.loc[~table["ok"], "error"].tolist()
        assert table[["t_release_ns", "t_issue_ns", "t_start_ns", "t_end_ns"]].notna().all().all()
    # the workers held only the last spill interval's records, and gave back all of them
    messages = len(flows)
    assert sum(s["spilled"] for s in status.values()) > messages  # a sender's and a receiver's
    assert max(s["held_peak"] for s in status.values()) < messages / 4
    assert all(s["spilled"] == 0 for s in held_status.values())
    agents = tmp_path / "spilled" / "agents"
    records = [read_records(p) for p in sorted(agents.glob("*.records.json"))]
    assert sum(len(r.sent) for r in records) == messages
    assert sum(len(r.received) for r in records) == messages
    assert not list(agents.glob("*.spill.jsonl"))  # merged, removed

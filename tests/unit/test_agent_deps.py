"""Dependency resolution of the fleet's coordinator (barrier groups, releases, settling)."""

from __future__ import annotations

import pandas as pd
import pytest

from topologies.scale import Scale
from traffic.agents.merge import agent_rows, plan
from traffic.workloads import concat_schedules, incast, moe_alltoall, probe
from traffic.workloads.deps import DependencyTracker


def tracker_for(schedule: pd.DataFrame) -> DependencyTracker:
    return DependencyTracker.from_schedule(schedule)


def test_incast_rounds_release_at_the_last_arrival():
    s = incast("h0", ["h1", "h2", "h3"], 1000, 3)
    t = tracker_for(s)
    assert t.start(1_000) == [0, 1, 2]
    assert t.received(0, 5_000) == []
    assert t.received(2, 9_000) == []
    assert not t.settled(10_000, 0)
    # the round completes at its LAST message's arrival, whatever the event order
    assert t.received(1, 7_000) == [(0, 9_000, [3, 4, 5])]
    assert t.release_ns[4] == 9_000
    for fid in (3, 4, 5):
        t.sent(fid, 10_000)
    assert t.received(3, 11_000) == t.received(4, 12_000) == []
    assert t.received(5, 13_000) == [(3, 13_000, [6, 7, 8])]
    for fid in (6, 7, 8):
        t.received(fid, 20_000)
    assert t.settled(30_000, 0)
    assert all(ok for ok, _ in t.outcomes(30_000, 0, False).values())


def test_a_failed_member_kills_the_groups_that_follow_and_settles_the_run():
    s = incast("h0", ["h1", "h2"], 1000, 3)
    t = tracker_for(s)
    t.start(0)
    t.received(0, 10)
    t.failed(1, "h0: ConnectionRefusedError: Connection refused")
    assert t.active == 0
    assert t.settled(100, 0)
    out = t.outcomes(100, 0, False)
    assert out[0] == (True, "")
    assert out[1] == (False, "h0: ConnectionRefusedError: Connection refused")
    assert out[2][0] is False and "never released: group 0 did not complete" in out[2][1]
    assert "flow 1 failed" in out[2][1]
    assert "group 2 did not complete" in out[4][1]  # the chain is followed


def test_a_timeout_names_what_was_still_pending():
    s = incast("h0", ["h1", "h2"], 1000, 2)
    t = tracker_for(s)
    t.start(0)
    t.sent(0, 5)
    t.received(1, 10)
    assert not t.settled(100, 0)
    out = t.outcomes(100, 0, True)
    assert out[0] == (False, "sent but not fully received before the run timed out")
    assert out[2] == (False, "never released: group 0 had not completed before the run timed out")


def test_udp_probes_are_lost_after_the_grace_period():
    s = probe([("h1", "h0")], 10, 100, 0.3)
    t = tracker_for(s)
    t.start(0)
    for fid in (0, 1, 2):
        t.sent(fid, 1_000)
    t.received(0, 2_000)
    assert not t.settled(1_500, 1_000)  # still within the grace period
    assert t.settled(2_000, 1_000)
    out = t.outcomes(2_000, 1_000, False)
    assert out[0] == (True, "")
    assert out[1] == (False, "datagram sent but never received (lost)")


def test_alltoall_combine_waits_for_every_dispatch_to_its_sender():
    s = moe_alltoall(["a", "b", "c"], "t", 1, 64, hidden_size=16, top_k=2)
    t = tracker_for(s)
    dispatch = s[s["after"] < 0]
    t.start(0)
    released = []
    for i, fid in enumerate(dispatch["flow_id"]):
        for _, _, ids in t.received(int(fid), 100 + i):
            released += ids
    combine = s[s["after"] >= 0]["flow_id"].tolist()
    assert sorted(released) == combine
    # each combine row from j is released when every dispatch TO j arrived
    for fid in combine:
        row = s.set_index("flow_id").loc[fid]
        into = dispatch[dispatch["dst"] == row["src"]]
        last = max(100 + list(dispatch["flow_id"]).index(f) for f in into["flow_id"])
        assert t.release_ns[fid] == last


def test_start_does_not_revive_a_failed_row():
    s = incast("h0", ["h1"], 1000, 1)
    t = tracker_for(s)
    t.failed(0, "agent on h1 stopped")
    assert t.start(0) == []
    assert t.settled(0, 0)


def test_plan_scales_bytes_and_numbers_kinds_and_tenants():
    s = concat_schedules(
        [
            incast("h0", ["h1", "h2"], 100_000_000, 2, tenant="b"),
            probe([("h1", "h0")], 10, 100, 0.2, tenant="a"),
        ]
    )
    p = plan(s, Scale(1e-4))
    assert p.loc[p["kind"] == "incast", "bytes_emulated"].eq(10_000).all()
    assert p.loc[p["kind"] == "probe", "bytes_emulated"].eq(100).all()
    assert set(p.loc[p["tenant"] == "a", "tenant_code"]) == {0}
    assert set(p.loc[p["tenant"] == "b", "tenant_code"]) == {1}
    rows = agent_rows(p, ["h1"], {"h0": "10.0.0.1", "h1": "10.0.0.2", "h2": "10.0.0.3"})
    assert {r["dst"] for r in rows} == {"h0"} and all(r["ip"] == "10.0.0.1" for r in rows)
    assert len(rows) == 2 + 2
    assert {r["proto"] for r in rows} == {"tcp", "udp"}
    assert [r["after"] for r in rows if r["proto"] == "tcp"] == [-1, 0]
    with pytest.raises(ValueError, match="scale"):
        plan(s, Scale(0))  # a zero scale cannot even be made
    with pytest.raises(TypeError, match="scale"):
        plan(s, 1e-4)  # a bare number is not a Scale

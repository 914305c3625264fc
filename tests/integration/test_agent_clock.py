"""Agents on a machine whose monotonic clock is far from the coordinator's keep the
coordinator's clock (``traffic.agents.timebase``): a worker started in a Linux time
namespace whose ``CLOCK_MONOTONIC`` runs an hour ahead, told that offset, sends its rows
on time and writes instants the coordinator can compare with its own and with the
other workers'. Root only for ``unshare --time``; no fabric (loopback addresses)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.unit.test_agent_loopback import CC, LoopbackNet, stopped
from topologies.scale import Scale
from traffic.agents import AgentFleet
from traffic.agents.sites import WorkerSite
from traffic.workloads import incast

pytestmark = pytest.mark.root

AHEAD_NS = 3600 * 10**9


class AnHourAhead:
    """A command prefix: what it runs sees a monotonic clock one hour ahead of ours."""

    def command(self, args: Sequence[str]) -> list[str]:
        return ["unshare", "--fork", "--time", "--monotonic", str(AHEAD_NS // 10**9), *args]


def _incast(tmp_path, offset_ns: int):
    site = WorkerSite(AnHourAhead(), "127.0.0.1", clock_offset_ns=offset_ns)
    schedule = incast("h0", ["h1", "h2", "h3"], 2_000_000, 3)
    with AgentFleet(
        LoopbackNet(4),
        tmp_path,
        schedule,
        Scale(1e-2),
        cc=CC,
        processes=1,
        priority="normal",
        sites={"h2": site, "h3": site},
    ) as fleet:
        flows = fleet.run(timeout_s=30)
    assert stopped(fleet), "an agent outlived the fleet"
    return fleet, flows


def test_a_worker_an_hour_ahead_told_its_offset_sends_on_the_coordinators_clock(tmp_path):
    fleet, flows = _incast(tmp_path, AHEAD_NS)
    assert flows["ok"].all(), flows.loc[~flows["ok"], "error"].tolist()
    from_site = flows[flows["src"].isin(["h2", "h3"])]
    assert len(from_site) == 6
    # sent when planned, on the coordinator's clock (an hour off would be 3.6e6 ms)
    assert from_site["lateness_ms"].abs().max() < 200, from_site["lateness_ms"].tolist()
    assert (from_site["t_start_ns"] >= fleet.t0_ns).all()
    # received here, stamped at the sender there: a completion time both clocks agree on
    assert flows["fct_ms"].between(0, 5_000).all(), flows["fct_ms"].tolist()


def test_the_same_worker_not_told_its_offset_is_an_hour_late(tmp_path):
    _fleet, flows = _incast(tmp_path, 0)
    from_site = flows[flows["src"].isin(["h2", "h3"])]
    assert (from_site["lateness_ms"] > 3_500_000).all(), from_site["lateness_ms"].tolist()

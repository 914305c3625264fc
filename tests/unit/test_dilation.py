"""Time dilation (``scale.time_dilation``): the one conversion (``Scale``), a serving
driver run d times slower (``traffic.driver.Dilated``), the schedule the agents get
and the tables a dilated run writes (``experiments.measurement.timebase``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.measurement.timebase import real_time_events, real_time_table
from experiments.orchestration.plan import traffic_plan
from experiments.spec.load import expand, find_bundled, load_spec
from topologies import FabricError
from topologies.scale import Scale
from traffic.agents.merge import plan as agent_plan
from traffic.driver import Dilated, dilated
from traffic.serving import fabric_rate, simulate


def test_a_dilated_link_is_shaped_d_times_slower_and_carries_the_same_per_real_second():
    s1, s4 = Scale(1e-4), Scale(1e-4, time_dilation=4)
    assert s1.link_bps(400) == 40_000_000 and s4.link_bps(400) == 10_000_000
    assert s4.emulated_bps(400) == s1.emulated_bps(400) == pytest.approx(40e6)
    assert s4.real_gbps(40.0) == s1.real_gbps(40.0) == pytest.approx(400)
    # d changes the load on the machine, never the grain
    assert s4.real_bytes_per_packet == s1.real_bytes_per_packet
    fine = Scale(1e-2, time_dilation=100)
    assert fine.link_bps(400) == s1.link_bps(400)  # loads the machine like today's default
    assert fine.real_bytes_per_packet == pytest.approx(s1.real_bytes_per_packet / 100)


def test_wall_and_real_instants_agree_at_the_anchor_and_a_timer_never_fires_early():
    s = Scale(time_dilation=3)
    t0 = 10**12
    assert s.wall_ns(t0, t0) == t0 and s.real_ns(t0, t0) == t0
    assert s.wall_ns(t0 + 1_000, t0) == t0 + 3_000
    for real in (t0 + 1, t0 + 7, t0 + 999_999_999):
        assert s.real_ns(s.wall_ns(real, t0), t0) >= real
        assert s.real_ns(s.wall_ns(real, t0), t0) - real <= 1
    assert s.wall_s(2.0) == 6.0 and s.real_s(6.0) == 2.0


def test_auto_must_be_resolved_before_any_time_or_rate_is_converted():
    auto = Scale(time_dilation="auto")
    assert auto.auto
    with pytest.raises(ValueError, match="planner picks it"):
        auto.link_bps(400)
    assert auto.dilated(8).d == 8.0 and not auto.dilated(8).auto


@pytest.mark.parametrize("bad", [0.5, 0, -1, 2000, "fast", float("nan"), True])
def test_a_time_dilation_out_of_range_is_refused_naming_the_key(bad):
    with pytest.raises(FabricError, match=r"scale.time_dilation=.*from 1 to 1024, or auto"):
        Scale(time_dilation=bad)


def test_describe_states_the_dilation_only_when_there_is_one():
    assert "dilation" not in Scale().describe()
    assert (
        "time dilation 4: a real-equivalent second lasted 4 s" in Scale(time_dilation=4).describe()
    )


def test_the_agents_schedule_is_stretched_by_d_and_nothing_else_changes():
    spec = load_spec(find_bundled("incast-collapse"))
    run = expand(spec)[-1]
    schedule = traffic_plan(run.config, run.fabric(), spec.base_dir).schedule
    one, four = agent_plan(schedule, Scale()), agent_plan(schedule, Scale(time_dilation=4))
    assert (four["t_sched_ns"] == one["t_sched_ns"] * 4).all()
    assert four.drop(columns="t_sched_ns").equals(one.drop(columns="t_sched_ns"))


def _serving_driver():
    spec = load_spec(find_bundled("link-failure"))
    run = expand(spec)[0]
    fabric = run.fabric()
    return traffic_plan(run.config, fabric, spec.base_dir), fabric


def test_a_serving_driver_run_d_times_slower_on_d_times_slower_links_reports_real_time():
    """The invariance the whole feature rests on, without a network: the same driver on
    a fluid network, once at real speed and once dilated 4x with every link 4x slower,
    writes the same requests (TTFT, TPOT, KV transfer) to within a microsecond."""
    plan, fabric = _serving_driver()
    real = plan.spare_driver()
    simulate(real, fabric_rate(fabric, 1.0), t0_ns=10**12)
    slow = plan.spare_driver()
    result = simulate(
        Dilated(slow, Scale(time_dilation=4)), fabric_rate(fabric, 0.25), t0_ns=10**12
    )
    assert result.finished
    a, b = real.requests_table(), slow.requests_table()
    assert len(a) == len(b) > 0 and a["served"].all()
    for col in ("ttft_ms", "tpot_ms", "e2e_ms", "kv_transfer_ms"):
        assert np.allclose(a[col], b[col], atol=1e-3, equal_nan=True), col
    assert (a["arrival_ns"] == b["arrival_ns"]).all()
    # the network saw the wall clock: every message lasted 4x as long there
    assert result.flows["fct_ms"].sum() == pytest.approx(
        4
        * simulate(plan.spare_driver(), fabric_rate(fabric, 1.0), t0_ns=10**12)
        .flows["fct_ms"]
        .sum(),
        rel=1e-6,
    )


def test_an_undilated_driver_is_run_as_it_is():
    plan, _ = _serving_driver()
    assert dilated(plan.driver, Scale()) is plan.driver
    assert dilated(None, Scale(time_dilation=2)) is None


def test_wall_tables_and_events_are_written_in_real_equivalent_time():
    s, t0 = Scale(time_dilation=4), 1_000_000_000
    flows = pd.DataFrame(
        {
            "t_start_ns": pd.array([t0 + 4_000_000, None], dtype="Int64"),
            "t_end_ns": np.array([t0 + 8_000_000, t0 + 12_000_000], dtype="int64"),
            "fct_ms": [4.0, 8.0],
            "bytes": [1500, 3000],
        }
    )
    out = real_time_table(flows, s, t0)
    assert out["t_start_ns"].tolist()[0] == t0 + 1_000_000 and pd.isna(out["t_start_ns"][1])
    assert out["t_end_ns"].tolist() == [t0 + 2_000_000, t0 + 3_000_000]
    assert out["fct_ms"].tolist() == [1.0, 2.0] and out["bytes"].tolist() == [1500, 3000]
    assert out["t_end_ns"].dtype == flows["t_end_ns"].dtype
    events = {
        "t0_ns": t0,
        "t_end_ns": t0 + 40_000_000,
        "faults": [{"t_ns": t0 + 8_000_000, "late_ms": 2.0, "at_s": 0.5, "ok": True}],
        "agents": {"coordinator_cpu_s": 3.0},
    }
    got = real_time_events(events, s, t0)
    assert got["t0_ns"] == t0 and got["t_end_ns"] == t0 + 10_000_000
    assert got["faults"][0] == {"t_ns": t0 + 2_000_000, "late_ms": 0.5, "at_s": 0.5, "ok": True}
    assert got["agents"] == {"coordinator_cpu_s": 3.0}  # CPU seconds are not a clock
    assert real_time_table(flows, Scale(), t0) is flows

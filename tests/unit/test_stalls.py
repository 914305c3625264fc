"""The machine's stalls (``measurement.stalls``) and the lateness they explain
(``fidelity.lateness_apart_from_stalls``), and the wake-up latency hold
(``topologies.wakeup``): what decides whether a late agent is the machine's fault."""

from __future__ import annotations

import struct

import pandas as pd
import pytest

from experiments.analysis.fidelity import lateness_apart_from_stalls
from experiments.measurement.stalls import Stall, parse_spikes
from topologies.wakeup import WakeupLatency

MS = 1_000_000


def test_cyclictest_spikes_parse_to_stretches_on_the_monotonic_clock():
    text = "T: 0 Spike:    6556: TS:  51748032062\nT: 1 Spike: 1640: TS: 51748062239\nspikes = 2\n"
    assert parse_spikes(text) == [
        Stall(cpu=0, end_ns=51_748_032_062_000, us=6556),
        Stall(cpu=1, end_ns=51_748_062_239_000, us=1640),
    ]
    assert parse_spikes(text)[0].start_ns == 51_748_032_062_000 - 6_556_000
    assert parse_spikes("T: 0 ( 2719) P:80 I:1000 C: 2997 Min: 29 Max: 2373") == []


def _flows(rows: list[tuple[int, float]]) -> pd.DataFrame:
    """Timer-driven flows due at ``t`` ms, issued ``late`` ms after."""
    t = [t * MS for t, _ in rows]
    late = [x for _, x in rows]
    return pd.DataFrame(
        {
            "t_sched_ns": t,
            "t_issue_ns": [a + int(x * MS) for a, x in zip(t, late, strict=True)],
            "issue_lateness_ms": late,
            "after": [-1] * len(rows),
        }
    )


def test_flows_whose_wait_a_stall_overlapped_are_set_apart():
    # 200 flows on time and four 6 ms late, each inside a stall
    late = [2005 + 100 * k for k in range(4)]
    rows = [(10 * i, 0.2) for i in range(200)] + [(t, 6.0) for t in late]
    stalls = [((t - 1) * MS, (t + 6) * MS) for t in late]
    apart = lateness_apart_from_stalls(_flows(rows), stalls)
    assert apart == {"p99_ms": pytest.approx(0.2), "kept": 200, "stalled": 4}
    # the same late flows with no stall measured are kept: the p99 is theirs
    assert lateness_apart_from_stalls(_flows(rows), [])["p99_ms"] > 2
    # a stall that ended before a flow was due, or began after it was issued, is not its
    early_late = [(1000 * MS, 1004 * MS), (2012 * MS, 2013 * MS)]
    assert lateness_apart_from_stalls(_flows([(2005, 6.0)]), early_late)["stalled"] == 0


def test_a_long_stall_covers_every_flow_due_inside_it_whatever_began_after():
    rows = [(100, 9.0), (103, 6.0), (300, 0.1)]
    stalls = [(99 * MS, 110 * MS), (101 * MS, 102 * MS)]  # the short one ends early
    assert lateness_apart_from_stalls(_flows(rows), stalls)["stalled"] == 2


def test_group_released_flows_are_not_judged_and_no_flows_is_no_answer():
    flows = _flows([(0, 0.1), (10, 8.0)])
    flows.loc[1, "after"] = 0  # released by a completed group: not the timer's lateness
    assert lateness_apart_from_stalls(flows, [])["kept"] == 1
    assert lateness_apart_from_stalls(None, [])["p99_ms"] is None
    assert lateness_apart_from_stalls(pd.DataFrame(), [])["p99_ms"] is None


def test_the_wakeup_request_is_written_while_held_and_withdrawn_on_release(tmp_path):
    device = tmp_path / "cpu_dma_latency"  # the kernel's device takes one s32 write
    device.write_bytes(b"")
    hold = WakeupLatency(0, device=device)
    assert hold.hold() and hold.held and hold.hold()  # idempotent
    assert struct.unpack("=i", device.read_bytes()[:4]) == (0,)
    assert hold.describe() == {"held_us": 0, "error": None}
    hold.release()
    hold.release()
    assert not hold.held and hold.describe()["held_us"] is None


def test_a_machine_without_the_device_runs_without_the_hold(tmp_path):
    hold = WakeupLatency(0, device=tmp_path / "absent")
    assert not hold.hold() and "absent" in hold.error
    with pytest.raises(ValueError, match="≥ 0"):
        WakeupLatency(-1)

"""A spec's faults as the operations that carry them out: a switch's power loss takes
every link of it, a flap is down for half of each cycle, the timeline comes out in time
order; detection delays land on the switch ports of the faulted links; a degraded link's
new rate is judged from the instant it took effect."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.analysis.fidelity import dequeue_rate_check, split_by_rate
from experiments.orchestration.faults import (
    FaultOp,
    agent_kills,
    downed_spans,
    fault_ops,
    rate_changes,
)
from experiments.spec.config import Fault, LinkDegrade, LinkFlap
from experiments.spec.faults import detect_delays
from topologies import spine_leaf
from topologies.scale import Scale

FABRIC = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)


def test_a_switch_down_takes_every_one_of_its_links_at_once():
    ops = fault_ops([Fault(1.0, switch_down="spine0"), Fault(2.0, switch_up="spine0")], FABRIC)
    down = [op for op in ops if not op.up]
    assert {frozenset(op.link) for op in down} == {
        frozenset(("spine0", "leaf0")),
        frozenset(("spine0", "leaf1")),
    }
    assert {op.at_s for op in down} == {1.0} and {op.fault for op in ops} == {
        "switch_down",
        "switch_up",
    }
    assert [op.up for op in ops] == [False, False, True, True]


def test_a_flap_is_down_for_half_of_each_cycle():
    ops = fault_ops([Fault(1.0, link_flap=LinkFlap(("leaf0", "spine1"), 400.0, 2))], FABRIC)
    assert [(op.at_s, op.up) for op in ops] == [
        (1.0, False),
        (pytest.approx(1.2), True),
        (pytest.approx(1.4), False),
        (pytest.approx(1.6), True),
    ]
    assert all(op.fault == "link_flap" and op.link == ("leaf0", "spine1") for op in ops)


def test_the_timeline_is_in_time_order_and_keeps_plain_link_faults():
    ops = fault_ops(
        [Fault(3.0, link_up=("leaf0", "spine0")), Fault(1.0, link_down=("leaf0", "spine0"))], FABRIC
    )
    assert ops == [
        FaultOp(1.0, "link_down", "link_down", ("leaf0", "spine0")),
        FaultOp(3.0, "link_up", "link_up", ("leaf0", "spine0")),
    ]
    assert [op.event for op in ops] == ["link_down", "link_up"]


def test_controller_degrade_and_agent_faults_become_one_operation_each():
    faults = [
        Fault(2.0, controller_up=True),
        Fault(1.0, controller_down=True),
        Fault(1.5, link_degrade=LinkDegrade(("leaf0", "spine1"), 25.0)),
        Fault(0.5, agent_kill="h1"),
    ]
    ops = fault_ops(faults, FABRIC)
    assert [op.event for op in ops] == [
        "agent_kill",
        "controller_down",
        "link_degrade",
        "controller_up",
    ]
    assert ops[2].link == ("leaf0", "spine1") and ops[2].gbps == 25.0
    assert ops[0].node == "h1"
    assert agent_kills(faults) == [(0.5, "h1")]


def test_detection_delays_land_on_the_switch_ports_of_the_faulted_links_only():
    host_link = FABRIC.link_between("h0", "leaf0")
    delays = detect_delays(
        [
            {"at_s": 1.0, "link_down": ["h0", "leaf0"], "detect_ms": 50.0},
            {"at_s": 2.0, "switch_down": "spine0", "detect_ms": 20.0},
            {"at_s": 3.0, "link_down": ["leaf1", "spine1"]},
        ],
        FABRIC,
    )
    assert delays[("leaf0", host_link.port_of("leaf0"))] == 50.0
    assert not any(node == "h0" for node, _ in delays)  # a host reports no port events
    spine0 = {(n, p) for n, p in delays if n == "spine0"}
    assert len(spine0) == 2 and all(delays[k] == 20.0 for k in spine0)
    leaf1_spine1 = FABRIC.link_between("leaf1", "spine1")
    assert ("leaf1", leaf1_spine1.port_of("leaf1")) not in delays  # no detect_ms: immediate


def _queue_rows(node, port, t0, n, rate_bps, dt_ns=5_000_000):
    """A port whose queue stands the whole time and drains at ``rate_bps``."""
    per = rate_bps * dt_ns / 8e9
    return [
        {
            "node": node,
            "port": port,
            "t_ns": t0 + i * dt_ns,
            "backlog_pkts": 40,
            "backlog_bytes": 60_000,
            "sent_bytes": int(i * per),
        }
        for i in range(n)
    ]


def test_a_degraded_port_is_judged_by_the_rate_in_force_at_each_stretch():
    lk = FABRIC.link_between("leaf0", "spine1")
    full, low = 10_000_000, 2_500_000
    t_change = 1_000_000_000 + 200 * 5_000_000
    rows = _queue_rows(
        "leaf0", lk.a_port if lk.a == "leaf0" else lk.b_port, 1_000_000_000, 200, full
    )
    port = rows[0]["port"]
    last = rows[-1]["sent_bytes"]
    rows += [
        r | {"sent_bytes": last + r["sent_bytes"]}
        for r in _queue_rows("leaf0", port, t_change, 200, low)
    ]
    queues = pd.DataFrame(rows)
    rates = {("leaf0", port): full}
    whole = dequeue_rate_check(queues, rates)
    assert not whole["ok"]  # judged by one rate, the slow stretch looks like a shaping fault
    applied = [
        {
            "event": "link_degrade",
            "link": ["leaf0", "spine1"],
            "gbps": 25.0,
            "t_start_ns": t_change - 1000,
            "t_ns": t_change - 10,
            "ok": True,
        }
    ]
    changes = rate_changes(applied, FABRIC, Scale(1e-4))  # 25 Gbit/s at 1e-4: 2.5 Mbit/s
    assert changes[("leaf0", port)] == [(t_change - 10, low)]
    assert len(changes) == 2  # both ends of the link
    split, split_rates = split_by_rate(queues, rates, changes)
    check = dequeue_rate_check(split, split_rates)
    assert check["ok"], check
    assert "2 port(s) judged" in check["detail"]


def test_a_switch_is_charged_a_fault_from_its_first_link_down_to_its_last_link_up():
    def row(event, link, t, ok=True):
        return {"event": event, "link": link, "t_start_ns": t, "t_ns": t + 5, "ok": ok}

    applied = [
        row("link_down", ["leaf0", "spine0"], 100),
        row("link_down", ["leaf0", "spine1"], 200),
        row("link_up", ["spine0", "leaf0"], 300),  # leaf0 still has spine1 down
        row("link_down", ["h2", "leaf1"], 400),  # h2 is a host: only leaf1 is charged
        row("link_down", ["leaf1", "spine1"], 50, ok=False),  # did not happen
        row("link_up", ["leaf0", "spine1"], 600),
        {"event": "link_degrade", "link": ["leaf0", "spine1"], "gbps": 10.0, "t_ns": 1},
    ]
    assert downed_spans(applied, FABRIC) == {
        "leaf0": [(100, 605)],
        "spine0": [(100, 305)],
        "spine1": [(200, 605)],
        "leaf1": [(400, None)],  # down at the end of the run
    }
    assert downed_spans([], FABRIC) == {}


def test_a_link_that_comes_back_and_fails_again_makes_two_stretches():
    def row(event, t):
        return {"event": event, "link": ["leaf0", "spine0"], "t_start_ns": t, "t_ns": t + 5}

    applied = [row("link_down", 100), row("link_up", 200), row("link_down", 900)]
    assert downed_spans(applied, FABRIC)["leaf0"] == [(100, 205), (900, None)]

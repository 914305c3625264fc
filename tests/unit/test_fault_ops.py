"""A spec's faults as link operations: a switch's power loss takes every link of it,
a flap is down for half of each cycle, and the timeline comes out in time order."""

from __future__ import annotations

import pytest

from experiments.orchestration.faults import LinkOp, link_ops
from topologies import spine_leaf

FABRIC = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)


def test_a_switch_down_takes_every_one_of_its_links_at_once():
    ops = link_ops([{"at_s": 1.0, "switch_down": "spine0"},
                    {"at_s": 2.0, "switch_up": "spine0"}], FABRIC)  # fmt: skip
    down = [op for op in ops if not op.up]
    assert {frozenset(op.link) for op in down} == {frozenset(("spine0", "leaf0")),
                                                   frozenset(("spine0", "leaf1"))}  # fmt: skip
    assert {op.at_s for op in down} == {1.0} and {op.fault for op in ops} == {
        "switch_down",
        "switch_up",
    }
    assert [op.up for op in ops] == [False, False, True, True]


def test_a_flap_is_down_for_half_of_each_cycle():
    ops = link_ops([{"at_s": 1.0, "link_flap": {"link": ["leaf0", "spine1"], "period_ms": 400,
                                                "count": 2}}], FABRIC)  # fmt: skip
    assert [(op.at_s, op.up) for op in ops] == [(1.0, False), (pytest.approx(1.2), True),
                                                (pytest.approx(1.4), False),
                                                (pytest.approx(1.6), True)]  # fmt: skip
    assert all(op.fault == "link_flap" and op.link == ("leaf0", "spine1") for op in ops)


def test_the_timeline_is_in_time_order_and_keeps_plain_link_faults():
    ops = link_ops([{"at_s": 3.0, "link_up": ["leaf0", "spine0"]},
                    {"at_s": 1.0, "link_down": ["leaf0", "spine0"]}], FABRIC)  # fmt: skip
    assert ops == [LinkOp(1.0, ("leaf0", "spine0"), False, "link_down"),
                   LinkOp(3.0, ("leaf0", "spine0"), True, "link_up")]  # fmt: skip
    assert [op.event for op in ops] == ["link_down", "link_up"]

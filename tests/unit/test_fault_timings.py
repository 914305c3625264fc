"""Fault timings from the instant of the fault (pure, no root)."""

from __future__ import annotations

from experiments.analysis.metrics.faults import fault_timings
from topologies import spine_leaf

MS = 1_000_000


def _events(t0: int) -> list[dict]:
    return [
        {"event": "ready", "t_ns": t0 - 900 * MS},
        {"event": "port_down", "switch": "leaf0", "port": 3, "t_ns": t0 + 2 * MS},
        {
            "event": "reroute",
            "t_ns": t0 + 2 * MS,
            "t_last_sent_ns": t0 + 5 * MS,
            "t_installed_ns": t0 + 9 * MS,
        },
        {"event": "port_down", "switch": "spine0", "port": 1, "t_ns": t0 + 3 * MS},
        {"event": "port_up", "switch": "leaf0", "port": 3, "t_ns": t0 + 1002 * MS},
        {"event": "reroute", "t_ns": t0 + 1002 * MS, "t_last_sent_ns": t0 + 1004 * MS},
    ]


def test_timings_start_at_the_fault_not_when_the_controller_heard():
    t0 = 10**12
    applied = [
        {
            "at_s": 3.0,
            "event": "link_down",
            "link": ["leaf0", "spine0"],
            "t_start_ns": t0,
            "t_ns": t0 + 4 * MS,
        },
        {
            "at_s": 4.0,
            "event": "link_up",
            "link": ["leaf0", "spine0"],
            "t_start_ns": t0 + 1000 * MS,
            "t_ns": t0 + 1003 * MS,
        },
    ]
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    assert fabric.port("leaf0", "spine0") == 3 and fabric.port("spine0", "leaf0") == 1
    down, up = fault_timings(applied, _events(t0), fabric)
    assert down["detected_ms"] == 2.0
    assert down["last_rule_sent_ms"] == 5.0 and down["installed_ms"] == 9.0
    assert up["detected_ms"] == 2.0 and up["last_rule_sent_ms"] == 4.0
    assert up["installed_ms"] is None  # not acknowledged in the log: said, not invented


def test_a_fault_the_controller_never_heard_of_has_no_timings():
    applied = [{"at_s": 1.0, "event": "link_down", "link": ["leaf1", "spine1"], "t_ns": 5}]
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    (row,) = fault_timings(applied, _events(10**12), fabric)
    assert row["detected_ms"] is None and row["last_rule_sent_ms"] is None
    assert row["clock"] == "t_ns"  # an old run: timed from when the injector finished


def test_a_failure_while_no_controller_ran_is_detected_when_the_restarted_one_learns_it():
    t0 = 10**12
    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2)
    lk = fabric.link_between("leaf0", "spine0")
    applied = [
        {
            "at_s": 3.0,
            "event": "controller_down",
            "target": "controller",
            "t_start_ns": t0,
            "t_ns": t0 + MS,
        },
        {
            "at_s": 3.5,
            "event": "link_down",
            "link": ["leaf0", "spine0"],
            "t_start_ns": t0 + 500 * MS,
            "t_ns": t0 + 504 * MS,
        },
        {
            "at_s": 4.5,
            "event": "controller_up",
            "target": "controller",
            "t_start_ns": t0 + 1500 * MS,
            "t_ns": t0 + 2100 * MS,
            "ready_ns": t0 + 2090 * MS,
        },
    ]
    learned = t0 + 2080 * MS  # the restarted controller read the port's state
    controller = [
        {
            "event": "port_down",
            "switch": "leaf0",
            "port": lk.port_of("leaf0"),
            "t_ns": learned,
            "life": 2,
        },
        {"event": "install", "t_ns": learned + 1 * MS, "life": 2},
        {"event": "ready", "t_ns": t0 + 2090 * MS, "life": 2},
        {"event": "reroute", "t_ns": t0 + 4000 * MS, "t_last_sent_ns": t0 + 4003 * MS, "life": 2},
    ]
    rows = {r["fault"]: r for r in fault_timings(applied, controller, fabric)}
    assert rows["link_down"]["detected_ms"] == 1580.0  # not lost behind controller_up
    # its rules went out in the restarted controller's install, acknowledged at ready
    assert rows["link_down"]["last_rule_sent_ms"] == 1581.0
    assert rows["link_down"]["installed_ms"] == 1590.0
    assert rows["controller_down"]["no_controller_ms"] == 2090.0

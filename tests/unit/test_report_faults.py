"""The report's Faults section: the controller's timings and what the traffic felt, as
a reader of report.md sees them (no root)."""

from __future__ import annotations

import json

from experiments.analysis.metrics.faults import fault_timings
from experiments.output.report import write_report
from experiments.output.results import write_json
from tests.unit.test_fault_impact import (
    DOWN_UP,
    FABRIC,
    MS,
    T0,
    flow,
    flows_table,
    links_table,
    probes,
    requests_table,
    workload,
)
from tests.unit.test_report import canned_run


def report_with(tmp_path, faults: list[dict]) -> str:
    run_dir = canned_run(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["metrics"]["faults"] = json.loads(json.dumps(faults))  # as summary.json holds it
    write_json(run_dir, "summary", summary)
    return write_report([run_dir]).read_text()


def test_the_data_plane_table_shows_the_outage_the_dip_and_what_was_hit(tmp_path):
    faults = fault_timings(
        DOWN_UP,
        [],
        FABRIC,
        flows=flows_table(probes() + workload()),
        links=links_table(),
        requests=requests_table(),
    )
    text = report_with(tmp_path, faults)
    assert "| 3 | link_down | leaf0–spine0 | – | – | – |" in text  # the controller side
    assert (
        "| 3 | link_down | 45 | 4 (1 pair) | 500 | 40 → 10 (−75%) | 1,000 | 4 (3 failed) | "
        "0.0038 | 3 (1 unserved) | 120 / 40 |"
    ) in text
    # no dip: 200 ms is only the first window's end, an upper bound
    assert "| 4 | link_up | no probe lost (next sent 5) | 0 | ≤ 200 | 31, no dip |" in text
    assert "the failed flows' errors: ConnectionResetError × 2; timed out × 1" in text


def test_no_probes_a_pair_never_recovered_and_a_run_recorded_before(tmp_path):
    none = fault_timings(DOWN_UP[:1], [], FABRIC, flows=flows_table(workload()))
    assert "| 3 | link_down | no probes | – |" in report_with(tmp_path / "a", none)
    cut = fault_timings(DOWN_UP[:1], [], FABRIC, flows=flows_table(probes(lost_to_ms=1e4)))
    assert "**none before the run ended**" in report_with(tmp_path / "b", cut)
    old = [
        {
            "event": "link_down",
            "link": ["leaf0", "spine0"],
            "at_s": 3.0,
            "detected_ms": 2.0,
            "last_rule_sent_ms": 5.0,
            "installed_ms": 9.0,
        }
    ]
    text = report_with(tmp_path / "c", old)
    assert "| 3 | link_down | leaf0–spine0 | 2 | 5 | 9 |" in text
    assert "first probe through" not in text  # nothing measured, nothing shown


def test_switch_controller_and_agent_faults_say_what_they_did(tmp_path):
    applied = [
        {
            "at_s": 1.0,
            "event": "link_down",
            "fault": "switch_down",
            "link": ["spine0", "leaf0"],
            "t_start_ns": T0 - 1000 * MS,
            "t_ns": T0 - 999 * MS,
        },
        {
            "at_s": 1.0,
            "event": "link_down",
            "fault": "switch_down",
            "link": ["spine0", "leaf1"],
            "t_start_ns": T0 - 999 * MS,
            "t_ns": T0 - 998 * MS,
        },
        {
            "at_s": 2.0,
            "event": "controller_down",
            "fault": "controller_down",
            "target": "controller",
            "t_start_ns": T0,
            "t_ns": T0,
        },
        {
            "at_s": 2.5,
            "event": "controller_up",
            "fault": "controller_up",
            "target": "controller",
            "t_start_ns": T0 + 500 * MS,
            "t_ns": T0 + 500 * MS,
            "ready_ns": T0 + 800 * MS,
        },
        {
            "at_s": 3.0,
            "event": "agent_kill",
            "fault": "agent_kill",
            "node": "h3",
            "t_start_ns": T0 + 1000 * MS,
            "t_ns": T0 + 1001 * MS,
        },
    ]
    flows = flows_table([*workload(), flow("kv", "h2", "h3", 1200, 1201, False, "refused")])
    text = report_with(tmp_path, fault_timings(applied, [], FABRIC, flows=flows))
    assert "| 1 | switch_down | spine0 (2 links) |" in text
    assert (
        "at 2 s, controller_down: no controller for 800 ms; 2 flows started meanwhile, 2 failed"
    ) in text
    kill = "h3's flows from the kill on: 2, 2 failed (refused × 1; timed out × 1)"
    assert f"at 3 s, agent_kill: {kill}" in text

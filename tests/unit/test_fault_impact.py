"""What a fault did to the traffic, from synthetic flows, links and requests whose
answers are worked out by hand (pure, no root)."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.analysis.metrics.fault_rate import rate_recovery
from experiments.analysis.metrics.faults import fault_timings
from topologies import spine_leaf

MS = 1_000_000
T0 = 10**12  # the injector's timestamp of the link_down
NAN = float("nan")
FABRIC = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
DOWN_UP = [
    {
        "at_s": 3.0,
        "event": "link_down",
        "fault": "link_down",
        "link": ["leaf0", "spine0"],
        "t_start_ns": T0,
        "t_ns": T0 + 4 * MS,
        "late_ms": 0.1,
        "ok": True,
        "error": "",
    },
    {
        "at_s": 4.0,
        "event": "link_up",
        "fault": "link_up",
        "link": ["leaf0", "spine0"],
        "t_start_ns": T0 + 1000 * MS,
        "t_ns": T0 + 1003 * MS,
        "late_ms": 0.1,
        "ok": True,
        "error": "",
    },
]


def flow(
    kind: str,
    src: str,
    dst: str,
    start_ms: float,
    end_ms: float,
    ok: bool = True,
    error: str | None = None,
    n_bytes: int = 1000,
) -> dict:
    return {
        "kind": kind,
        "tenant": "t0",
        "src": src,
        "dst": dst,
        "bytes": n_bytes,
        "t_sched_ns": T0 + start_ms * MS,
        "t_start_ns": T0 + start_ms * MS,
        "t_end_ns": T0 + end_ms * MS,
        "fct_ms": end_ms - start_ms,
        "ok": ok,
        "error": error,
    }


def probes(lost_from_ms: float = 0, lost_to_ms: float = 40) -> list[dict]:
    """A probe every 10 ms on h0->h2 and h1->h3, sent at T0 + 5 + 10k ms; h0->h2 loses
    those sent in [lost_from, lost_to) ms."""
    out = []
    for k in range(-50, 200):
        sent = 5 + 10 * k
        lost = lost_from_ms <= sent < lost_to_ms
        error = "datagram sent but never received (lost)" if lost else None
        out.append(
            flow("probe", "h0", "h2", sent, NAN if lost else sent + 0.2, not lost, error, 64)
        )
        out.append(flow("probe", "h1", "h3", sent, sent + 0.2, n_bytes=64))
    return out


def workload() -> list[dict]:
    return [
        flow("kv", "h0", "h2", -50, 100, n_bytes=1000),  # in flight at the fault
        flow("kv", "h1", "h3", 500, 700, False, "ConnectionResetError", 2000),
        flow("kv", "h1", "h2", 600, 650, False, "ConnectionResetError", 500),
        flow("kv", "h0", "h3", 800, 2000, False, "timed out", 300),
        flow("kv", "h0", "h2", -500, -100),  # done before the fault
        flow("kv", "h0", "h2", 1500, 1600),  # after the link came back
    ]


def flows_table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([r | {"flow_id": i} for i, r in enumerate(rows)])


def links_table(dip: float = 0.25, spine_mbps: float = 0.0) -> pd.DataFrame:
    """Ticks every 100 ms; each host-facing port delivers 10 Mbit/s, ``dip`` of that in
    the 300 ms after the fault; spine0's port 1 (not host-facing) ``spine_mbps``."""
    ports = [("leaf0", 1), ("leaf0", 2), ("leaf1", 1), ("leaf1", 2)]
    rows, total = [], dict.fromkeys([*ports, ("spine0", 1)], 0.0)
    for k in range(-20, 21):
        t = T0 + k * 100 * MS
        for port in total:
            if k > -20:
                mbps = spine_mbps if port[0] == "spine0" else 10.0 * (dip if 1 <= k <= 3 else 1)
                total[port] += mbps * 1e6 / 8 / 10  # one tick's bytes
            rows.append(
                {
                    "t_ns": t,
                    "node": port[0],
                    "port": port[1],
                    "tx_bytes": int(total[port]),
                    "rx_bytes": 0,
                }
            )
    return pd.DataFrame(rows)


def requests_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": range(6),
            "arrival_ns": [T0 + x * MS for x in (-100, -20, 300, 400, 1500, 2000)],
            "ttft_ms": [40.0, 90.0, 150.0, NAN, 50.0, 30.0],
            "e2e_ms": [50.0, 100.0, 200.0, NAN, 80.0, 60.0],
            "tpot_ms": 5.0,
            "kv_transfer_ms": 10.0,
            "served": [True, True, True, False, True, True],
        }
    )


def test_a_link_down_probes_lost_for_40_ms_and_the_rate_dip():
    down, up = fault_timings(
        DOWN_UP,
        [],
        FABRIC,
        flows=flows_table(probes() + workload()),
        links=links_table(),
        requests=requests_table(),
    )
    # h0->h2 lost the probes sent at 5, 15, 25, 35 ms; the one at 45 got through
    assert down["first_probe_ms"] == 45.0
    assert down["probes_lost"] == 4 and down["probe_pairs_hit"] == 1
    # 40 Mbit/s delivered before; 10 in the 300 ms after; the 200 ms window ending at 500
    # ms is the first wholly after the fault at 90% or more
    assert down["pre_fault_mbps"] == pytest.approx(40.0)
    assert down["min_mbps_after"] == pytest.approx(10.0) and down["dip_pct"] == 75.0
    assert down["back_to_rate_ms"] == 500.0 and down["rate_ports"] == "host-facing"
    # the window runs to the link_up: 4 flows in it, 3 failed
    assert down["window_ms"] == 1000.0
    hit = down["affected"]
    assert hit["flows"] == 4 and hit["bytes"] == 3800 and hit["failed"] == 3
    assert hit["errors"] == {"ConnectionResetError": 2, "timed out": 1}
    assert hit["requests"] == 3 and hit["requests_failed"] == 1
    assert hit["ttft_p50_ms"] == 120.0 and hit["others_ttft_p50_ms"] == 40.0
    # nothing was lost after the repair: the next probe, 5 ms later
    assert up["probes_lost"] == 0 and up["first_probe_ms"] == 5.0
    assert up["window_ms"] == 1000.0  # nothing undoes a link_up: one second


def test_the_delivered_rate_counts_host_facing_ports_not_every_hop():
    links = links_table(spine_mbps=400.0)
    facing = rate_recovery(links, T0, FABRIC)
    every = rate_recovery(links, T0)  # no fabric: the spine's steady 400 Mbit/s hides the dip
    assert facing["back_to_rate_ms"] == 500.0 and every["rate_ports"] == "all"
    assert every["pre_fault_mbps"] == pytest.approx(440.0) and every["back_to_rate_ms"] == 200.0


def test_a_rate_that_never_recovers_or_was_idle():
    never = rate_recovery(links_table(dip=0.0).query("t_ns <= @T0 + 300 * @MS"), T0, FABRIC)
    assert never["back_to_rate_ms"] is None and never["min_mbps_after"] == 0.0
    idle = rate_recovery(links_table(dip=0.0).assign(tx_bytes=0), T0, FABRIC)
    assert idle["pre_fault_mbps"] == 0.0 and idle["back_to_rate_ms"] is None


def test_a_pair_that_never_got_a_probe_through():
    (row, _) = fault_timings(DOWN_UP, [], FABRIC, flows=flows_table(probes(lost_to_ms=10_000)))
    assert row["probes_lost"] == 100 and row["first_probe_ms"] is None


def test_switch_down_is_one_row_with_every_link():
    applied = [
        {
            "at_s": 3.0,
            "event": "link_down",
            "fault": "switch_down",
            "link": ["spine0", "leaf0"],
            "t_start_ns": T0,
            "t_ns": T0 + 3 * MS,
        },
        {
            "at_s": 3.0,
            "event": "link_down",
            "fault": "switch_down",
            "link": ["spine0", "leaf1"],
            "t_start_ns": T0 + 3 * MS,
            "t_ns": T0 + 6 * MS,
        },
        {
            "at_s": 4.0,
            "event": "link_up",
            "fault": "switch_up",
            "link": ["spine0", "leaf0"],
            "t_start_ns": T0 + 1000 * MS,
            "t_ns": T0 + 1003 * MS,
        },
        {
            "at_s": 4.0,
            "event": "link_up",
            "fault": "switch_up",
            "link": ["spine0", "leaf1"],
            "t_start_ns": T0 + 1003 * MS,
            "t_ns": T0 + 1006 * MS,
        },
    ]
    controller = [
        {"event": "port_down", "switch": "leaf0", "port": 3, "t_ns": T0 + 2 * MS},
        {"event": "reroute", "t_ns": T0 + 2 * MS, "t_last_sent_ns": T0 + 3 * MS},
        {"event": "port_down", "switch": "leaf1", "port": 3, "t_ns": T0 + 5 * MS},
        {
            "event": "reroute",
            "t_ns": T0 + 5 * MS,
            "t_last_sent_ns": T0 + 7 * MS,
            "t_installed_ns": T0 + 11 * MS,
        },
        {"event": "port_up", "switch": "leaf1", "port": 3, "t_ns": T0 + 1004 * MS},
    ]
    down, up = fault_timings(applied, controller, FABRIC)
    assert down["fault"] == "switch_down" and down["switch"] == "spine0"
    assert down["links"] == [["spine0", "leaf0"], ["spine0", "leaf1"]]
    assert down["detected_ms"] == 2.0 and down["links_heard"] == 2
    assert down["last_rule_sent_ms"] == 7.0 and down["installed_ms"] == 11.0
    assert down["window_ms"] == 1000.0  # until the switch came back
    assert up["fault"] == "switch_up" and up["detected_ms"] == 4.0
    assert up["links_heard"] == 1  # the controller heard only leaf1's port come back


def test_a_flap_is_one_row_of_its_cycles():
    applied = [
        {
            "at_s": 2.0 + 0.05 * k,
            "event": "link_up" if k % 2 else "link_down",
            "fault": "link_flap",
            "link": ["leaf0", "spine1"],
            "t_start_ns": T0 + 50 * k * MS,
            "t_ns": T0 + (50 * k + 2) * MS,
        }
        for k in range(4)
    ]
    other = [
        {
            "at_s": 2.02 + 0.05 * k,
            "event": "link_up" if k else "link_down",
            "fault": "link_flap",
            "link": ["leaf1", "spine1"],
            "t_start_ns": T0 + (20 + 50 * k) * MS,
            "t_ns": T0 + (21 + 50 * k) * MS,
        }
        for k in range(2)
    ]  # another link's flap, interleaved
    applied = sorted(applied + other, key=lambda f: f["at_s"])
    applied.append(
        {
            "at_s": 9.0,
            "event": "link_down",
            "fault": "link_flap",
            "link": ["leaf0", "spine1"],
            "t_start_ns": T0 + 7000 * MS,
            "t_ns": T0 + 7002 * MS,
        }
    )  # a second flap, much later
    first, beside, later = fault_timings(applied, [])
    assert first["fault"] == "link_flap" and first["cycles"] == 2
    assert first["link"] == ["leaf0", "spine1"] and first["window_ms"] == 152.0
    assert beside["link"] == ["leaf1", "spine1"] and beside["cycles"] == 1
    assert later["cycles"] == 1


def test_a_controller_outage_until_every_switch_was_back():
    applied = [
        {
            "at_s": 2.0,
            "event": "controller_down",
            "fault": "controller_down",
            "target": "controller",
            "t_start_ns": T0,
            "t_ns": T0 + 20 * MS,
        },
        {
            "at_s": 2.5,
            "event": "controller_up",
            "fault": "controller_up",
            "target": "controller",
            "t_start_ns": T0 + 500 * MS,
            "t_ns": T0 + 520 * MS,
            "ready_ns": T0 + 800 * MS,
        },
    ]
    flows = flows_table(
        [
            flow("kv", "h0", "h2", -50, 30),
            flow("kv", "h0", "h2", 100, 200),
            flow("kv", "h1", "h3", 600, 700, False, "connect timed out"),
            flow("kv", "h1", "h3", 900, 950),  # after the controller was ready
        ]
    )
    down, up = fault_timings(applied, [], FABRIC, flows=flows)
    assert down["no_controller_ms"] == 800.0 and down["window_ms"] == 800.0
    assert down["flows_started"] == 2 and down["flows_started_failed"] == 1
    assert down["affected"]["flows"] == 3 and down["detected_ms"] is None
    assert up["target"] == "controller" and "no_controller_ms" not in up


def test_a_controller_that_never_got_ready_has_no_outage_length():
    applied = [
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
            "ready_ns": None,
        },
    ]
    down, _ = fault_timings(applied, [])
    assert down["no_controller_ms"] is None and down["window_ms"] == 500.0


def test_an_agent_kill_fails_the_hosts_flows_after_it():
    applied = [
        {
            "at_s": 2.0,
            "event": "agent_kill",
            "fault": "agent_kill",
            "node": "h2",
            "t_start_ns": T0,
            "t_ns": T0 + MS,
        }
    ]
    flows = flows_table(
        [
            flow("kv", "h0", "h2", -500, -400),  # over before the kill
            flow("kv", "h0", "h2", -10, NAN, False, "ConnectionResetError"),
            flow("kv", "h2", "h3", 100, 101, False, "ConnectionRefusedError"),
            flow("kv", "h1", "h2", 200, 201, False, "ConnectionRefusedError"),
            flow("kv", "h0", "h3", 100, 300),  # another host's
        ]
    )
    (row,) = fault_timings(applied, [], FABRIC, flows=flows)
    assert row["node"] == "h2" and row["host_flows"] == 3 and row["host_flows_failed"] == 3
    assert row["host_errors"] == {"ConnectionRefusedError": 2, "ConnectionResetError": 1}


def test_an_old_run_is_timed_from_when_the_injector_finished():
    old = [{k: v for k, v in f.items() if k not in ("t_start_ns", "fault")} for f in DOWN_UP]
    down, _ = fault_timings(old, [], FABRIC, flows=flows_table(probes()))
    assert down["clock"] == "t_ns" and down["fault"] == "link_down"
    assert down["first_probe_ms"] == 41.0  # from t_ns, 4 ms after t_start_ns


def test_without_probes_or_tables_the_figures_are_unknown():
    (down, _) = fault_timings(DOWN_UP, [], FABRIC, flows=flows_table(workload()))
    assert down["first_probe_ms"] is None and down["probes_lost"] is None
    assert down["affected"]["flows"] == 4
    (bare, _) = fault_timings(DOWN_UP, [])
    assert bare["back_to_rate_ms"] is None and bare["affected"]["flows"] is None
    assert bare["affected"]["requests"] is None


def test_summary_json_carries_the_data_plane_side():
    from experiments.analysis.summary import summarize
    from tests.unit.run_configs import config_of_spec

    fabric = {"kind": "spine_leaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 2}
    spec = config_of_spec(
        {
            "name": "t",
            "duration_s": 3.0,
            "scale": {"bandwidth": 1e-4},
            "workloads": [],
            "fabric": fabric,
        }
    )
    m = summarize(
        flows_table(probes() + workload()),
        requests_table(),
        None,
        None,
        spec,
        links=links_table(),
        events={"faults": DOWN_UP, "controller": []},
    )
    down = m["faults"][0]
    assert down["first_probe_ms"] == 45.0 and down["back_to_rate_ms"] == 500.0
    assert down["affected"]["requests_failed"] == 1
    old = summarize(None, None, None, None, spec, events={"faults": DOWN_UP[:1]})
    assert old["faults"][0]["first_probe_ms"] is None  # a run recorded without the tables

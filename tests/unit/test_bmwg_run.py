"""``kvfabric bmwg run`` and ``compare`` without root: the plan on a user's fabric (hosts,
pools and fault links mapped, tests refused), the smoke profile, KPIs of hand-made
tables, and a whole suite through a fake ``run_spec`` that writes hand-made run
directories, to its files, report and comparison."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.analysis.bmwg.per_run import RunTables, kpi_values
from experiments.bmwg.catalog import BY_ID
from experiments.bmwg.compare import Suite, compare_markdown, per_seed, ratio_cell, read_suite
from experiments.bmwg.execute import run_suite
from experiments.bmwg.fabric_map import HostMap
from experiments.bmwg.plan import SMOKE_S, trials
from experiments.bmwg.suite import Refused, fabric_of, plan_suite, read_fabric
from experiments.spec.load import SPECS_DIR, load_spec, resolved_yaml
from topologies.scale import Scale

MS = 1_000_000
SMALL = {
    "fabric": {"kind": "spine_leaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 4},
    "scale": {"bandwidth": 1.0e-4},
}


def fabric(raw: dict) -> object:
    spec = {"name": "f", "duration_s": 1, **raw}
    return load_spec(yaml.safe_dump(spec), base_dir=SPECS_DIR).fabric()


@pytest.fixture(scope="module")
def rail():
    return read_fabric("rail-optimized")


@pytest.fixture(scope="module")
def p2p_on_rail(rail):
    return plan_suite(["5.1"], rail, "quick")


def test_the_procedure_hosts_land_on_the_users_gpus(p2p_on_rail):
    first = p2p_on_rail.trials[0].runs[0].resolved
    incast = first["workloads"][0]
    # the reference's h0 (leaf0) → h4 (leaf1) crosses the spine: rail 0 → rail 1, and
    # two servers, so the NVLink inside a server does not carry it instead
    assert (incast["senders"], incast["receiver"]) == (["gpu0_0"], "gpu1_1")
    assert first["fabric"]["kind"] == "rail_optimized"
    # 5.1 quick: 3 sizes x 2 QP counts, each twice
    assert (len(p2p_on_rail.trials), p2p_on_rail.runs) == (6, 12)


def test_the_plan_estimates_wall_time_at_the_dilation_auto_needs(rail, monkeypatch):
    # 12 runs of 10 s (2 s warm-up + 8 s) + 5 s of set-up each. At quick the rail
    # fabric's 3.6 Tbit/s NVLink is 3.6 Gbit/s emulated (scale 1e-3): auto slows time
    # until the fastest link is at most what one hop carries (1 Gbit/s: d = 4)
    monkeypatch.delenv("KVFABRIC_MAX_RATE_MBPS", raising=False)
    slowed = plan_suite(["5.1"], rail, "quick")
    assert {t.dilation for t in slowed.trials} == {4.0}
    assert slowed.wall_s == pytest.approx(12 * (10 * 4.0 + 5))
    monkeypatch.setenv("KVFABRIC_MAX_RATE_MBPS", "4000")  # a hop that carries 4 Gbit/s
    assert plan_suite(["5.1"], rail, "quick").wall_s == pytest.approx(12 * (10 + 5))


def test_a_floor_plans_every_auto_trial_at_it_or_above_and_is_recorded(rail, monkeypatch):
    """``--min-dilation 8``: the spine-leaf fabric's 5.1 (auto, d = 1 by its rates) and
    the rail fabric's (d = 4, NVLink) are then both planned at 8, comparable."""
    from experiments.bmwg.execute import plan_record

    monkeypatch.delenv("KVFABRIC_MAX_RATE_MBPS", raising=False)
    for name in ("spine-leaf-1to1", "rail-optimized"):
        plan = plan_suite(["5.1"], read_fabric(name), "quick", min_dilation=8)
        assert {t.dilation for t in plan.trials} == {8.0}
        assert plan_record(plan)["min_dilation"] == 8
    assert plan_record(plan_suite(["5.1"], rail, "quick"))["min_dilation"] == 1


def test_each_qp_of_5_1_is_its_own_persistent_connection(p2p_on_rail):
    """The draft's QPs: n message streams of one pair, each in its own lane, on
    connections opened before the traffic (not one connection per message)."""
    eight = next(t for t in p2p_on_rail.trials if t.trial.variant == "1MBx8qp").runs[0]
    lanes = [w["lane"] for w in eight.resolved["workloads"]]
    assert lanes == list(range(8))
    assert eight.config.agents.connection == "persistent"


def test_serving_pools_and_fault_links_follow_the_fabric():
    ref = fabric({"fabric": {"kind": "spine_leaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 4}})
    mine = fabric(
        {"fabric": {"kind": "rail_optimized", "servers": 2, "gpus_per_server": 4, "spines": 2}}
    )
    hosts = HostMap(ref, mine)
    # h0, h1 (leaf0) → rail 0 of servers 0, 1; h5 (leaf1) → rail 1, server 0
    assert hosts.pool([0, 1, 5]) == {"servers": [0, 1], "gpus": {0: [0, 1], 1: [0]}}
    assert hosts.link(["leaf1", "spine0"]) == ["rail1", "spine0"]
    assert hosts.link(["h4", "leaf1"]) == ["gpu1_1", "rail1"]


REF = {"kind": "spine_leaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 4}


def switches_between(f: object, a: str, b: str) -> list[list[str]]:
    """The switches of each shortest path from GPU a to GPU b (no GPU forwards)."""
    return [path[1:-1] for path in f.shortest_paths(a, b)]


@pytest.mark.parametrize("name", ["spine-leaf-1to1", "spine-leaf-2to1", "rail-optimized"])
def test_a_reference_pair_keeps_its_path_on_each_datasheet_fabric(name):
    # what a procedure means by h0 -> h4 (leaf to leaf, over a spine) must hold on the
    # user's fabric, or an oversubscribed spine is never measured: on 16 GPUs the i-th
    # GPU by position put h0..h7 all under one leaf
    ref, mine = fabric({"fabric": REF}), fabric(read_fabric(name).raw)
    hosts = HostMap(ref, mine)
    kinds = {n.name: n.kind for n in mine.nodes}
    for a, b in [("h0", "h4"), ("h1", "h5"), ("h3", "h7"), ("h2", "h6")]:
        paths = switches_between(mine, hosts.host(a), hosts.host(b))
        assert paths, (a, b)
        for path in paths:
            assert [kinds[s] for s in path][1] == "spine", (a, b, path)
    for a, b in [("h0", "h1"), ("h4", "h7")]:
        paths = switches_between(mine, hosts.host(a), hosts.host(b))
        assert paths, (a, b)
        for path in paths:
            assert len(path) == 1 and kinds[path[0]] in ("leaf", "rail"), (a, b, path)
    assert len(set(hosts.hosts.values())) == 8


def test_a_fabric_like_the_reference_maps_each_gpu_to_itself():
    for raw in (REF | {"hosts_per_leaf": 8}, read_fabric("rail-optimized").raw["fabric"]):
        same = fabric({"fabric": raw})
        assert all(a == b for a, b in HostMap(same, same).hosts.items())


def test_gpus_beyond_an_edge_switch_take_the_fabrics_free_gpus():
    ref = fabric({"fabric": REF | {"hosts_per_leaf": 8}})  # 8 a leaf, 4 a rail
    hosts = HostMap(ref, fabric(read_fabric("rail-optimized").raw))
    assert sorted(hosts.hosts.values()) == sorted(g.name for g in hosts.fabric.gpus)
    assert [hosts.host(f"h{i}") for i in range(4)] == [f"gpu{s}_0" for s in range(4)]


def test_unknown_and_infeasible_tests_are_refused_by_name(rail):
    with pytest.raises(Refused) as caught:
        plan_suite(["5.1", "99.9", "8.4"], rail, "quick")
    assert [r.split(":")[0] for r in caught.value.reasons] == ["99.9", "8.4"]


def test_a_test_the_fabric_cannot_hold_is_refused_with_why():
    with pytest.raises(Refused, match="h15"):  # 8.2 probes from h15: 16 GPUs
        plan_suite(["8.2"], fabric_of("small", SMALL), "smoke")


def test_smoke_is_one_short_run_and_keeps_faults_inside_it():
    planned = trials(BY_ID["13.3"], "smoke")
    assert [t.repetitions for t in planned] == [1]
    sets = dict(o.split("=", 1) for o in planned[0].overrides)
    assert float(sets["duration_s"]) <= SMOKE_S
    flap = json.loads(sets["faults"])[0]
    assert 0 < flap["at_s"] < float(sets["duration_s"])


def kv_flows(fct_ms: float, n: int = 10, start_ns: int = 3_000 * MS) -> pd.DataFrame:
    """``n`` delivered 1 MB KV messages gpu0_0 → gpu1_0 back to back, each ``fct_ms``."""
    t0 = start_ns + np.arange(n) * int(fct_ms * MS)
    return pd.DataFrame(
        {
            "flow_id": range(n),
            "kind": ["incast"] * n,
            "tenant": ["kv"] * n,
            "src": ["gpu0_0"] * n,
            "dst": ["gpu1_0"] * n,
            "bytes": [100] * n,  # 1 MB real at scale 1e-4
            "t_sched_ns": t0,
            "t_start_ns": t0,
            "t_end_ns": t0 + int(fct_ms * MS),
            "fct_ms": [fct_ms] * n,
            "ok": [True] * n,
        }
    )


def test_kv_kpis_of_hand_made_flows():
    tables = RunTables("5.2", 8.0, Scale(1e-4), flows=kv_flows(10.0))
    got = kpi_values(("KV_xfer_latency", "Tail_spread", "KV_xfer_bandwidth"), tables)
    assert got["KV_xfer_latency p50 ms"] == pytest.approx(10.0)
    assert got["Tail_spread ms"] == pytest.approx(0.0)
    # 10 MB real in 100 ms: 0.8 Gbit/s
    assert got["KV_xfer_bandwidth Gbit/s"] == pytest.approx(0.8)


def test_fault_kpis_are_the_worst_fault_of_the_run():
    def fault(lost, probe_ms, rate_ms, rules_ms):
        return {
            "probes_lost": lost,
            "first_probe_ms": probe_ms,
            "back_to_rate_ms": rate_ms,
            "installed_ms": rules_ms,
        }

    kpis = ("Fault_disruption", "Recovery_time", "Convergence_time")
    undo = fault(30, 5000.0, 5000.0, 5000.0) | {"fault": "link_up"}  # not a failure
    two = (fault(12, 340.0, 900.0, 25.0), undo, fault(0, 20.0, 150.0, 40.0))
    got = kpi_values(kpis, RunTables("12.3", 8.0, Scale(1e-4), faults=two))
    # the second lost no probe: its 20 ms is the probes' spacing, no disruption
    assert got == {
        "Fault_disruption ms": 340.0,
        "Recovery_time ms": 900.0,
        "Convergence_time ms": 40.0,
    }
    never = (fault(12, None, None, 25.0),)  # probes and rate never came back
    got = kpi_values(kpis, RunTables("12.3", 8.0, Scale(1e-4), faults=never))
    assert got["Fault_disruption ms"] is None and got["Recovery_time ms"] is None
    quiet = kpi_values(kpis, RunTables("8.3", 8.0, Scale(1e-4)))  # no fault: no figure
    assert quiet == {"Fault_disruption ms": None, "Recovery_time ms": None}


def test_serving_kpis_are_none_without_requests_not_an_error():
    got = kpi_values(("TTFT", "TPS_input"), RunTables("6.1", 8.0, Scale(1e-4)))
    assert got == {"TTFT p50 ms": None, "TTFT p99 ms": None, "TPS_input tokens/s": None}


def test_jfi_of_concurrent_pairs_is_over_each_pairs_goodput():
    fast, slow = kv_flows(10.0), kv_flows(30.0).assign(src="gpu0_1", dst="gpu1_1")
    tables = RunTables("5.3", 8.0, Scale(1e-4), flows=pd.concat([fast, slow]))
    # goodputs 3:1: (3 + 1)^2 / (2 * (9 + 1)) = 0.8
    assert kpi_values(("JFI",), tables)["JFI"] == pytest.approx(0.8)


def fake_run_spec(fct_by_fabric: float, unfaithful_seed: int | None = None, attempts: int = 99):
    """A ``run_spec`` that writes each run's directory with KV flows of ``fct`` ms
    (+ 1 ms per seed), judged faithful except ``unfaithful_seed`` in its first
    ``attempts`` attempts."""
    tries: dict[int, int] = {}

    def run_spec(spec, runs, out_dir: Path):
        outcomes = []
        for run in runs:
            run = run.at_time_dilation(1)
            tries[run.seed] = tries.get(run.seed, 0) + 1
            path = Path(out_dir) / f"{run.experiment}-{run.index}-{run.seed}-{tries[run.seed]}"
            path.mkdir(parents=True)
            (path / "spec.yaml").write_text(resolved_yaml(run))
            summary = {
                "label": run.label,
                "seed": run.seed,
                "time_dilation": 1,
                "fidelity": {
                    "ok": run.seed != unfaithful_seed or tries[run.seed] > attempts,
                    "checks": {
                        "lateness": {"ok": run.seed != unfaithful_seed, "detail": "p99 5 ms"}
                    },
                },
            }
            (path / "summary.json").write_text(json.dumps(summary))
            (path / "events.json").write_text(json.dumps({"t0_ns": 0}))
            kv_flows(fct_by_fabric + run.seed).to_parquet(path / "flows.parquet")
            outcomes.append(type("Outcome", (), {"path": path, "summary": summary})())
        return outcomes

    return run_spec


@pytest.fixture(scope="module")
def latency_plan(rail):
    plan = plan_suite(["5.2"], rail, "quick")
    plan.trials = plan.trials[:1]  # 1 MB unloaded, seeds 1 and 2
    return plan


def test_a_suite_writes_kpis_with_intervals_and_the_section_14_report(latency_plan, tmp_path):
    suite = run_suite(latency_plan, tmp_path, fake_run_spec(10.0), datetime(2026, 12, 3, 16))
    assert suite.name == "bmwg-20261203-160000"
    points = json.loads((suite / "5.2" / "kpis.json").read_text())["points"]
    (cell,) = [p["kpis"]["KV_xfer_latency p50 ms"] for p in points.values()]
    assert (cell["estimate"], cell["n"]) == (pytest.approx(11.5), 2)  # seeds 1, 2: 11 and 12 ms
    assert cell["low"] < cell["estimate"] < cell["high"]
    assert len(pd.read_csv(suite / "5.2" / "kpis.csv")) == 2
    report = (suite / "report.md").read_text()
    for part in (
        "## System configuration",
        "## Workload characterisation",
        "## KPIs per test",
        "## Fabric health indicators",
        "## Anomalies",
        "## Substitutes",
        "kernel TCP over drop-tail",
        "Packet_drop_rate",
    ):
        assert part in report
    assert (suite / "report.html").is_file()
    assert (suite / "plots" / "5-2-KV_xfer_latency-cdf.png").is_file()


def test_a_latency_cdf_spanning_decades_is_drawn_on_a_log_axis():
    """5.1's 1 MB messages (0.07 ms) and 256 MB ones (190 ms) share one CDF: on a linear
    axis the small ones are a line at 0; from two decades on the axis is logarithmic."""
    from experiments.bmwg.report import _decades

    assert _decades([np.array([0.07, 0.08]), np.array([22.0, 190.0])]) >= 2
    assert _decades([np.array([10.0, 40.0])]) < 2
    assert _decades([np.array([0.0])]) == 0.0  # nothing positive: no axis to choose


def test_an_unfaithful_run_is_an_anomaly_and_left_out(latency_plan, tmp_path):
    suite = run_suite(latency_plan, tmp_path, fake_run_spec(10.0, 2), datetime(2026, 12, 3))
    points = json.loads((suite / "5.2" / "kpis.json").read_text())["points"]
    (point,) = points.values()
    assert (point["runs"], point["counted"]) == (2, 1)
    report = (suite / "report.md").read_text()
    assert "seed 2: judged not faithful" in report
    assert report.count("run again with the same seed") == 2  # both retries failed too


def test_an_unfaithful_run_is_run_again_and_the_attempt_named(latency_plan, tmp_path):
    flaky = fake_run_spec(10.0, unfaithful_seed=2, attempts=1)
    suite = run_suite(latency_plan, tmp_path, flaky, datetime(2026, 12, 3))
    (point,) = json.loads((suite / "5.2" / "kpis.json").read_text())["points"].values()
    assert (point["runs"], point["counted"]) == (2, 2)
    record = json.loads((suite / "suite.json").read_text())
    (thrown,) = record["discarded"]
    assert (thrown["seed"], thrown["failed"]) == (2, {"lateness": "p99 5 ms"})
    assert thrown["run_dir"].endswith("-2-1") and record["complete"] is True
    assert (
        "seed 2: an attempt judged not faithful (lateness: p99 5 ms)"
        in (suite / "report.md").read_text()
    )


def test_a_run_that_failed_is_run_again_like_an_unfaithful_one(latency_plan, tmp_path):
    honest, calls = fake_run_spec(10.0), []

    def crashed_once(spec, runs, out_dir):
        calls.append(len(runs))
        done = honest(spec, runs, out_dir)
        if len(calls) == 1:
            done[0].summary["error"] = "UnicodeDecodeError: 0xbe in position 110"
        return done

    suite = run_suite(latency_plan, tmp_path, crashed_once, datetime(2026, 12, 3))
    record = json.loads((suite / "suite.json").read_text())
    assert calls == [2, 1] and [r["error"] for r in record["rows"]] == [None, None]
    assert record["discarded"][0]["failed"] == {"error": "UnicodeDecodeError: 0xbe in position 110"}


def test_a_rerun_that_cannot_start_leaves_the_first_attempts_as_anomalies(latency_plan, tmp_path):
    honest, calls = fake_run_spec(10.0, unfaithful_seed=2), []

    def refused_again(spec, runs, out_dir):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("EnvelopeExceeded")
        return honest(spec, runs, out_dir)

    suite = run_suite(latency_plan, tmp_path, refused_again, datetime(2026, 12, 3))
    (point,) = json.loads((suite / "5.2" / "kpis.json").read_text())["points"].values()
    assert (point["runs"], point["counted"]) == (2, 1)


def test_a_suite_stopped_by_ctrl_c_keeps_what_it_measured(rail, tmp_path):
    plan = plan_suite(["5.2"], rail, "quick")
    plan.trials = plan.trials[:3]
    honest = fake_run_spec(10.0)
    calls = []

    def stopped_in_the_second(spec, runs, out_dir):
        calls.append(1)
        done = honest(spec, runs, out_dir)
        return done[:1] if len(calls) == 2 else done  # Ctrl-C: the second run not started

    suite = run_suite(plan, tmp_path, stopped_in_the_second, datetime(2026, 12, 3))
    record = json.loads((suite / "suite.json").read_text())
    assert len(calls) == 2 and record["complete"] is False
    assert record["not_run"] == [f"5.2 {t.trial.variant}" for t in plan.trials[1:]]
    assert len(record["rows"]) == 3  # the first trial's two runs and the one finished
    assert "**Interrupted**: 2 trial(s) not run in full" in (suite / "report.md").read_text()
    assert read_suite(suite).plan["tests"] == []  # compare waits for 5.2 run in full

    def second_ctrl_c(spec, runs, out_dir):
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt
        return honest(spec, runs, out_dir)

    with pytest.raises(KeyboardInterrupt):
        run_suite(plan, tmp_path / "b", second_ctrl_c, datetime(2026, 12, 3))
    (kept,) = (tmp_path / "b").iterdir()
    record = json.loads((kept / "suite.json").read_text())
    assert len(record["rows"]) == 2 and len(record["not_run"]) == 2


def test_a_trial_that_cannot_run_is_recorded_and_the_suite_goes_on(latency_plan, tmp_path):
    def refuse(spec, runs, out_dir):
        raise RuntimeError("EnvelopeExceeded: 40 Mbit/s over this machine")

    suite = run_suite(latency_plan, tmp_path, refuse, datetime(2026, 12, 3))
    assert "failed: RuntimeError: EnvelopeExceeded" in (suite / "report.md").read_text()


def test_compare_marks_a_fabric_that_differs(latency_plan, tmp_path):
    fast = run_suite(latency_plan, tmp_path / "a", fake_run_spec(10.0), datetime(2026, 1, 1))
    slow = run_suite(latency_plan, tmp_path / "b", fake_run_spec(40.0), datetime(2026, 1, 1))
    slow_fabric = dataclasses.replace(read_suite(slow), name="rail-slow")
    text = compare_markdown([read_suite(fast), slow_fabric])
    row = next(ln for ln in text.splitlines() if "KV_xfer_latency p50 ms" in ln)
    assert "differs" in row and row.count("n=2") == 3  # two fabrics and their ratio


def test_compare_names_a_kpi_no_run_measured_instead_of_a_row_of_dashes(latency_plan, tmp_path):
    done = read_suite(run_suite(latency_plan, tmp_path, fake_run_spec(10.0), datetime(2026, 1, 1)))
    column = "KV_xfer_latency p99 ms"
    unmeasured = dataclasses.replace(done, rows=[{**r, column: None} for r in done.rows])
    other = dataclasses.replace(unmeasured, name="rail")
    text = compare_markdown([unmeasured, other])
    rows = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert not any(column in ln for ln in rows)  # no row of "– [–] n=0"
    assert any("KV_xfer_latency p50 ms" in ln for ln in rows)  # the measured one stays
    said = next(ln for ln in text.splitlines() if ln.startswith("Measured by no run"))
    assert f"1MB@0% {column}" in said


def test_compare_pairs_the_ratio_by_seed_and_two_seeds_decide_little():
    # each side's two runs lie apart; the seeds move together
    near = ratio_cell({1: 12.0, 2: 14.0}, {1: 10.0, 2: 11.0})  # ratios 1.2, 1.27
    assert near.startswith("1.236 [") and "n=2" in near and "differs" not in near
    # the old bootstrap over each side's 2 values called this a difference:
    # its resampled means were 10-11 against 12-14, never a ratio below 1.09
    far = ratio_cell({1: 40.0, 2: 44.0}, {1: 10.0, 2: 11.0})  # ratios 4.0 both
    assert "n=2" in far and "differs" in far and far.endswith("(no spread between seeds)")
    tiny = ratio_cell({1: 10.01, 2: 11.012}, {1: 10.0, 2: 11.0})  # 1.001 and 1.0011
    assert tiny.endswith("differs, by under 5 %")
    assert ratio_cell({1: 12.0}, {1: 10.0, 2: 11.0}) == "–"  # one seed paired
    assert ratio_cell({3: 12.0, 4: 13.0}, {1: 10.0, 2: 11.0}) == "–"  # none paired
    point = {"seeds": [2, 1, 1], "values": {"k": [11.0, 9.0, 11.0]}}
    assert per_seed(point, "k") == {2: 11.0, 1: 10.0} and per_seed(None, "k") == {}


def test_compare_reads_a_fabric_run_in_parts_as_one_column(latency_plan, tmp_path):
    done = run_suite(latency_plan, tmp_path, fake_run_spec(10.0), datetime(2026, 1, 1))
    part = read_suite(done)
    rest = Suite(
        part.name, {**part.plan, "tests": ["5.1"]}, [{**r, "test": "5.1"} for r in part.rows]
    )
    text = compare_markdown([part, rest])
    assert "## 5.1" in text and "## 5.2" in text
    assert text.count(f"| point | KPI | {part.name} |") == 2  # one column, no ratio to itself
    with pytest.raises(ValueError, match="5.2 is in two"):
        compare_markdown([part, part])
    other_profile = Suite(part.name, {**rest.plan, "profile": "standard"}, rest.rows)
    with pytest.raises(ValueError, match="profile"):
        compare_markdown([part, other_profile])


def test_a_test_run_again_on_a_fabric_supersedes_its_earlier_result(latency_plan, tmp_path):
    old = run_suite(latency_plan, tmp_path, fake_run_spec(40.0), datetime(2026, 1, 1))
    new = run_suite(latency_plan, tmp_path, fake_run_spec(10.0), datetime(2026, 1, 2))
    for order in ([old, new], [new, old]):  # the later one, whatever the order given
        text = compare_markdown([read_suite(d) for d in order])
        row = next(ln for ln in text.splitlines() if "KV_xfer_latency p50 ms" in ln)
        assert "11.5" in row and "41.5" not in row  # seeds 1, 2 of the 10 ms run
        assert f"5.2: {new.name} supersedes {old.name}" in text


def test_ecmp_balance_is_over_the_busiest_switchs_uplinks():
    def counter(node, port, mbps):  # tx_bytes growing at ``mbps`` over 3 one-second samples
        return [(t * 1_000 * MS, node, port, int(t * mbps * 125_000), 0, 0) for t in range(3)]

    rows = counter("leaf0", 9, 30.0) + counter("leaf0", 10, 10.0) + counter("leaf1", 9, 0.1)
    links = pd.DataFrame(
        rows, columns=["t_ns", "node", "port", "tx_bytes", "tx_packets", "tx_dropped"]
    )
    uplinks = ("leaf0:9", "leaf0:10", "leaf1:9", "leaf1:10")
    tables = RunTables("9.3", 2.0, Scale(1e-4), links=links, uplinks=uplinks)
    got = kpi_values(("MMR", "Max_min_ratio"), tables)
    # leaf0's two uplinks at 30 and 10 Mbit/s: max/mean 1.5, max/min 3 (leaf1's ACKs aside)
    assert (got["MMR"], got["Max_min_ratio"]) == (pytest.approx(1.5), pytest.approx(3.0))


def test_dry_run_prints_the_plan_without_root_and_refuses_by_name(capsys):
    from experiments.cli.common import EXIT_OK, EXIT_USAGE
    from experiments.cli.main import main

    args = ["bmwg", "run", "5.2", "--fabric", "rail-optimized", "--profile", "smoke"]
    assert main([*args, "--dry-run"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "1 runs" in out and "estimated wall time: 0.2 min" in out
    assert "substitute: one-sided RDMA PUT" in out
    bad = ["bmwg", "run", "5.2", "8.4", "99.9", "--fabric", "rail-optimized", "--dry-run"]
    assert main(bad) == EXIT_USAGE
    refused = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("refused")]
    assert [ln.split()[1] for ln in refused] == ["8.4:", "99.9:"]
    assert main([*args, "--dry-run", "--min-dilation", "8"]) == EXIT_OK
    assert "auto chooses 8 or more (--min-dilation)" in capsys.readouterr().out
    for floor in ("0.5", "128"):  # below 1, above the largest auto may choose (64)
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--dry-run", "--min-dilation", floor])
        assert exit_.value.code == EXIT_USAGE
        assert f"--min-dilation: {floor} is not allowed" in capsys.readouterr().err


def test_compare_refuses_a_directory_that_is_no_bmwg_result(tmp_path, capsys):
    from experiments.cli.main import main

    assert main(["bmwg", "compare", str(tmp_path)]) == 2
    assert "not a kvfabric bmwg result" in capsys.readouterr().out


def test_a_one_shot_incast_is_measured_whole_not_after_a_warm_up():
    from experiments.bmwg.suite import measured_after_s

    # 8.1's ten 16 MB rounds are over in ~0.1 s, long before a 2 s warm-up ends
    assert (measured_after_s("8.1", 2.0), measured_after_s("5.1", 2.0)) == (0.0, 2.0)


def test_the_command_line_s_defaults_are_the_suite_s():
    from experiments.bmwg.execute import RETRIES
    from experiments.bmwg.plan import PROFILES, RUN_PROFILES
    from experiments.cli import bmwg as cli
    from experiments.cli.main import _parser

    args = _parser().parse_args(["bmwg", "run", "5.2", "--fabric", "rail-optimized"])
    assert args.retries == RETRIES
    assert (RUN_PROFILES, tuple(PROFILES)) == (cli.RUN_PROFILES, cli.PROFILE_NAMES)


def test_run_refuses_negative_retries(capsys):
    from experiments.cli.main import main

    args = ["bmwg", "run", "5.2", "--fabric", "rail-optimized", "--profile", "smoke"]
    assert main([*args, "--retries", "-1"]) == 2
    assert "--retries -1" in capsys.readouterr().out


def test_compare_says_where_fabrics_ran_a_point_at_different_time_dilations():
    from experiments.bmwg.compare import Suite, mixed_dilations

    def rows(d: float, faithful: bool = True) -> list[dict]:
        return [
            {"test": "7.3", "point": "EP4", "seed": 1, "faithful": True, "time_dilation": 1.0},
            {"test": "7.3", "point": "EP8", "seed": 1, "faithful": faithful, "time_dilation": d},
        ]

    plan = {"tests": ["7.3"]}
    spine = Suite("spine-leaf-1to1", plan, rows(1.0))
    rail = Suite("rail-optimized", plan, rows(4.0))
    assert mixed_dilations([spine, rail], "7.3") == [
        "EP8 (spine-leaf-1to1 d=1, rail-optimized d=4)"
    ]
    # an unfaithful run does not count, and a point one fabric lacks is not mixed
    assert mixed_dilations([spine, Suite("rail", plan, rows(4.0, faithful=False))], "7.3") == []

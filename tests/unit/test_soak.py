"""The soak benchmark's judgement without running it: a leaking process fails, a flat
noisy one passes, lateness is bucketed by the minute it was scheduled in and judged as
the fidelity monitor judges it, an unfaithful soak is no pass, and the run's processes
are told apart by their command lines."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks import growth
from benchmarks.__main__ import usage_problem
from benchmarks.memwatch import component_of, disk_bytes, scratch_of
from benchmarks.soak import judge, soak_spec, worst
from experiments.analysis.fidelity import lateness_check
from experiments.cli.main import EXIT_USAGE, main
from experiments.orchestration.envelope import DEFAULT
from experiments.orchestration.runner import prepare
from experiments.spec.load import expand

MINUTES = 30
T0 = 10**12  # an arbitrary monotonic instant, ns


def memory_series(
    component: str,
    start_mb: float,
    mb_per_min: float,
    noise_mb: float,
    seed: int = 0,
    period_s: float = 5.0,
) -> pd.DataFrame:
    """A component's RSS sampled every ``period_s`` over the run, with Gaussian noise."""
    t = np.arange(0, MINUTES * 60, period_s) / 60
    rss = start_mb + mb_per_min * t + np.random.default_rng(seed).normal(0, noise_mb, t.size)
    return pd.DataFrame({"t_min": t, "component": component, "rss_mb": rss, "uss_mb": rss * 0.8})


def flows_table(t_sched_s: np.ndarray, issue_ms: np.ndarray, **extra: np.ndarray) -> pd.DataFrame:
    n = len(t_sched_s)
    frame = pd.DataFrame(
        {
            "t_sched_ns": (T0 + t_sched_s * 1e9).astype(np.int64),
            "issue_lateness_ms": issue_ms,
            "lateness_ms": issue_ms + 10.0,  # with head-of-line waits: not what is judged
            "after": np.full(n, -1),
        }
    )
    for name, values in extra.items():
        frame[name] = values
    return frame


# ----- memory --------------------------------------------------------------------------
def test_a_leaking_coordinator_fails_and_is_named():
    samples = memory_series("coordinator", 150.0, 0.5, noise_mb=1.0)  # 15 MB in 30 min
    (m,) = growth.memory_growth(samples, MINUTES)
    assert not m.ok
    assert m.slope_mb_per_min == pytest.approx(0.5, abs=0.05)
    assert m.growth_mb == pytest.approx(15, abs=1.5)
    assert m.limit_mb == pytest.approx(7.5, abs=0.3)  # 5% of ~150 MB
    assert m.end_over_start == pytest.approx(m.end_mb / m.start_mb)
    lateness = growth.LatenessGrowth(30, 0.4, 0.4, 0.0, 0.0, 0.5, True)
    (why,) = growth.growth_failures([m], lateness)
    assert why.startswith("coordinator: memory grew 1")


def test_flat_noisy_memory_passes_even_with_a_first_minute_climb():
    flat = memory_series("agents worker-0", 80.0, 0.0, noise_mb=2.0, seed=3)
    warming = flat["t_min"] < growth.WARMUP_MIN  # imports and first connections
    flat.loc[warming, "rss_mb"] -= 40 * (1 - flat.loc[warming, "t_min"])
    (m,) = growth.memory_growth(flat, MINUTES)
    assert m.ok, m
    assert abs(m.growth_mb) < 5.0
    assert m.start_mb == pytest.approx(80, abs=8)  # measured after the warm-up climb


def test_the_limit_is_five_percent_of_a_large_process_and_five_mb_of_a_small_one():
    same_growth = [
        memory_series("controller", 60.0, 0.3, 0.2),  # 9 MB > 5 MB
        memory_series("sampler", 400.0, 0.3, 0.2),
    ]  # 9 MB < 20 MB
    by_name = {m.component: m for m in growth.memory_growth(pd.concat(same_growth), MINUTES)}
    assert not by_name["controller"].ok and by_name["controller"].limit_mb == 5.0
    assert by_name["sampler"].ok and by_name["sampler"].limit_mb == pytest.approx(20, abs=0.5)
    assert worst(list(by_name.values())).component == "controller"


def test_a_component_seen_too_briefly_fails_rather_than_passing_as_flat():
    brief = memory_series("sampler", 50.0, 0.0, 0.0).iloc[:14]  # gone after 70 s
    (m,) = growth.memory_growth(brief, MINUTES)
    assert m.samples == 2 and m.growth_mb is None and not m.ok
    assert (
        "not judged"
        in growth.growth_failures([m], growth.LatenessGrowth(30, 0.4, 0.4, 0.0, 0.0, 0.5, True))[0]
    )


# ----- lateness ------------------------------------------------------------------------
def test_lateness_is_bucketed_by_the_minute_it_was_scheduled_in():
    t = np.array([1.0, 59.9, 60.0, 61.0, 150.0, 185.0])  # the last is after the run
    late = np.array([0.1, 0.3, 2.0, 4.0, 9.0, 99.0])
    per_minute = growth.lateness_by_minute(flows_table(t, late), T0, minutes=3)
    assert per_minute["minute"].tolist() == [0, 1, 2]
    assert per_minute["flows"].tolist() == [2, 2, 1]
    assert per_minute["p99_ms"].tolist() == pytest.approx([0.298, 3.98, 9.0])


def test_group_released_flows_and_head_of_line_waits_are_not_judged():
    flows = flows_table(
        np.array([1.0, 2.0, 3.0]), np.array([0.2, 0.2, 50.0]), after=np.array([-1, -1, 7])
    )
    (minute0,) = growth.lateness_by_minute(flows, T0, minutes=1).to_dict("records")
    assert minute0["flows"] == 2 and minute0["p99_ms"] == pytest.approx(0.2)


def test_a_one_minute_bucket_is_what_the_fidelity_check_judges():
    rng = np.random.default_rng(5)
    flows = flows_table(
        rng.uniform(0, 60, 2000),
        rng.exponential(0.3, 2000),
        after=np.where(rng.random(2000) < 0.1, 3, -1),
    )
    (minute0,) = growth.lateness_by_minute(flows, T0, minutes=1).to_dict("records")
    assert minute0["p99_ms"] == pytest.approx(lateness_check(flows)["value"])


def per_minute_p99(p99_ms: np.ndarray, flows: int = 6000) -> pd.DataFrame:
    return pd.DataFrame(
        {"minute": np.arange(len(p99_ms)), "flows": flows, "p50_ms": p99_ms / 5, "p99_ms": p99_ms}
    )


def test_rising_lateness_fails_and_flat_noisy_lateness_passes():
    minutes = np.arange(MINUTES)
    rising = growth.lateness_growth(per_minute_p99(0.4 + 0.04 * minutes), MINUTES)
    assert not rising.ok and rising.growth_ms == pytest.approx(1.2)
    noise = np.random.default_rng(2).normal(0, 0.05, MINUTES)
    flat = growth.lateness_growth(per_minute_p99(0.4 + noise), MINUTES)
    assert flat.ok and abs(flat.growth_ms) < 0.5


def test_sparse_minutes_are_not_fitted():
    table = per_minute_p99(np.array([0.4, 0.4, 30.0]))
    table.loc[2, "flows"] = growth.MIN_FLOWS_PER_MINUTE - 1  # one unlucky flow's p99
    judged = growth.lateness_growth(table, 3)
    assert judged.ok and judged.minutes_fitted == 2
    assert judged.slope_ms_per_min == pytest.approx(0.0, abs=1e-9)


# ----- the verdict ---------------------------------------------------------------------
def test_an_unfaithful_soak_is_not_a_pass_though_nothing_grew():
    memory = growth.memory_growth(memory_series("coordinator", 150.0, 0.0, 0.5), MINUTES)
    lateness = growth.lateness_growth(per_minute_p99(np.full(MINUTES, 0.4)), MINUTES)
    assert judge(memory, lateness, True, [], None) == (True, "")
    met, why = judge(memory, lateness, False, ["lateness", "cpu"], None)
    assert not met and "not faithful" in why and "lateness, cpu" in why


def test_a_folder_is_sized_at_the_end_of_each_minute():
    t = np.array([0.1, 0.9, 1.2, 1.95, 2.5])
    sizes = growth.size_by_minute(t, [1.0, 1.5, 1.5, 4.0, 4.0])
    assert [(s["minute"], s["mb"], s["grown_mb"]) for s in sizes] == [
        (0, 1.5, 1.5),
        (1, 4.0, 2.5),
        (2, 4.0, 0.0),
    ]


def test_disk_bytes_counts_what_a_folder_holds(tmp_path):
    empty = disk_bytes(tmp_path)
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "worker-0.log").write_bytes(b"x" * 100_000)
    assert disk_bytes(tmp_path) - empty >= 100_000
    assert disk_bytes(tmp_path / "gone") == 0


# ----- the run's processes -------------------------------------------------------------
def test_the_runs_processes_are_told_apart_by_their_command_lines():
    py = "/work/main/.venv/bin/python"
    worker = [
        py,
        "-m",
        "traffic.agents.worker",
        "--hosts",
        "/r/agents/worker-1.hosts.json",
        "--control",
        "/r/agents/worker-1.sock",
        "--cc",
        "cubic",
    ]
    controller = [
        py,
        "-m",
        "controller.main",
        "/tmp/kvf-run-x/controller/controller.json",
        "6653",
        "/tmp/kvf-run-x/controller/controller.log",
    ]
    sampler = [py, "-m", "experiments.measurement.sampler_process", "/tmp/s/config.json"]
    assert component_of(worker) == "agents worker-1"
    assert component_of(controller) == "controller"
    assert component_of(sampler) == "sampler"
    assert component_of(["bash", "--norc", "-is", "mininet:gpu0_0"]) is None
    assert (
        scratch_of(controller) == scratch_of(controller[:4])
        and str(scratch_of(controller)) == "/tmp/kvf-run-x"
    )
    assert scratch_of(worker) is None


# ----- the command line ----------------------------------------------------------------
def test_minutes_needs_the_soak_and_at_least_two():
    assert usage_problem(["soak"], 2) == "" and usage_problem([], None) == ""
    assert "name it" in usage_problem(["setup"], 5)
    assert "at least 2" in usage_problem(["soak"], 1)


def test_kvfabric_bench_refuses_a_soak_too_short_to_judge(capsys):
    assert main(["bench", "soak", "--minutes", "1"]) == EXIT_USAGE
    assert "at least 2" in capsys.readouterr().err


# ----- the soak's traffic --------------------------------------------------------------
def test_the_soak_serves_and_loads_the_fabric_for_all_its_minutes_within_the_envelope():
    spec = soak_spec(2)
    (run,) = prepare(spec, expand(spec), envelope=(DEFAULT, "the 2-core VM"))  # no --force
    assert run.run.resolved["duration_s"] == 120 and not run.plan.exceeded
    assert run.plan.driver is not None  # the serving workload
    background = run.plan.schedule[run.plan.schedule["kind"] == "background"]
    assert background["t_sched_ns"].max() / 1e9 > 115  # arrivals until the end
    per_s = len(background) / 120
    assert growth.MIN_FLOWS_PER_MINUTE / 60 < per_s < 500  # every minute judged, modest

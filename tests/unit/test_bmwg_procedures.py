"""The draft's test procedures as data (experiments.bmwg): every test listed, each
status explained, and every runnable test's runs, at every profile, specs the spec
language accepts (load_spec + expand; no root, nothing emulated)."""

from __future__ import annotations

import importlib
import json

import pytest

from experiments.analysis.bmwg import KPIS
from experiments.bmwg.catalog import BY_ID, PROCEDURES, counts, procedure
from experiments.bmwg.health import HEALTH
from experiments.bmwg.model import PROFILES
from experiments.bmwg.plan import experiment_name, load_trial, runs, trials
from experiments.cli.main import EXIT_OK, main

# the sections of -02's Table of Contents: 5.1–5.4 … 13.1–13.3 (33 procedures)
SECTIONS = {5: 4, 6: 4, 7: 4, 8: 4, 9: 4, 10: 4, 11: 3, 12: 3, 13: 3}
DRAFT_IDS = [f"{s}.{i}" for s, n in SECTIONS.items() for i in range(1, n + 1)]
RUNNABLE = [p for p in PROCEDURES if p.runnable]


def test_every_procedure_of_the_draft_is_there_in_its_order():
    assert [p.id for p in PROCEDURES] == DRAFT_IDS
    assert len(BY_ID) == len(DRAFT_IDS) == 33


def test_at_least_24_procedures_run_here():
    c = counts()
    assert c["implemented"] + c["substitute"] >= 24
    assert sum(c.values()) == len(PROCEDURES)


def test_each_status_says_what_stands_in_or_why_not():
    for p in PROCEDURES:
        if p.status == "substitute":
            assert all(s.draft and s.here for s in p.substitutes), p.id
        if p.status == "not_feasible":
            assert p.sweep is None and len(p.why_not) > 40, p.id
        else:
            assert p.sweep.quick_gives_up, p.id
    # the RDMA, ECN and PFC tests say which stand-in replaces the mechanism
    assert "TCP" in " ".join(s.here for s in procedure("5.1").substitutes)
    assert "drop" in " ".join(s.here for s in procedure("8.1").substitutes)
    assert procedure("8.4").status == "not_feasible"


def test_every_kpi_a_procedure_names_is_defined_and_computable():
    for p in PROCEDURES:
        assert p.kpis and set(p.kpis) <= set(KPIS), p.id
    for kpi in KPIS.values():
        if kpi.function:
            module, _, name = kpi.function.rpartition(".")
            assert callable(getattr(importlib.import_module(module), name))


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("proc", RUNNABLE, ids=lambda p: p.id)
def test_every_run_of_every_profile_is_a_valid_spec(proc, profile):
    sweep = proc.sweep
    budget = sweep.budgets[profile]
    planned = trials(proc, profile)
    all_runs = [run for trial in planned for run in runs(trial)]
    assert len(all_runs) == sweep.runs(profile)
    for run in all_runs:
        assert run.experiment == experiment_name(proc)
        assert run.resolved["duration_s"] == pytest.approx(budget.duration_s)
    # the axes change what runs: the points of one repetition are distinct specs
    first = [
        json.dumps({k: v for k, v in r.resolved.items() if k != "seed"}, sort_keys=True)
        for r in all_runs
        if r.seed == all_runs[0].seed
    ]
    assert len(set(first)) == len(first) == sweep.points(profile)


def test_quick_costs_less_than_standard_and_standard_less_than_the_draft():
    for p in RUNNABLE:
        quick, standard, draft = (p.sweep.wall_s(x) for x in PROFILES)
        assert quick < standard <= draft, p.id
        assert p.sweep.runs("quick") <= 20, p.id  # minutes, not hours


def test_the_draft_profile_keeps_the_drafts_counts_where_the_machine_can():
    p2p = procedure("5.1").sweep
    assert p2p.points("draft") == 8 * 7  # 8 message sizes × 7 QP counts
    assert p2p.budgets["draft"].repetitions == 20 and p2p.budgets["draft"].trial_s >= 60
    assert procedure("10.4").sweep.points("draft") == 20  # 0–95% in 5% steps
    assert p2p.wall_s("draft") > 20 * 3600  # hours: the data says so


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("test", ["5.1", "5.2"])
def test_every_kv_message_stream_outlasts_its_warm_up(test, profile):
    """A stream of back-to-back KV messages (n QPs of one pair) must still be sending
    when the KPIs start counting: at 100 Gbit/s, its shortest, it lasts longer than its
    trial's warm-up, and fits the trial. Where the message cap ends small messages
    early, the warm-up is shortened to the profile's share of the stream, no more."""
    budget = procedure(test).sweep.budgets[profile]
    for trial in trials(procedure(test), profile):
        work = next(
            json.loads(o.split("=", 1)[1]) for o in trial.overrides if o.startswith("workloads=")
        )
        kv = [w for w in work if w["kind"] == "incast"]
        span_s = sum(w["rounds"] * w["sru_bytes"] for w in kv) * 8 / 100e9
        assert trial.warmup_s < span_s <= budget.trial_s, trial.variant
        if trial.warmup_s < budget.warmup_s:  # shortened only in proportion
            assert trial.warmup_s / span_s == pytest.approx(
                budget.warmup_s / budget.duration_s, rel=1e-2
            )


def test_a_points_shorter_warm_up_is_its_trials_own():
    """Off the grid, each point is a trial with its own warm-up; on the spec's grid,
    the points share one trial, which takes the shortest."""
    from dataclasses import replace

    from experiments.bmwg.model import Axis, Point

    proc = procedure("5.1")
    profile = proc.sweep.budgets["quick"].warmup_s

    def axis(a: dict, b: dict) -> Axis:
        return Axis("x", {p: (Point("a", a, 0.5), Point("b", b)) for p in PROFILES})

    def warmups(ax: Axis) -> list[float]:
        mine = replace(proc, sweep=replace(proc.sweep, axes=(ax,)))
        return [t.warmup_s for t in trials(mine, "quick")]

    assert warmups(axis({"seed": 2, "duration_s": 3}, {"seed": 3, "duration_s": 4})) == [
        0.5,
        profile,
    ]
    assert warmups(axis({"seed": 2}, {"seed": 3})) == [0.5]


def test_a_trial_is_load_spec_of_the_base_with_its_overrides():
    (trial, *_) = trials(procedure("8.1"), "quick")
    spec = load_trial(trial)
    assert spec.name == "bmwg-8-1"
    assert spec.sweep == {"workloads.0.senders": [2, 8], "fabric.buffer_pkts": [16, 64]}
    assert spec.resolved["workloads"][0]["sru_bytes"] == 16 << 20


def test_oversubscription_rates_grow_with_the_ratio():
    (axis,) = procedure("6.4").sweep.axes
    rates = [next(iter(p.values.values())) for p in axis.points["standard"]]
    assert rates == sorted(rates) and rates[-1] == pytest.approx(2 * rates[0], rel=1e-3)


def test_the_health_indicators_of_table_6_are_all_there():
    assert len(HEALTH) == 7
    assert {h.status for h in HEALTH} <= {"substitute", "not_feasible"}


def test_bmwg_list_json_lists_every_test_with_its_sweep_sizes(capsys):
    assert main(["bmwg", "list", "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in data["tests"]] == DRAFT_IDS
    by_id = {t["id"]: t for t in data["tests"]}
    assert by_id["8.4"]["why_not"] and by_id["8.4"]["sweep"] is None
    assert by_id["5.1"]["sweep"]["profiles"]["draft"]["runs"] == 8 * 7 * 20
    assert data["counts"]["implemented"] + data["counts"]["substitute"] >= 24


def test_bmwg_list_text_says_status_stand_ins_and_why_not(capsys):
    assert main(["bmwg", "list"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "8.4 not feasible" in out and "5.1 substitute: RDMA queue pairs" in out
    assert "33 tests" in out


def test_bmwg_show_prints_a_tests_overrides(capsys):
    assert main(["bmwg", "show", "6.1", "--json"]) == EXIT_OK
    (trial,) = json.loads(capsys.readouterr().out)
    assert 'name="bmwg-6-1"' in trial["overrides"]
    assert main(["bmwg", "show", "99.9"]) != EXIT_OK


def test_the_docs_page_maps_every_test_to_what_is_measured_here():
    from experiments.bmwg.catalog import PROCEDURES, markdown

    page = markdown()
    rows = [ln for ln in page.splitlines() if ln.startswith("| ") and ln[2:3].isdigit()]
    assert [r.split(" | ")[0][2:] for r in rows] == [p.id for p in PROCEDURES]
    for p in PROCEDURES:
        row = next(r for r in rows if r.startswith(f"| {p.id} |"))
        assert p.status in row and (p.status == "implemented" or " → " in row or p.why_not)

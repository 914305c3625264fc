"""The reference assembler: what a committed reference keeps and how it is indexed."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from experiments.cli.main import main
from experiments.orchestration.reference import MAX_TABLE_BYTES, assemble, rewrite_reports
from tests.unit.test_report import canned_run


def test_assemble_indexes_each_run_and_replaces_the_old_reference(tmp_path):
    runs = [
        canned_run(tmp_path / "out", senders=2),
        canned_run(tmp_path / "out", senders=3, fidelity_ok=False),
    ]
    (runs[0] / "huge.parquet").write_bytes(b"x" * (MAX_TABLE_BYTES + 1))
    dest = tmp_path / "reference"
    (dest / "incast-basic" / "stale").mkdir(parents=True)
    target = assemble("incast-basic", runs, dest)

    assert not (target / "stale").exists()  # replaced, not merged
    index = json.loads((target / "summary.json").read_text())
    assert index["command"] == "kvfabric run incast-basic"
    first, second = index["runs"]
    assert [first["label"], second["label"]] == ["senders=2,seed=7", "senders=3,seed=7"]
    assert first["fidelity_ok"] and first["failed_checks"] == []
    assert second["fidelity_ok"] is False and second["failed_checks"] == ["cpu_max_pct"]
    run_summary = json.loads((target / second["summary"]).read_text())
    assert run_summary["metrics"]["fct_ms"]["p50"] == pytest.approx(second["fct_ms"]["p50"])
    kept = target / "runs" / runs[0].name
    assert (kept / "spec.yaml").exists() and (kept / "report.md").exists()
    assert (kept / "flows.parquet").exists() and not (kept / "huge.parquet").exists()
    assert (kept / "plots" / "fct_cdf.png").exists()  # the run's report shows its figures
    text = (target / "report.md").read_text()
    assert text.startswith("# Comparison of 2 runs")
    assert f"(runs/{runs[0].name}/report.md)" in text  # links stay inside the reference
    assert str(tmp_path) not in text and str(tmp_path) not in (kept / "report.md").read_text()
    for link in re.findall(r"\]\(([^)]+)\)", text):
        assert (target / link).exists(), link
    assert not list(dest.glob(".*"))  # no staging directory left


def test_unknown_name_is_refused_before_anything_runs(capsys):
    assert main(["references", "no-such-experiment"]) == 2
    err = capsys.readouterr().err
    assert "no reference experiment 'no-such-experiment'" in err and "link-failure" in err


def test_reports_only_rewrites_a_committed_reference_from_its_tables(tmp_path):
    from experiments.orchestration.reference import REFERENCE_DIR

    dest = tmp_path / "reference"
    shutil.copytree(REFERENCE_DIR / "link-failure", dest / "link-failure")
    (dest / "link-failure" / "report.md").write_text("stale: /tmp/kvfabric-ref-x/run\n")
    target = rewrite_reports("link-failure", dest)
    text = (target / "report.md").read_text()
    assert "/tmp/" not in text and "## Headline" in text
    for run in (target / "runs").iterdir():
        report = (run / "report.md").read_text()
        assert "![Timeline](plots/timeline.png)" in report and (run / "plots/timeline.png").exists()
        for link in re.findall(r"\]\(([^)]+)\)", report):
            assert (run / link).exists(), link
    assert rewrite_reports("no-such-reference", dest) is None


def test_an_unfaithful_run_is_run_again_and_the_discarded_attempt_is_named(tmp_path, monkeypatch):
    from experiments.orchestration import runner
    from experiments.orchestration.reference import regenerate
    from experiments.orchestration.runner import Outcome

    calls: list[list[str]] = []

    def fake_run_spec(spec, runs, out_root):
        calls.append([r.label for r in runs])
        outcomes = []
        for i, _ in enumerate(runs):
            unfaithful = len(calls) == 1 and i == 0  # the first run of the first call
            made = canned_run(tmp_path / "made", senders=2 + i, fidelity_ok=not unfaithful)
            made = made.rename(made.with_name(f"{made.name}-{len(calls)}{i}"))
            outcomes.append(Outcome(made, json.loads((made / "summary.json").read_text())))
        return outcomes

    monkeypatch.setattr(runner, "run_spec", fake_run_spec)
    target = regenerate("incast-basic", tmp_path / "reference", repeat=1, retries=2)
    assert target is not None
    assert len(calls) == 2 and len(calls[1]) == 1  # only the unfaithful run, once more
    index = json.loads((target / "summary.json").read_text())
    assert all(r["fidelity_ok"] for r in index["runs"])
    (gone,) = index["discarded"]
    assert gone["failed"] == {"cpu_max_pct": gone["failed"]["cpu_max_pct"]}
    kept = {p.name for p in (target / "runs").iterdir()}
    assert gone["run_id"] not in kept

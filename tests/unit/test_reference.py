"""The reference assembler: what a committed reference keeps and how it is indexed."""

from __future__ import annotations

import json

import pytest

from experiments.reference import MAX_TABLE_BYTES, assemble, main
from experiments.report import write_report
from tests.unit.test_report import canned_run


def test_assemble_indexes_each_run_and_replaces_the_old_reference(tmp_path):
    runs = [canned_run(tmp_path / "out", senders=2),
            canned_run(tmp_path / "out", senders=3, fidelity_ok=False)]  # fmt: skip
    for run in runs:
        write_report([run])  # the runner writes each run's own report
    (runs[0] / "huge.parquet").write_bytes(b"x" * (MAX_TABLE_BYTES + 1))
    compare = write_report(runs).parent
    dest = tmp_path / "reference"
    (dest / "incast-basic" / "stale").mkdir(parents=True)
    target = assemble("incast-basic", runs, compare, dest)

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
    assert (target / "report.md").read_text() == (compare / "report.md").read_text()
    assert not list(dest.glob(".*"))  # no staging directory left


def test_unknown_name_is_refused_before_anything_runs(capsys):
    assert main(["no-such-experiment"]) == 2
    assert "allowed" in capsys.readouterr().out

"""A committed reference's reports are what the current code writes from its tables:
``kvfabric references --reports-only`` on a copy rewrites the comparison report.md,
every run's report.md and the index summary.json byte for byte. A report that differs
was written by older code (or by hand) and no longer says what its tables say.

Covered: every committed reference whose runs keep each table their summary was
computed from. A run whose table was over ``MAX_TABLE_BYTES`` was committed without it
(its report could not be redrawn the same): that reference is skipped, naming the
tables it lacks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.orchestration.reference import rewrite_reports
from experiments.spec.load import REFERENCE_DIR

pytestmark = pytest.mark.slow

# a table and the summary.json metric that says the run had rows of it
TABLE_OF_METRIC = {
    "flows": "flows",
    "queues": "queue_pkts",
    "links": "links",
    "requests": "serving",
    "tokens": "serving",
}


def _committed() -> list[str]:
    if not REFERENCE_DIR.is_dir():
        return []
    return sorted(d.name for d in REFERENCE_DIR.iterdir() if (d / "runs").is_dir())


def missing_tables(reference: Path) -> list[str]:
    """``run/table.parquet`` of each table a run's summary was computed from but the
    reference does not hold."""
    missing = []
    for run in sorted((reference / "runs").iterdir()):
        metrics = json.loads((run / "summary.json").read_text()).get("metrics") or {}
        for table, metric in TABLE_OF_METRIC.items():
            if metric in metrics and not (run / f"{table}.parquet").exists():
                missing.append(f"{run.name}/{table}.parquet")
    return missing


def _reports(reference: Path) -> dict[str, str]:
    """report.md of the reference and of each run, and the index summary.json (its
    entries are what the handouts quote), by path within the reference."""
    files = [reference / "report.md", *sorted(reference.glob("runs/*/report.md"))]
    files.append(reference / "summary.json")
    return {str(p.relative_to(reference)): p.read_text() for p in files if p.exists()}


# References with a table over reference.MAX_TABLE_BYTES, and so not committed: their
# reports cannot be redrawn from what the checkout holds (kv-tiering, scale-out: every
# run's flows.parquet; dragonfly-adversarial: two runs' queues.parquet, sampled over the
# 28 s a run takes at time dilation 4). Declared, so a reference that loses a table is a
# failure here, not a silent exclusion.
WITHOUT_TABLES = {"dragonfly-adversarial", "kv-tiering", "scale-out"}


def test_only_the_declared_references_lack_the_tables_their_reports_are_drawn_from():
    lacking = {name for name in _committed() if missing_tables(REFERENCE_DIR / name)}
    assert lacking == WITHOUT_TABLES


@pytest.mark.parametrize("name", [n for n in _committed() if n not in WITHOUT_TABLES])
def test_a_committed_reference_report_is_what_its_tables_give(name, tmp_path):
    committed = REFERENCE_DIR / name
    shutil.copytree(committed, tmp_path / name)
    target = rewrite_reports(name, tmp_path)
    assert target is not None
    before, after = _reports(committed), _reports(target)
    assert sorted(after) == sorted(before)
    differ = [rel for rel in before if after[rel] != before[rel]]
    assert not differ, (
        f"{name}: {differ} differ from what `kvfabric references --reports-only {name}`"
        " writes from the committed tables (first lines that differ: "
        + _first_difference(before[differ[0]], after[differ[0]])
        + ")"
    )


def _first_difference(old: str, new: str) -> str:
    for i, (a, b) in enumerate(zip(old.splitlines(), new.splitlines(), strict=False)):
        if a != b:
            return f"line {i + 1}: committed {a!r}, rewritten {b!r}"
    return f"{len(old.splitlines())} vs {len(new.splitlines())} lines"


def test_a_run_without_a_table_its_summary_counts_is_named(tmp_path):
    run = tmp_path / "ref" / "runs" / "20261130-1"
    run.mkdir(parents=True)
    metrics = {"flows": {"total": 3}, "serving": {"requests": 2}, "queue_pkts": {}}
    (run / "summary.json").write_text(json.dumps({"metrics": metrics}))
    for table in ("flows", "queues", "requests"):
        (run / f"{table}.parquet").write_bytes(b"")
    assert missing_tables(tmp_path / "ref") == ["20261130-1/tokens.parquet"]

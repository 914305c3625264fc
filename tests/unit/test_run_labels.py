"""Rows of a comparison are labelled by what differs between the runs: never two alike."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from experiments.cli.main import main
from experiments.output.results import load_run
from experiments.output.run_labels import differing_keys, distinct_labels, flat_spec


def _run(root: Path, experiment: str, run_id: str, label: str | None, buffer: int) -> Path:
    """A hand-made run directory: its summary and spec, no tables."""
    path = root / experiment / run_id
    path.mkdir(parents=True)
    summary = {
        "experiment": experiment,
        "run_id": run_id,
        "label": label,
        "fidelity": {"ok": True, "checks": {}},
        "metrics": {"fct_ms": {"count": 40, "p50": 2.0 * buffer, "p99": 3.0 * buffer}},
    }
    (path / "summary.json").write_text(json.dumps(summary))
    spec = {
        "name": experiment,
        "seed": 7,
        "fabric": {"kind": "spine_leaf", "spines": 1, "buffer_pkts": buffer},
        "workloads": [{"kind": "incast", "senders": 8}],
    }
    (path / "spec.yaml").write_text(yaml.safe_dump(spec))
    return path


def test_a_spec_flattens_to_dotted_keys():
    flat = flat_spec({"fabric": {"buffer_pkts": 64, "shape": [4, 4]}, "workloads": [{"k": 1}]})
    assert flat == {"fabric.buffer_pkts": "64", "fabric.shape": "[4, 4]", "workloads.0.k": "1"}
    assert differing_keys([{"a": "1", "b": "2"}, {"a": "1", "b": "3"}, {"a": "1"}]) == ["b"]


def test_runs_of_one_spec_with_the_same_label_are_told_apart_by_the_key_that_differs(tmp_path):
    runs = [
        load_run(_run(tmp_path, "incast-collapse", "a", "senders=8,seed=7", 64)),
        load_run(_run(tmp_path, "incast-collapse", "b", "senders=8,seed=7", 16)),
    ]
    assert distinct_labels(runs) == ["fabric.buffer_pkts=64", "fabric.buffer_pkts=16"]


def test_runs_of_different_experiments_are_labelled_by_experiment(tmp_path):
    runs = [
        load_run(_run(tmp_path, "incast-collapse", "a", None, 64)),
        load_run(_run(tmp_path, "kv-tiering", "a", None, 64)),  # same run id, same spec keys
    ]
    assert distinct_labels(runs) == ["experiment=incast-collapse", "experiment=kv-tiering"]


def test_runs_nothing_tells_apart_get_their_run_ids(tmp_path):
    runs = [load_run(_run(tmp_path, "x", rid, "same", 64)) for rid in ("r1", "r2")]
    assert distinct_labels(runs) == ["run r1", "run r2"]
    assert distinct_labels([runs[0], runs[0]]) == ["run r1 (1)", "run r1 (2)"]


def test_a_sweeps_own_labels_are_kept(tmp_path):
    runs = [
        load_run(_run(tmp_path, "x", "a", "buffer=16", 16)),
        load_run(_run(tmp_path, "x", "b", "buffer=64", 64)),
    ]
    assert distinct_labels(runs) == ["buffer=16", "buffer=64"]


def test_the_comparison_report_and_its_json_rows_use_the_distinct_labels(tmp_path, capsys):
    a = _run(tmp_path, "incast-collapse", "a", "senders=8,seed=7", 64)
    b = _run(tmp_path, "incast-collapse", "b", "senders=8,seed=7", 16)
    out = tmp_path / "cmp"
    assert main(["report", str(a), str(b), "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["report"] == str(out / "report.md")
    rows = printed["rows"]
    assert [r["label"] for r in rows] == ["fabric.buffer_pkts=64", "fabric.buffer_pkts=16"]
    assert [r["FCT, all flows p50"] for r in rows] == [128.0, 32.0]
    text = (out / "report.md").read_text()
    assert "| fabric.buffer_pkts=64 |" in text and "| fabric.buffer_pkts=16 |" in text
    assert "senders=8,seed=7" not in text

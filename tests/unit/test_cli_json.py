"""``--json`` where results are printed: ``list``, ``run --dry-run`` and ``report``
print one JSON document on stdout (``report --json``: test_run_labels), the exit code
unchanged; the human output stays the default."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from experiments.cli.main import main
from experiments.spec.load import bundled_names

ROOT = Path(__file__).resolve().parents[2]


def test_list_as_json_names_every_bundled_spec_with_its_files(capsys):
    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in listed] == list(bundled_names())
    incast = next(row for row in listed if row["name"] == "incast-collapse")
    assert incast["topic"] and (ROOT / incast["spec"]).is_file()
    assert (ROOT / incast["handout"]).is_file() and (ROOT / incast["reference"]).is_dir()
    assert main(["list"]) == 0 and "bundled experiments" in capsys.readouterr().out


def test_a_dry_run_as_json_is_the_plan_of_every_sweep_point(capsys):
    assert main(["run", "incast-basic", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["experiment"] == "incast-basic" and plan["exit_code"] == 0
    assert [r["label"] for r in plan["runs"]] == [
        "senders=1,seed=7",
        "senders=3,seed=7",
        "senders=7,seed=7",
    ]
    first = plan["runs"][0]
    figures = {f["name"]: f for f in first["figures"]}
    assert figures["switch_hop_mbps"]["unit"] == "Mbit/s" and figures["switch_hop_mbps"]["fits"]
    assert first["dilation"]["d"] == 1 and first["dilation"]["wall_s"] == 20
    assert plan["wall_s"] == sum(r["dilation"]["wall_s"] for r in plan["runs"])
    assert first["warnings"] == {"transport": [], "does_nothing": []}


def test_a_dry_run_as_json_carries_its_warnings(tmp_path, capsys):
    spec = tmp_path / "quiet.yaml"
    spec.write_text("name: quiet\nduration_s: 2\nfabric: {kind: spine_leaf}\nworkloads: []\n")
    assert main(["run", str(spec), "--dry-run", "--json", "--set", "scale.time_dilation=4"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert any(line.startswith("workloads: empty") for line in run["warnings"]["does_nothing"])
    assert run["dilation"]["d"] == 4
    assert any("congestion control cubic" in line for line in run["warnings"]["transport"])


def test_a_dry_run_as_json_keeps_the_refusal_exit_code(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(tmp_path / "no-envelope.json"))  # the default
    # serving-basic's layer-pipelined KV peaks at 1.4x the default envelope's messages at d=1
    at_1 = ["run", "serving-basic", "--dry-run", "--json", "--set", "scale.time_dilation=1"]
    assert main(at_1) == 3
    plan = json.loads(capsys.readouterr().out)
    assert plan["exit_code"] == 3 and plan["runs"][0]["over_envelope"]
    figures = {f["name"]: f for f in plan["runs"][0]["figures"]}
    assert not figures["messages_per_s"]["fits"]
    assert main([*at_1, "--force"]) == 0
    assert json.loads(capsys.readouterr().out)["exit_code"] == 0


def test_report_as_json_gives_the_report_and_one_row_per_run(tmp_path, capsys):
    run = tmp_path / "incast-collapse" / "20250101-000000-7"
    run.mkdir(parents=True)
    summary = {
        "experiment": "incast-collapse",
        "label": "senders=8,seed=7",
        "fidelity": {"ok": True, "checks": {}},
        "metrics": {"fct_ms": {"count": 400, "p50": 2.5, "p99": 9.0}, "drops": {"total": 3}},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(run), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["report"] == str(run / "report.md") and Path(printed["html"]).is_file()
    (row,) = printed["rows"]
    assert row["label"] == "senders=8,seed=7" and row["fidelity"] == "OK"
    assert row["FCT, all flows p50"] == 2.5 and row["FCT, all flows p99"] == 9.0
    assert row["FCT, all flows n"] == 400  # a p99 is given only where n supports it
    assert row["drops"] == 3 and row["path"] == str(run)
    assert main(["report", str(run)]) == 0  # without --json: the path alone, as before
    assert capsys.readouterr().out.strip() == str(run / "report.md")


def test_a_run_as_json_gives_each_outcome_and_keeps_stdout_for_the_json(
    monkeypatch, tmp_path, capsys
):
    import experiments.orchestration.runner as runner

    spec = tmp_path / "one.yaml"
    spec.write_text("name: one\nduration_s: 2\nfabric: {kind: spine_leaf}\nworkloads: []\n")
    run_dir = tmp_path / "results" / "one" / "20250101-000000-1"
    summary = {
        "label": "seed=1",
        "fidelity": {"ok": True},
        "metrics": {"fct_ms": {"count": 1, "p50": 2.5, "p99": 2.5}},
    }

    def ran(spec, runs, out, **kwargs):
        assert "progress" not in kwargs  # no progress bar on stdout
        return [SimpleNamespace(path=run_dir, summary=summary, ok=True)]

    monkeypatch.setattr(runner, "run_spec", ran)
    assert main(["run", str(spec), "--json", "--out", str(tmp_path / "results")]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert printed["exit_code"] == 0 and printed["planned_runs"] == 1
    (row,) = printed["runs"]
    assert row["state"] == "done" and row["faithful"] is True
    assert row["report"] == str(run_dir / "report.md") and row["metrics"]["fct_ms p50"] == 2.5
    assert "workloads: empty" in err  # the warning still said, on stderr

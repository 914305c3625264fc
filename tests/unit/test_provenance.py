"""Provenance: every run names the kvfabric and the spec it comes from (#29)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from experiments.cli.main import main
from experiments.orchestration import provenance as prov
from experiments.output.formatting import revision_text
from experiments.output.report import write_report
from experiments.output.results import write_json
from experiments.spec.load import expand, find_bundled, load_spec, resolved_yaml, spec_sha256
from tests.unit.test_report import canned_run

SHA = "5e" * 32


def test_the_spec_hash_is_of_the_resolved_spec_whatever_its_yaml_looked_like():
    (run,) = expand(load_spec(find_bundled("incast-basic"), ["sweep={}"]))
    again = load_spec(resolved_yaml(run))  # the resolved spec written out and read back
    assert spec_sha256(again) == spec_sha256(run) and len(spec_sha256(run)) == 64
    (other,) = expand(load_spec(find_bundled("incast-basic"), ["sweep={}"], seed=99))
    assert spec_sha256(other) != spec_sha256(run)


def test_provenance_names_version_revision_spec_envelope_kernel_and_machine():
    envelope = {"source": "default envelope", "calibrated": False}
    p = prov.provenance(SHA, envelope)
    keys = {"kvfabric_version", "git_revision", "git_dirty", "spec_sha256", "envelope"}
    assert keys | {"kernel", "machine"} <= set(p)
    assert p["spec_sha256"] == SHA and p["envelope"] == envelope
    assert p["kernel"] and p["machine"]
    json.dumps(p)  # summary.json and env.json are strict JSON


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_state_of_this_checkout_and_of_a_folder_that_is_none(tmp_path):
    here = prov.git_state()
    if here["git_revision"] is not None:  # the tests run from a checkout
        assert len(here["git_revision"]) == 40 and here["git_dirty"] in (True, False)
    assert prov.git_state(tmp_path) == {"git_revision": None, "git_dirty": None}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert prov.git_state(tmp_path) == {"git_revision": None, "git_dirty": None}  # no commit


def test_without_git_the_revision_is_unknown_not_an_error(monkeypatch):
    monkeypatch.setattr(prov.shutil, "which", lambda name: None)
    assert prov.git_state() == {"git_revision": None, "git_dirty": None}
    prov.loaded_state.cache_clear()  # the process's state is taken once, at its first run
    try:
        assert prov.provenance(SHA)["git_revision"] is None
    finally:
        prov.loaded_state.cache_clear()
    assert prov.version_line().endswith("git revision unknown")


def test_revision_text():
    made = {"kvfabric_version": "0.1.0", "git_revision": "0123456789abcdef" * 2}
    assert revision_text(made | {"git_dirty": False}) == "kvfabric 0.1.0, git 0123456789ab"
    assert revision_text(made | {"git_dirty": True}).endswith("(uncommitted changes)")
    assert revision_text(None) == "kvfabric (version and git revision not recorded)"


def test_kvfabric_version_prints_version_and_revision(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("kvfabric ") and "git" in out
    git = prov.git_state()
    if git["git_revision"]:
        assert git["git_revision"][:12] in out


def test_the_report_names_the_revision_in_its_header(tmp_path):
    run_dir = canned_run(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["provenance"] = prov.provenance(SHA) | {
        "kvfabric_version": "0.1.0",
        "git_revision": "feedface" * 5,
        "git_dirty": False,
    }
    write_json(run_dir, "summary", summary)
    lines = write_report([run_dir]).read_text().splitlines()
    assert lines[2] == f"Made by kvfabric 0.1.0, git feedfacefeed; spec sha256 {SHA[:12]}."


def test_a_repeated_point_s_report_shows_the_spread_across_seeds(tmp_path):
    from experiments.analysis.repeats import repeats_block

    run_dir = canned_run(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    others = [
        summary | {"seed": s, "run_id": f"r{s}", "metrics": {"ttft_ms": {"p50": v}}}
        for s, v in ((8, 70.0), (9, 80.0))
    ]
    summary["repeats"] = repeats_block([summary, *others])
    write_json(run_dir, "summary", summary)
    text = write_report([run_dir]).read_text()
    assert "## Across seeds" in text and "seeds 7, 8, 9" in text
    assert "| ttft_ms.p50 | 60, 70, 80 | 70 |" in text  # then the interval and CV 0.1429
    assert text.split("| ttft_ms.p50 |")[1].splitlines()[0].endswith("| 0.1429 |")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_regenerated_results_do_not_make_the_checkout_dirty_but_code_does(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "report.md").write_text("old\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    (tmp_path / "results" / "report.md").write_text("regenerated\n")
    assert prov.git_state(tmp_path)["git_dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert prov.git_state(tmp_path)["git_dirty"] is True

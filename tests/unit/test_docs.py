"""The documentation (issue 31): the MkDocs site builds with ``--strict`` (a broken
link, a page left out of the navigation or a generated page that fails is an error),
its references are generated from the declarations they describe, every handout is
in it, and the README stays what it is: at most 1,500 words, linking into the site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments.cli.main import _parser
from experiments.cli.reference import PYTHON_API, cli_markdown, subcommands

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_WORDS = 1500
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_builds_strict_with_every_section(site: Path) -> None:
    for page in (
        "getting-started",
        "concepts/modelling-gap",
        "concepts/time-dilation",
        "how-to/write-a-spec",
        "how-to/several-machines",
        "reference/spec",
        "reference/cli",
        "reference/python",
        "benchmarks",
        "benchmarks/suite",
        "reference-results",
        "troubleshooting",
    ):
        assert (site / page / "index.html").is_file(), page
    # each page its own: the measurements are not overwritten by the suite's README
    assert "Benchmarks and measurements" in (site / "benchmarks" / "index.html").read_text()


def test_every_handout_is_a_page_of_the_site(site: Path) -> None:
    nav = yaml.safe_load(re.sub(r"!!python/name:\S+", "''", (ROOT / "mkdocs.yml").read_text()))[
        "nav"
    ]
    listed = set(re.findall(r"experiments/[\w-]+\.md", str(nav)))
    for handout in (ROOT / "experiments" / "handouts").glob("*.md"):
        name = "index" if handout.name == "README.md" else handout.stem
        assert f"experiments/{name}.md" in listed, f"{handout.name} is not in mkdocs.yml's nav"
        html = (site / "experiments" / ("" if name == "index" else name) / "index.html").read_text()
        title = handout.read_text().splitlines()[0].lstrip("# ").strip()
        assert title.split()[0] in html


def test_the_cli_reference_names_every_command_and_flag(site: Path) -> None:
    """Generated from the parsers: a flag another change adds shows without a docs edit."""
    html = (site / "reference" / "cli" / "index.html").read_text()
    text = cli_markdown()
    parser = _parser()
    for name, (sub, _) in subcommands(parser).items():
        assert f"kvfabric {name}" in text
        for nested in subcommands(sub):
            assert f"kvfabric {name} {nested}" in text
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in ("-h", "--help") or f"`{flag}" in text, f"kvfabric {name} {flag}"
    assert "--dry-run" in html and "kvfabric topo show" in html


def test_the_python_api_reference_has_every_object_a_script_uses(site: Path) -> None:
    html = (site / "reference" / "python" / "index.html").read_text()
    for module, names in PYTHON_API.items():
        for name in names:
            assert f"{module}.{name}" in html
    assert "wait_ready" in html  # a method, with its signature
    how_to = (ROOT / "docs" / "how-to" / "python.md").read_text()
    used = set(re.findall(r"^from ([\w.]+) import (.+)$", how_to, flags=re.M))
    for module, names in used:
        if module.split(".")[0] not in ("topologies", "controller", "traffic", "experiments"):
            continue
        for name in (n.strip() for n in names.split(",")):
            assert name in PYTHON_API.get(module, ()), f"{module}.{name} is not in PYTHON_API"


def test_the_spec_reference_is_the_schemas(site: Path) -> None:
    html = (site / "reference" / "spec" / "index.html").read_text()
    for key in ("scale.time_dilation", "controller.policy", "fabric[kind=fat_tree].k"):
        assert key in html


def test_the_readme_is_short_and_links_into_the_site() -> None:
    text = README.read_text()
    words = len(text.split())
    assert words <= MAX_README_WORDS, f"README.md has {words} words (at most {MAX_README_WORDS})"
    targets = [m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)]
    assert sum(t.startswith("docs/") for t in targets) >= 10
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to what does not exist: {missing}"


def test_the_licence_is_the_declared_one() -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    assert declared == {"text": "Apache-2.0"}
    assert "Apache License" in (ROOT / "LICENSE").read_text().splitlines()[1]

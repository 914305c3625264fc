"""Ruff is the one judge of style: the tree is lint-clean and formatted as configured in
pyproject.toml (the generated ``experiments/spec/config.py`` is excluded there), and no
line pins its own formatting with a ``fmt: skip`` or ``fmt: off`` comment: formatting
is decided once, for the whole tree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("topologies", "controller", "traffic", "experiments", "benchmarks", "tests")
PIN = re.compile(r"#\s*fmt:\s*(skip|off)\b")


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("command", [("check", "."), ("format", "--check", ".")])
def test_ruff_passes(command: tuple[str, ...]) -> None:
    done = ruff(*command)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_line_pins_its_own_formatting() -> None:
    pinned = [
        f"{p.relative_to(ROOT)}:{i}"
        for folder in FOLDERS
        for p in sorted((ROOT / folder).rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if PIN.search(line) and p.name != "test_lint.py"
    ]
    assert not pinned, "formatting pinned by hand (let ruff format decide): " + ", ".join(pinned)

"""The packages' import arrows point one way: topologies ← controller ← experiments and
topologies ← traffic ← experiments; controller and traffic do not know each other and
nothing imports experiments. Parsed from the source (every import statement, also those
inside functions), so a wrong arrow fails here before it becomes a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topologies", "controller", "traffic", "experiments")
ALLOWED = {
    "topologies": {"topologies"},
    "controller": {"controller", "topologies"},
    "traffic": {"traffic", "topologies"},
    "experiments": set(PACKAGES),
}


def imported_packages(source: str, package: str) -> dict[str, int]:
    """Our top-level packages a module of ``package`` imports, each with the first
    line that does."""
    tree = ast.parse(source)
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [package] if node.level else [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in PACKAGES:
                found.setdefault(top, node.lineno)
    return found


def modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_layers(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    wrong = {pkg: line for pkg, line in imported_packages(path.read_text(), package).items()
             if pkg not in ALLOWED[package]}  # fmt: skip
    assert not wrong, f"{path.relative_to(ROOT)} imports " + ", ".join(
        f"{pkg} (line {line})" for pkg, line in wrong.items())  # fmt: skip


def test_the_parser_sees_a_wrong_arrow() -> None:
    """The check above is only as good as its parser: an import hidden in a
    function body, a plain ``import``, and a relative one are all seen."""
    src = "def f():\n    from experiments.cli import main\n\nfrom .x import y\nimport traffic.x\n"
    assert imported_packages(src, "topologies") == {"experiments": 2, "topologies": 4, "traffic": 5}

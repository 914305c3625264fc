"""The packages' import arrows point one way: topologies ← controller ← experiments and
topologies ← traffic ← experiments; controller and traffic do not know each other and
no package imports experiments. Inside experiments the command line is the top room:
nothing else imports ``experiments.cli``, and only it may reach the checkout's
``benchmarks`` (which import everything but the command line). Parsed from the source
(every import statement, also those inside functions), so a wrong arrow fails here
before it becomes a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topologies", "controller", "traffic", "experiments", "benchmarks")
ALLOWED = {
    "topologies": {"topologies"},
    "controller": {"controller", "topologies"},
    "traffic": {"traffic", "topologies"},
    "experiments": {"topologies", "controller", "traffic", "experiments"},
    "benchmarks": set(PACKAGES),
}
CLI = "experiments.cli"


def imported_modules(source: str, module: str) -> dict[str, int]:
    """The modules of ours that ``module`` (dotted, e.g. ``experiments.cli.run``; a
    package's ``__init__`` is the package itself) imports, ``from m import x`` counted as
    ``m.x`` too since x may be a module, each with the first line that does."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                parts = module.split(".")[: -node.level]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                found.setdefault(name, node.lineno)
    return found


def imported_packages(source: str, module: str) -> dict[str, int]:
    """Our top-level packages ``module`` imports, with the first line."""
    found: dict[str, int] = {}
    for name, line in imported_modules(source, module).items():
        top = name.split(".")[0]
        found[top] = min(line, found.get(top, line))
    return found


def _in_cli(path: Path) -> bool:
    return path.relative_to(ROOT).parts[:2] == ("experiments", "cli")


def dotted(path: Path) -> str:
    """The module's dotted name; for an ``__init__`` a child of the package, so that
    relative imports resolve from the package itself."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_layers(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    allowed = ALLOWED[package] | ({"benchmarks"} if _in_cli(path) else set())
    wrong = {pkg: line for pkg, line in imported_packages(path.read_text(), dotted(path)).items()
             if pkg not in allowed}  # fmt: skip
    assert not wrong, f"{path.relative_to(ROOT)} imports " + ", ".join(
        f"{pkg} (line {line})" for pkg, line in wrong.items())  # fmt: skip


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_command_line_imports_the_command_line(path: Path) -> None:
    rel = path.relative_to(ROOT)
    if _in_cli(path):
        return
    up = {m: line for m, line in imported_modules(path.read_text(), dotted(path)).items()
          if m == CLI or m.startswith(CLI + ".")}  # fmt: skip
    assert not up, f"{rel} imports the command line: {up}"


def test_the_parser_sees_a_wrong_arrow() -> None:
    """The check above is only as good as its parser: an import hidden in a
    function body, a plain ``import``, and a relative one are all seen."""
    src = "def f():\n    from experiments.cli import main\n\nfrom .x import y\nimport traffic.x\n"
    got = imported_packages(src, "topologies.builder")
    assert got == {"experiments": 2, "topologies": 4, "traffic": 5}
    assert "experiments.cli.main" in imported_modules(src, "topologies.builder")
    up = imported_modules("from ..cli import run\n", "experiments.orchestration.runner")
    assert "experiments.cli.run" in up  # a relative import of the command line is seen

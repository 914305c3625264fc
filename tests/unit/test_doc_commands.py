"""Every command line written in the README, the docs site's pages, the experiment
handouts and the benchmarks' README works as written (issue 31): a command that
fails as written cannot ship.

A command is a line of a fenced code block that starts with ``kvfabric``,
``.venv/bin/kvfabric`` or ``make`` (each possibly after ``sudo``), with its ``\\``
continuations and quoted values that run on over lines. What it needs decides how
it is checked, without root:

- without ``sudo``: it runs here, in-process, and must exit 0 (or the exit code its
  own comment says, ``# ... exit 3``); a ``--out`` is pointed at a scratch folder so
  nothing is written into the checkout;
- with ``sudo``: ``run`` and ``demo`` run as ``--dry-run`` (the spec checked, every
  run planned against the envelope, nothing built); anything else is parsed by the
  ``kvfabric`` command's own parser;
- ``make``: its target is one of the Makefile's;
- a command whose comment says it ``needs`` something this machine lacks (``# needs
  the trace``: a file to download) is parsed only.

A command written as a synopsis (``<run-id>``, ``[--quick]``, ``NAME ...``) fails:
write one that runs."""

from __future__ import annotations

import re
import shlex
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from experiments.cli.main import _parser, main

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "benchmarks" / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "experiments" / "handouts").glob("*.md"),
    ]
)
FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)")
NOT_SHELL = {"yaml", "yml", "python", "json", "mermaid", "toml", "text"}
COMMAND = re.compile(r"^(sudo\s+)?((\S*/)?kvfabric|make)(\s|$)")
SYNOPSIS = re.compile(r"^(<.*>|\[.*|.*\]|\.\.\.|.*\.\.\.|SPEC|NAME|RUN_DIR)$")
# What may only run as root for real (anything else without sudo runs here).
NEEDS_ROOT = {"run", "demo", "cli", "calibrate", "clean", "cluster", "bench", "references"}
WRITES_CHECKOUT = {"references"}  # rewrites results/reference/: parsed, never run here


@dataclass(frozen=True)
class Command:
    where: str  # file:line
    argv: tuple[str, ...]  # after sudo and the program
    sudo: bool
    program: str  # kvfabric or make
    comment: str

    def __str__(self) -> str:
        return f"{self.where}: {'sudo ' if self.sudo else ''}{self.program} {' '.join(self.argv)}"


def commands_in(path: Path) -> list[Command]:
    """Every command line in ``path``'s fenced shell (or unlabelled) blocks."""
    found: list[Command] = []
    lines = path.read_text().splitlines()
    fence: str | None = None
    shell = False
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = FENCE.match(line)
        if opened and fence is None:
            fence, shell = opened.group(1), opened.group(2).lower() not in NOT_SHELL
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is not None and shell and COMMAND.match(line.strip()):
            start, text = i, line.strip()
            while text.endswith("\\") or not _complete(text):
                i += 1
                text = text.rstrip("\\").rstrip() + " " + lines[i].strip()
            found.append(_command(f"{path.relative_to(ROOT)}:{start + 1}", text))
        i += 1
    return found


def _complete(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:  # a quoted value running on to the next line
        return False
    return True


def _command(where: str, text: str) -> Command:
    tokens = shlex.split(text, comments=True)
    sudo = tokens[0] == "sudo"
    program = tokens[1 if sudo else 0]
    return Command(
        where,
        tuple(tokens[2 if sudo else 1 :]),
        sudo,
        "make" if program == "make" else "kvfabric",
        _comment(text),
    )


def _comment(text: str) -> str:
    """The shell comment ending ``text`` (a ``#`` outside quotes), or ''."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[i + 1 :].strip()
    return ""


ALL = [c for page in PAGES for c in commands_in(page)]


def test_the_pages_have_commands_to_check() -> None:
    where = {c.where.split(":")[0] for c in ALL}
    assert "README.md" in where and "docs/getting-started.md" in where
    assert any(w.startswith("experiments/handouts/") for w in where)
    assert len(ALL) > 40


def test_a_command_split_over_lines_is_read_whole() -> None:
    text = (
        "```\n"
        "sudo kvfabric run link-failure --set sweep={} \\\n"
        "  --set 'faults=[{at_s: 3,\n"
        "  link_down: [rail1, spine0]}]'  # BFD, exit 1\n"
        "tshark -r run.pcap\n"
        "```\n"
        "```yaml\nkvfabric: not a command\n```\n"
    )
    page = ROOT / "tests" / "unit" / "_page.md"
    try:
        page.write_text(text)
        (found,) = commands_in(page)
    finally:
        page.unlink()
    assert found.sudo and found.argv[:2] == ("run", "link-failure")
    assert found.argv[-1] == "faults=[{at_s: 3, link_down: [rail1, spine0]}]"
    assert found.comment == "BFD, exit 1"


@pytest.mark.parametrize("command", ALL, ids=str)
def test_command_works_as_written(
    command: Command, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synopsis = [t for i, t in enumerate(command.argv) if _placeholder(command.argv, i)]
    assert not synopsis, f"{command}: a synopsis, not a command ({synopsis}): write one that runs"
    if command.program == "make":
        (target,) = command.argv or ("help",)
        assert target in _make_targets(), f"{command}: no Makefile target {target!r}"
        return
    monkeypatch.chdir(ROOT)
    subcommand = command.argv[0] if command.argv else ""
    if command.sudo:
        if subcommand in ("run", "demo"):
            code = _run([*command.argv, *([] if "--dry-run" in command.argv else ["--dry-run"])])
            assert code == _expected(command), f"{command} as --dry-run: exit {code}"
        else:
            _parses(command)
        return
    assert subcommand not in NEEDS_ROOT or "--dry-run" in command.argv, (
        f"{command}: needs root, so write it with sudo (or as --dry-run)"
    )
    if subcommand in WRITES_CHECKOUT or re.search(r"\bneeds\b", command.comment):
        _parses(command)
        return
    code = _run(_scratch_out(command.argv, tmp_path))
    assert code == _expected(command), f"{command}: exit {code}"


def _placeholder(argv: tuple[str, ...], i: int) -> bool:
    after_set = i > 0 and argv[i - 1] == "--set"
    return not after_set and bool(SYNOPSIS.match(argv[i]))


def _expected(command: Command) -> int:
    said = re.search(r"\bexit ([0-9])\b", command.comment)
    return int(said.group(1)) if said else 0


def _scratch_out(argv: tuple[str, ...], tmp_path: Path) -> list[str]:
    """``argv`` with any ``--out`` written into ``tmp_path`` instead."""
    out = list(argv)
    for i, token in enumerate(out[:-1]):
        if token == "--out":
            out[i + 1] = str(tmp_path / "out")
    return out


_EXITS: dict[tuple[str, ...], int] = {}  # a command written on several pages runs once


def _run(argv: list[str]) -> int:
    key = tuple(argv)
    if key not in _EXITS:
        handler = signal.getsignal(signal.SIGTERM)
        try:
            _EXITS[key] = main(argv)
        except SystemExit as exc:  # argparse: --help (0) or a bad argument (2)
            _EXITS[key] = int(exc.code or 0)
        finally:
            signal.signal(signal.SIGTERM, handler)
    return _EXITS[key]


def _parses(command: Command) -> None:
    try:
        _parser().parse_args(list(command.argv))
    except SystemExit as exc:
        pytest.fail(f"{command}: the kvfabric parser rejects it (exit {exc.code})")


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w.-]+):", text, flags=re.M))

"""Counts the documentation states about the committed references, stamped from the
references themselves instead of typed (a typed "34 runs and nine experiments" outlived
the references it counted).

A count in a Markdown file is marked ``<!-- count:NAME -->VALUE<!-- /count -->`` (the
markers render as nothing); :func:`stamp` rewrites every VALUE from :func:`counts_of`.
``kvfabric references`` stamps :data:`STAMPED` after it replaces references, and a unit
test fails when a committed file's counts are stale.

Counts (numerals, so a count is never spelled two ways):

- ``experiments``: committed references (one per bundled experiment with a handout);
- ``other-experiments``: that less one (the flagship's "N more");
- ``runs``: runs over all committed references;
- ``faithful-runs``: ``F of N``, the runs whose fidelity verdict passed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["STAMPED", "counts_of", "read_counts", "stamp", "stamp_files"]

ROOT = Path(__file__).resolve().parents[2]
STAMPED = (
    "README.md",
    "docs/index.md",
    "docs/getting-started.md",
    "docs/reference-results.md",
    "experiments/handouts/README.md",
)
MARKED = re.compile(r"<!-- count:([a-z-]+) -->(.*?)<!-- /count -->")


def counts_of(references: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    """The counts of ``references``: experiment name → its runs' summary.json."""
    runs = [run for summaries in references.values() for run in summaries]
    faithful = sum(bool((run.get("fidelity") or {}).get("ok")) for run in runs)
    return {
        "experiments": str(len(references)),
        "other-experiments": str(max(len(references) - 1, 0)),
        "runs": str(len(runs)),
        "faithful-runs": f"{faithful} of {len(runs)}",
    }


def read_counts(reference_dir: Path) -> dict[str, str]:
    """:func:`counts_of` the references committed under ``reference_dir``."""
    references = {
        d.name: [json.loads(p.read_text()) for p in sorted(d.glob("runs/*/summary.json"))]
        for d in sorted(reference_dir.iterdir())
        if (d / "runs").is_dir()
    }
    return counts_of(references)


def stamp(text: str, counts: Mapping[str, str]) -> str:
    """``text`` with every marked count rewritten from ``counts``; an unknown count name
    is refused (a typo would otherwise keep its typed value)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in counts:
            raise ValueError(f"unknown count {name!r}; known: {', '.join(sorted(counts))}")
        return f"<!-- count:{name} -->{counts[name]}<!-- /count -->"

    return MARKED.sub(value, text)


def stamp_files(reference_dir: Path, root: Path = ROOT) -> list[Path]:
    """Stamp :data:`STAMPED` under ``root`` from ``reference_dir``; the files changed."""
    counts = read_counts(reference_dir)
    changed = []
    for rel in STAMPED:
        path = root / rel
        text = path.read_text()
        stamped = stamp(text, counts)
        if stamped != text:
            path.write_text(stamped)
            changed.append(path)
    return changed

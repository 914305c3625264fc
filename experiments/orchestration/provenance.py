"""Where a run's numbers come from: the kvfabric version, the git revision and whether
the checkout had uncommitted changes, the hash of the resolved spec (``spec_sha256``),
the envelope that judged the run, the kernel and the machine. ``env.json`` and
``summary.json`` carry it (``summary.json`` as its ``provenance`` block), so "this run
predates the fix" can be checked, and ``kvfabric --version`` prints the first two.

Never fails a run: a kvfabric that is not installed has version ``None``; outside a git
checkout, or without git, the revision and the dirty flag are ``None`` (unknown, which is
not "clean").
"""

from __future__ import annotations

import functools
import platform
import shutil
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from experiments.output.formatting import revision_text

CHECKOUT = Path(__file__).resolve().parents[2]


def kvfabric_version() -> str | None:
    """The installed distribution's version, ``None`` when kvfabric is not installed."""
    try:
        return metadata.version("kvfabric")
    except metadata.PackageNotFoundError:
        return None


def _git(root: Path, *args: str) -> str | None:
    """A git command's output in ``root``; ``None`` if git is missing or refuses (not a
    checkout, a checkout owned by another user as a root run sees it)."""
    if shutil.which("git") is None:
        return None
    command = ["git", "-c", f"safe.directory={root}", "-C", str(root), *args]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(root: Path = CHECKOUT) -> dict[str, Any]:
    """``{"git_revision": sha or None, "git_dirty": bool or None}`` of the checkout at
    ``root``; dirty means tracked files other than results (``results/``: the committed
    references, which a regeneration rewrites) differ from the revision."""
    revision = _git(root, "rev-parse", "HEAD")
    if revision is None:
        return {"git_revision": None, "git_dirty": None}
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results")
    return {
        "git_revision": revision.strip() or None,
        "git_dirty": None if status is None else bool(status.strip()),
    }


@functools.cache
def loaded_state() -> dict[str, Any]:
    """The checkout's git state when this process first asked: the code it runs was
    loaded then, so a commit made while a long command (``kvfabric references``) is
    running does not relabel its later runs."""
    return git_state()


def provenance(spec_hash: str | None, envelope: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What env.json and summary.json say of where a run comes from; ``spec_hash``: the
    resolved spec's (``experiments.spec.load.spec_sha256``)."""
    return {
        "kvfabric_version": kvfabric_version(),
        **loaded_state(),
        "spec_sha256": spec_hash,
        "envelope": dict(envelope) if envelope is not None else None,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "hostname": platform.node(),
    }


def version_line() -> str:
    """What ``kvfabric --version`` prints: this kvfabric's version and git revision."""
    return revision_text({"kvfabric_version": kvfabric_version(), **git_state()})

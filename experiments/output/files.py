"""Writing a run's files: every file is written to a temporary name in the same directory,
flushed, then renamed over the final name (``os.replace``), so a crash or Ctrl-C never
leaves a half-written table or summary. The bottom of ``experiments.output``: ``results``
and ``chunks`` both write through it."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd

__all__ = ["ResultsError", "atomic_write", "file_name", "write_table"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ResultsError(Exception):
    """A results directory cannot be created, written or read; the message says which
    path and why."""


def write_table(run_dir: Path, name: str, df: pd.DataFrame) -> Path:
    """Write ``df`` to ``run_dir/<name>.parquet`` atomically; returns the path.

    ``name`` is a table name such as ``flows`` (a ``.parquet`` suffix is accepted). The
    index is not stored. Object columns that mix ``None`` and strings are kept as is.
    """
    path = Path(run_dir) / file_name(name, ".parquet")
    atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False, engine="pyarrow"))
    return path


def check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
        raise ResultsError(
            f"{what} {name!r} must be a plain file name (letters, digits, '_', '.', '-')"
        )


def file_name(name: str, suffix: str) -> str:
    stem = name[: -len(suffix)] if name.endswith(suffix) else name
    check_name(stem, "results file name")
    return stem + suffix


def atomic_write(path: Path, write: Callable[[str], object]) -> None:
    """Call ``write(tmp)`` on a temporary file next to ``path``, fsync it, then rename it
    over ``path``; the temporary file is removed if anything fails."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ResultsError(f"cannot write {path}: {exc.strerror or exc}") from exc
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise ResultsError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise

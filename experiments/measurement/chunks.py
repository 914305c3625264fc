"""Saving a table while it grows, so a run that is killed keeps what it had recorded:
the writing side of a run's chunks (reading them back and compacting them into the
run's tables: :mod:`experiments.output.chunks`).

    writer = ChunkWriter(run_dir, "queues")
    writer.append(rows)                     # <run>/partial/queues/000001.parquet
    writer.append(more_rows)                # .../000002.parquet

The processes that record a run's tables (the samplers here and on each server, the
agents' fleet) append their new rows every second or two as one chunk: a parquet file
written under a hidden temporary name, fsynced, then renamed to ``<seq>.parquet``
(``seq`` counts up from 1, six digits), or ``<seq>-<writer>.parquet`` when several
writers append to one table (a cluster run's servers), each counting its own. A chunk
is therefore whole or absent whatever kills the writer; earlier chunks are never opened
again. ``<run>/partial/`` holds nothing else but ``clock.json`` (the run's t0, once it is
fixed), so a reader can place the recovered rows in the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["CLOCK", "PARTIAL", "ChunkWriter", "chunk_paths", "write_clock"]

PARTIAL = "partial"  # the folder in a run directory that holds the chunks
CLOCK = "clock.json"
_CHUNK = re.compile(r"^(\d+)(?:-([a-z0-9]+))?\.parquet$")  # seq, and the writer if named


class ChunkWriter:
    """Appends frames of one table to ``<run_dir>/partial/<table>/`` (see the module
    docstring). Not thread-safe: one writer per table, called from one thread. A writer
    opened on a folder that already has chunks numbers its own after them."""

    def __init__(self, run_dir: str | os.PathLike, table: str, writer: str | None = None) -> None:
        if writer is not None and not re.fullmatch(r"[a-z0-9]+", writer):
            raise ValueError(f"chunk writer {writer!r}: lower-case letters and digits only")
        self.table, self.writer = table, writer
        self.folder = Path(run_dir) / PARTIAL / table
        self.folder.mkdir(parents=True, exist_ok=True)
        existing = [_seq(p) for p in chunk_paths(run_dir, table) if _writer(p) == writer]
        self.seq = max(existing, default=0)
        self.rows = 0  # rows this writer appended

    def paths(self) -> list[Path]:
        """This writer's chunks, in order (not those of another writer of the table)."""
        run_dir = self.folder.parent.parent
        return [p for p in chunk_paths(run_dir, self.table) if _writer(p) == self.writer]

    def append(self, frame: pd.DataFrame) -> Path | None:
        """Write ``frame`` (its index is not stored) as the next chunk; returns its path,
        or ``None`` for an empty frame (nothing is written)."""
        if frame is None or len(frame) == 0:
            return None
        table = pa.Table.from_pandas(frame, preserve_index=False)
        self.seq += 1
        suffix = f"-{self.writer}" if self.writer else ""
        path = self.folder / f"{self.seq:06d}{suffix}.parquet"
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                pq.write_table(table, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self.rows += len(frame)
        return path


def chunk_paths(run_dir: str | os.PathLike, table: str) -> list[Path]:
    """The finished chunks of ``table``, in the order they were written (temporary files
    of a chunk being written are not listed)."""
    folder = Path(run_dir) / PARTIAL / table
    if not folder.is_dir():
        return []
    chunks = (p for p in folder.iterdir() if _CHUNK.match(p.name))
    return sorted(chunks, key=lambda p: (_seq(p), _writer(p) or ""))


def write_clock(run_dir: str | os.PathLike, t0_ns: int) -> None:
    """Record the run's t0 (``time.monotonic_ns()``) beside the chunks."""
    root = Path(run_dir) / PARTIAL
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{CLOCK}.", suffix=".tmp", dir=root)
    with os.fdopen(fd, "w") as fh:
        json.dump({"t0_ns": int(t0_ns)}, fh)
    os.replace(tmp, root / CLOCK)


def _seq(path: Path) -> int:
    match = _CHUNK.match(path.name)
    return int(match.group(1)) if match else 0


def _writer(path: Path) -> str | None:
    match = _CHUNK.match(path.name)
    return match.group(2) if match else None

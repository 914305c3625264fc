"""A table saved while it grows, read back: what a killed run keeps, and its chunks
gathered into the run's table at its end. The writing side (``ChunkWriter``, the chunk
names, the run's clock) is :mod:`experiments.measurement.chunks`, whose names are
re-exported here for the code that both writes and reads.

    writer = ChunkWriter(run_dir, "queues")
    writer.append(rows)                     # <run>/partial/queues/000001.parquet
    writer.append(more_rows)                # .../000002.parquet
    recovered = read_chunks(run_dir, "queues")   # a killed run: every whole chunk
    compact(run_dir, "queues")              # <run>/queues.parquet; the chunks are removed

A run's tables are complete only at its end (``results.write_table``). Until then the
processes that record them append their new rows every second or two as one chunk: a
parquet file written under a hidden temporary name, fsynced, then renamed to
``<seq>.parquet`` (``seq`` counts up from 1, six digits), or ``<seq>-<writer>.parquet``
when several writers append to one table (a cluster run's servers), each counting its
own. A chunk is therefore whole or
absent whatever kills the writer; earlier chunks are never opened again. A chunk that
cannot be read all the same (a power loss can leave a renamed file empty or cut short)
is skipped and named in ``Recovered.skipped``, never fatal: the chunks before and after
it are still read. ``<run>/partial/`` holds nothing else but ``clock.json`` (the run's
t0, once it is fixed), so a reader can place the recovered rows in the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from experiments.measurement.chunks import CLOCK, PARTIAL, ChunkWriter, chunk_paths, write_clock
from experiments.output.files import write_table

__all__ = [
    "PARTIAL",
    "ChunkWriter",
    "Recovered",
    "chunk_paths",
    "chunked_tables",
    "compact",
    "discard",
    "read_chunks",
    "read_clock",
    "write_clock",
]


@dataclass
class Recovered:
    """What the chunks of one table hold: ``frame`` concatenates every readable chunk in
    order; ``chunks`` counts those, ``skipped`` names the unreadable ones (and why)."""

    table: str
    frame: pd.DataFrame
    chunks: int
    skipped: list[str] = field(default_factory=list)


def chunked_tables(run_dir: str | os.PathLike) -> list[str]:
    """The tables that have at least one chunk in ``run_dir``, sorted."""
    root = Path(run_dir) / PARTIAL
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and chunk_paths(run_dir, p.name))


def read_chunks(run_dir: str | os.PathLike, table: str) -> Recovered | None:
    """Every readable chunk of ``table`` concatenated, or ``None`` when it has no chunk."""
    paths = chunk_paths(run_dir, table)
    if not paths:
        return None
    frames, skipped = [], []
    for path in paths:
        try:
            frames.append(pq.read_table(path).to_pandas())
        except (OSError, pa.ArrowException) as exc:  # empty, cut short or not parquet
            skipped.append(f"{path.name}: {exc}")
    frames = [f for f in frames if len(f)]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return Recovered(table, frame, len(paths) - len(skipped), skipped)


def compact(run_dir: str | os.PathLike, table: str) -> Path | None:
    """Write the chunks of ``table`` as ``<run_dir>/<table>.parquet`` (atomically, as
    ``results.write_table`` does) and remove them; returns the path, or ``None`` when
    the table has no chunk."""
    recovered = read_chunks(run_dir, table)
    if recovered is None:
        return None
    path = write_table(Path(run_dir), table, recovered.frame)
    discard(run_dir, table)
    return path


def discard(run_dir: str | os.PathLike, table: str) -> None:
    """Remove the chunks of ``table`` (its complete table was written); ``partial/``
    goes too once it holds no table's chunks."""
    root = Path(run_dir) / PARTIAL
    shutil.rmtree(root / table, ignore_errors=True)
    if root.is_dir() and not any(p.is_dir() for p in root.iterdir()):
        shutil.rmtree(root, ignore_errors=True)


def read_clock(run_dir: str | os.PathLike) -> int | None:
    """The t0 recorded by :func:`write_clock`, if any."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return int(json.loads((Path(run_dir) / PARTIAL / CLOCK).read_text())["t0_ns"])
    return None

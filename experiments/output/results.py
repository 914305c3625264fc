"""The results directory of one run: ``results/<experiment>/<run-id>/``.

    run_dir = new_run_dir(Path("results"), "incast-basic", seed=7)   # .../20250101-120000-7
    write_table(run_dir, "flows", flows)          # flows.parquet, atomically
    write_json(run_dir, "summary", summary)       # summary.json, strict JSON, sorted keys
    run = load_run(run_dir)
    run.summary["metrics"], run.config.fabric, run.flows  # tables load on first use

Every file is written to a temporary name in the same directory, flushed, then renamed
over the final name (``os.replace``), so a crash or Ctrl-C never leaves a half-written
table or summary: a reader sees the old file, the new one, or none. Any table may be
absent or empty (an interrupted run); readers get ``None`` or an empty frame and must
cope. The file layout is the results contract of the design (``spec.yaml``,
``env.json``, ``summary.json``, ``events.json`` and one parquet file per table).

While a run goes on, its tables grow as chunks in ``partial/`` (:mod:`.chunks`); the
end of the run replaces them by the parquet files. A run killed before its end (SIGKILL,
power loss) has only the chunks: :func:`read_table` then returns what they hold, and
``Run.recovered`` names the tables that came from chunks, so a reader knows they stop
where the run was killed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.analysis.jsonable import to_jsonable
from experiments.output import chunks
from experiments.output.files import (
    ResultsError,
    atomic_write,
    check_name,
    file_name,
    write_table,
)
from experiments.spec.config import RunConfig
from experiments.spec.stored import stored_config

__all__ = [
    "TABLES",
    "NotARunError",
    "ResultsError",
    "Run",
    "is_run_dir",
    "load_run",
    "new_run_dir",
    "read_json",
    "read_table",
    "run_id",
    "stored_config",
    "to_jsonable",
    "write_json",
    "write_table",
]

# The tables of the results contract, one ``<name>.parquet`` each.
TABLES = ("flows", "requests", "tokens", "queues", "links", "cpu")
SUMMARY = "summary.json"


class NotARunError(ResultsError):
    """A directory given as a run is not a kvfabric run directory (no summary.json)."""


# ---- creating a run directory --------------------------------------------------------------


def run_id(seed: int, now: datetime | None = None) -> str:
    """``YYYYmmdd-HHMMSS-<seed>``: sortable by start time, no colons (portable file names)."""
    now = now or datetime.now()
    return f"{now:%Y%m%d-%H%M%S}-{int(seed)}"


def new_run_dir(root: Path, experiment: str, seed: int, now: datetime | None = None) -> Path:
    """Create and return ``root/<experiment>/<run-id>``.

    Two runs of a sweep that start in the same second get ``<run-id>-2``, ``-3``, ...
    (the directory is created with ``exist_ok=False``, so concurrent runs cannot share
    one). Raises :class:`ResultsError` when the experiment name is not a plain name or
    ``root`` cannot be written.
    """
    check_name(experiment, "experiment name")
    parent = Path(root) / experiment
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or exc
        raise ResultsError(f"cannot create results directory {parent}: {why}") from exc
    base = run_id(seed, now)
    for n in range(1, 10_000):
        path = parent / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir(exist_ok=False)
        except FileExistsError:
            continue
        except OSError as exc:
            why = exc.strerror or exc
            raise ResultsError(f"cannot create run directory {path}: {why}") from exc
        return path
    raise ResultsError(f"too many runs named {base} in {parent}")


# ---- writing -------------------------------------------------------------------------------


def write_json(run_dir: Path, name: str, obj: Any) -> Path:
    """Write ``obj`` as ``run_dir/<name>.json`` atomically: sorted keys, 2-space indent,
    strict JSON (NaN and infinities become ``null``, numpy scalars plain numbers, see
    :func:`to_jsonable`), so the same object always gives the same bytes."""
    path = Path(run_dir) / file_name(name, ".json")
    text = json.dumps(to_jsonable(obj), indent=2, sort_keys=True, allow_nan=False) + "\n"
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path


# ---- reading -------------------------------------------------------------------------------


def read_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """The table ``run_dir/<name>.parquet``; without it, what the table's chunks hold (a
    run killed before its end, :mod:`.chunks`); ``None`` when the run has neither. An
    unreadable file is a :class:`ResultsError` naming it (an unreadable chunk is skipped)."""
    path = Path(run_dir) / file_name(name, ".parquet")
    if not path.is_file():
        recovered = chunks.read_chunks(run_dir, path.stem)
        return recovered.frame if recovered is not None else None
    try:
        return pd.read_parquet(path, engine="pyarrow")
    except Exception as exc:  # pyarrow raises several unrelated types for a corrupt file
        raise ResultsError(f"cannot read table {path}: {exc}") from exc


def read_json(run_dir: Path, name: str) -> Any | None:
    """``run_dir/<name>.json`` parsed, or ``None`` when absent."""
    path = Path(run_dir) / file_name(name, ".json")
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from exc


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a kvfabric run directory (it has a summary.json)."""
    return (Path(path) / SUMMARY).is_file()


@dataclass
class Run:
    """One run's results. ``summary`` is summary.json, ``spec`` the resolved spec.yaml as
    written (``{}`` if absent), ``config`` the run's configuration read from it
    (:func:`stored_config`: ``None`` when it cannot be read into the current schema),
    ``events`` events.json (``{}`` if absent). Tables are read on
    first access and are ``None`` when the run did not write them. ``recovered``: the
    tables that come from the chunks of a run that did not finish (read from chunks now,
    or gathered from them at the run's end, summary.json ``tables``), sorted."""

    path: Path
    summary: dict[str, Any]
    spec: dict[str, Any] = field(default_factory=dict)
    events: dict[str, Any] = field(default_factory=dict)
    recovered: tuple[str, ...] = ()
    shown_as: str | None = None  # the label a comparison gives it (``comparison.labelled``)
    _tables: dict[str, pd.DataFrame | None] = field(default_factory=dict, repr=False)
    _skipped: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def table(self, name: str) -> pd.DataFrame | None:
        if name not in self._tables:
            found = None
            if not (self.path / file_name(name, ".parquet")).is_file():
                found = chunks.read_chunks(self.path, name)
            if found is not None:
                self._tables[name] = self._real_time(name, found.frame)
                self._skipped[name] = found.skipped
            else:
                self._tables[name] = read_table(self.path, name)
        return self._tables[name]

    def _real_time(self, name: str, frame: pd.DataFrame) -> pd.DataFrame:
        """A wall-clock table read from the chunks of a dilated run that never wrote its
        tables, in real-equivalent time as its end would have written it
        (``runner.write_tables``); anything else as it is."""
        from experiments.measurement.timebase import WALL_TABLES, real_time_table

        scale = self.config.scale if self.config is not None else None
        if name not in WALL_TABLES or scale is None or scale.auto or scale.d == 1:
            return frame
        t0 = self.events.get("t0_ns")
        t0 = int(t0) if isinstance(t0, int) else chunks.read_clock(self.path)
        return frame if t0 is None else real_time_table(frame, scale, t0)

    @cached_property
    def config(self) -> RunConfig | None:
        """The run's configuration (``RunConfig``), or ``None`` (see :func:`stored_config`)."""
        return stored_config(self.spec, self.path)

    def skipped_chunks(self, name: str) -> list[str]:
        """The chunks of a recovered table that could not be read (cut short by the kill),
        each with why; read the table first."""
        return list(self._skipped.get(name, []))

    @property
    def flows(self) -> pd.DataFrame | None:
        return self.table("flows")

    @property
    def requests(self) -> pd.DataFrame | None:
        return self.table("requests")

    @property
    def tokens(self) -> pd.DataFrame | None:
        return self.table("tokens")

    @property
    def queues(self) -> pd.DataFrame | None:
        return self.table("queues")

    @property
    def links(self) -> pd.DataFrame | None:
        return self.table("links")

    @property
    def cpu(self) -> pd.DataFrame | None:
        return self.table("cpu")

    @property
    def run_id(self) -> str:
        return str(self.summary.get("run_id") or self.path.name)

    @property
    def label(self) -> str:
        """The label a comparison gave it, else the run's sweep label
        (``senders=3,seed=8``), else its run id."""
        return self.shown_as or str(self.summary.get("label") or self.run_id)

    @property
    def partial(self) -> bool:
        return bool(self.summary.get("partial"))


def load_run(run_dir: Path) -> Run:
    """Open a run directory. Raises :class:`NotARunError` when ``run_dir`` does not exist
    or has no summary.json (it is not a kvfabric run), :class:`ResultsError` when a file
    of it is unreadable."""
    path = Path(run_dir)
    if not path.is_dir():
        raise NotARunError(f"{path} is not a directory (expected a kvfabric run directory)")
    if not is_run_dir(path):
        hint = ""
        if any(is_run_dir(child) for child in sorted(path.iterdir()) if child.is_dir()):
            hint = "; it holds runs: pass them, e.g. " + str(path / "*")
        raise NotARunError(f"{path} is not a kvfabric run directory (no {SUMMARY}){hint}")
    summary = read_json(path, "summary")
    if not isinstance(summary, dict):
        raise ResultsError(f"{path / SUMMARY} is not a JSON object")
    spec: dict[str, Any] = {}
    spec_path = path / "spec.yaml"
    if spec_path.is_file():
        try:
            loaded = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ResultsError(f"cannot read {spec_path}: {exc}") from exc
        spec = loaded if isinstance(loaded, dict) else {}
    events = read_json(path, "events")
    return Run(
        path=path,
        summary=summary,
        spec=spec,
        events=events if isinstance(events, dict) else {},
        recovered=_recovered(path, summary),
    )


def _recovered(path: Path, summary: dict[str, Any]) -> tuple[str, ...]:
    on_disk = {t for t in chunks.chunked_tables(path) if not (path / f"{t}.parquet").is_file()}
    sources = summary.get("tables")
    gathered = (
        {t for t, how in sources.items() if how == "recovered"}
        if isinstance(sources, dict)
        else set()
    )
    return tuple(sorted(on_disk | gathered))

"""A stored run's configuration: a results folder's ``spec.yaml`` read back into the
current schema.

A run of an older version wrote fewer keys; a committed run names files (a trace) on the
machine that ran it. ``stored_config`` takes the spec as written when it fits the
current ``RunConfig``, else validates it again so the newer keys take their defaults,
checking a file that is gone against a stand-in and keeping the name it had.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from experiments.spec.schema import SpecError
from experiments.spec.sections import validate
from experiments.spec.typed import ConfigError, RunConfig, config_of


def stored_config(spec: dict[str, Any], base_dir: Path) -> RunConfig | None:
    """The configuration of a stored run from its spec.yaml (``spec``; relative paths from
    ``base_dir``, the run's folder): as written when it fits the current schema, else
    validated again, so the keys that a run of an older version did not write take their
    defaults. A file the spec names (a trace) need not exist any more (the run read it
    then; a committed run names a path on the machine that ran it): it is checked against
    a stand-in and keeps the name it had. ``None`` without a spec, or when the spec cannot
    be read into the current schema."""
    if not spec:
        return None
    try:
        return config_of(spec)
    except ConfigError:
        pass
    raw, gone = copy.deepcopy(spec), {}
    stand_in = Path(base_dir) / "spec.yaml"
    while True:
        try:
            resolved = validate(raw, Path(base_dir))
            break
        except SpecError as exc:
            if exc.path in gone or not _missing_file(exc, base_dir) or not stand_in.is_file():
                return None
            gone[exc.path] = exc.value
            _put(raw, exc.path, str(stand_in))
    for path, value in gone.items():
        _put(resolved, path, value)
    resolved.pop("sweep", None)
    try:
        return config_of(resolved)
    except ConfigError:
        return None


def _missing_file(exc: SpecError, base_dir: Path) -> bool:
    """Whether ``exc`` rejects a path to a file that does not exist (here and now)."""
    if not exc.path or not isinstance(exc.value, str) or not exc.value:
        return False
    file = Path(exc.value).expanduser()
    return not (file if file.is_absolute() else Path(base_dir) / file).exists()


def _put(tree: Any, path: str, value: Any) -> None:
    """Set the value at a dotted key path (``workloads.0.arrivals.trace``) of plain data."""
    *parents, last = path.split(".")
    for part in parents:
        tree = tree[int(part)] if isinstance(tree, list) else tree[part]
    if isinstance(tree, list):
        tree[int(last)] = value
    else:
        tree[last] = value


def as_written(spec: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The parameters of a stored spec's fabric and of each of its workloads as its
    spec.yaml lists them, kind left out: what the run was given (a run of an older
    version wrote fewer keys, some numbers as integers)."""
    fabric = {k: v for k, v in (spec.get("fabric") or {}).items() if k != "kind"}
    workloads = [{k: v for k, v in w.items() if k != "kind"} for w in spec.get("workloads") or []]
    return fabric, workloads

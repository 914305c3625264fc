"""``kvfabric run`` of a spec text for the root tests, and what the run wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from experiments.cli.main import main


def run_spec(tmp_path: Path, name: str, text: str, *sets: str, force: bool = False) -> Path:
    """Run the spec ``text`` (each of ``sets`` a ``--set key=value``) under
    ``tmp_path/name``; it must exit 0 and make one run: that run's directory."""
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(text)
    out = tmp_path / name
    args = ["run", str(spec), "--out", str(out), "--quiet", *(["--force"] if force else [])]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    (summary,) = out.glob("*/*/summary.json")
    return summary.parent


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def tables(run_dir: Path, *names: str) -> tuple[pd.DataFrame, ...]:
    """The run's ``names`` tables (``requests``, ``flows``, ``tokens``, ``queues``...)."""
    return tuple(pd.read_parquet(run_dir / f"{name}.parquet") for name in names)

"""Plain JSON data from what the analysis computes: the one rule by which ``summary.json``
(and every JSON file of a run) is written, so the same object always gives the same bytes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON data: dict keys become strings, tuples/sets/arrays lists
    (sets sorted), numpy scalars Python numbers, NaN/inf/``pd.NA``/``NaT`` ``None``,
    paths and datetimes strings. Anything else unknown is an error rather than a
    silent ``str()``."""
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | np.ndarray | pd.Series):
        return [to_jsonable(v) for v in list(obj)]
    if isinstance(obj, set | frozenset):
        return sorted((to_jsonable(v) for v in obj), key=repr)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, datetime | date | pd.Timestamp):
        return obj.isoformat()
    if obj is pd.NA or obj is pd.NaT:
        return None
    raise TypeError(f"cannot store {type(obj).__name__} {obj!r} in JSON")

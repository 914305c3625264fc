"""A dilated run's measurements in real-equivalent time (``scale.time_dilation`` d).

The run's wall-clock tables and events are converted once, when the run's tables are
written (``runner.write_tables``), so every reader (summary, verdict, report, plots,
notebook) sees real-equivalent instants and durations and never asks for d:

- a column or key ending ``_ns`` is an instant on the run's monotonic clock: it moves
  to ``t0 + (t - t0) ÷ d`` (``Scale.real_ns``; the clocks agree at the traffic's t0);
- one ending ``_ms`` is a duration: ``÷ d``;
- counters (bytes, packets, drops), queue depths, CPU shares and everything else stay:
  a rate computed from counters over converted instants is per real-equivalent second.

The requests and tokens tables come out of the serving driver in real-equivalent time
already (``traffic.driver.Dilated``); the tables listed in ``WALL_TABLES`` are the ones
measured on the wall clock. At d = 1 nothing changes (the same objects are returned).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from topologies.scale import Scale

WALL_TABLES = ("flows", "queues", "links", "cpu")  # measured on the wall clock
KEPT_KEYS = frozenset({"t0_ns"})  # the anchor itself


def real_time_table(table: pd.DataFrame, scale: Scale, t0_ns: int) -> pd.DataFrame:
    """``table`` with its ``_ns`` instants and ``_ms`` durations in real-equivalent time."""
    if scale.d == 1 or table is None or not len(table.columns):
        return table
    out = table.copy()
    for col in out.columns:
        if col.endswith("_ns"):
            values = out[col]
            if isinstance(values.dtype, pd.Int64Dtype):  # nullable: missing stays missing
                out[col] = (t0_ns + np.floor((values.astype("Float64") - t0_ns) / scale.d)).astype(
                    "Int64"
                )
            else:
                out[col] = (t0_ns + np.floor((values - t0_ns) / scale.d)).astype(values.dtype)
        elif col.endswith("_ms"):
            out[col] = out[col] / scale.d
    return out


def real_time_events(events: Any, scale: Scale, t0_ns: int) -> Any:
    """``events`` (``events.json``: nested dicts and lists) with every ``_ns`` instant and
    ``_ms`` duration in real-equivalent time (``t0_ns`` itself stays)."""
    if scale.d == 1:
        return events
    if isinstance(events, dict):
        out = {}
        for key, value in events.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if number and key.endswith("_ns") and key not in KEPT_KEYS:
                out[key] = scale.real_ns(int(value), t0_ns)
            elif number and key.endswith("_ms"):
                out[key] = value / scale.d
            else:
                out[key] = real_time_events(value, scale, t0_ns)
        return out
    if isinstance(events, list):
        return [real_time_events(v, scale, t0_ns) for v in events]
    return events

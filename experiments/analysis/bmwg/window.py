"""The part of a run a procedure measures: after its warm-up, and (soak tests) in
windows. A procedure's spec runs ``warmup_s + trial_s``; the draft records only after
the warm-up (>= 10 s in [TERMINOLOGY]), so every KPI is computed on the rows this
module keeps. Times are the tables' own (real-equivalent ns); ``start_ns`` is when the
run's traffic started (events.json ``t0_ns``)."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

TIME_COLUMNS = {
    "flows": "t_start_ns",
    "requests": "arrival_ns",
    "tokens": "t_ns",
    "queues": "t_ns",
    "links": "t_ns",
    "cpu": "t_ns",
}


COUNTER_TABLES = ("links",)  # cumulative counters: a KPI takes their increase


def measured(table: pd.DataFrame, name: str, start_ns: int, warmup_s: float) -> pd.DataFrame:
    """The rows of table ``name`` (flows, requests, tokens, queues, links, cpu) that
    begin at or after the warm-up; for a table of counters, from the last sample
    before it on, the baseline their increase is counted from (else the interval
    across the warm-up's end is lost, and a run shorter than the sampling period, with
    one sample after it, has no increase at all)."""
    column = TIME_COLUMNS[name]
    t = table[column].astype(float)
    cut = start_ns + warmup_s * 1e9
    if name in COUNTER_TABLES and (t < cut).any():
        cut = float(t[t < cut].max())
    return table[t >= cut]


def windows(
    table: pd.DataFrame, name: str, start_ns: int, window_s: float
) -> Iterator[tuple[float, pd.DataFrame]]:
    """(window start in s after ``start_ns``, its rows) for consecutive windows of
    ``window_s`` (13.x samples every 15 min; a compressed soak, shorter windows)."""
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    t = (table[TIME_COLUMNS[name]].astype(float) - start_ns) / 1e9
    index = (t // window_s).where(t >= 0)
    for i, rows in table.groupby(index, sort=True):
        yield float(i) * window_s, rows

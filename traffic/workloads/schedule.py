"""The schedule: what every workload model returns and the agents execute.

A schedule is a ``pandas.DataFrame`` with one row per message and exactly the
columns of ``COLUMNS`` (in that order, with those dtypes):

============ ====== ===========================================================
column       dtype  meaning
============ ====== ===========================================================
flow_id      int64  unique within the schedule; the header's flow_id
kind         str    kv_transfer, kv_layer, token, collective, alltoall, incast,
                    background, cache_fetch, probe or tier_fetch
tenant       str    who the traffic belongs to (isolation experiments)
src, dst     str    host names; never equal
bytes        int64  REAL-equivalent message bytes; the runner multiplies by the
                    bandwidth scale when ``scaled`` is true
t_sched_ns   int64  send instant, ns after the row's *release* (see below)
request_id   int64  serving request, -1 if none
layer        int64  model layer of a KV chunk, -1 if none
chunk        int64  chunk index within a request's transfer, -1 if none
round        int64  incast round, -1 if none
step         int64  all-to-all step, -1 if none
dscp         int64  DSCP code point the sender sets (0 = best effort)
lane         int64  which of the sender's persistent TCP connections to ``dst``
                    with this DSCP carries the row (0 unless a workload says):
                    rows in different lanes never wait behind each other, as
                    RDMA queue pairs do not
barrier      int64  the completion group the row belongs to, -1 if none
after        int64  the completion group that releases the row, -1 if none
proto        str    "tcp" or "udp" (probes)
scaled       bool   false for rows whose size must not be scaled (probes: a
                    probe is one real packet whatever the scale)
============ ====== ===========================================================

Dependencies (barrier-synchronised incast, the combine phase of an
all-to-all) are run-time facts, so a schedule states them instead of guessing
times:

- A *completion group* is a set of rows that share a ``barrier`` value; that
  value is the ``flow_id`` of the group's first row. A group completes at the
  instant its last message has been fully received (receiver's clock).
- A row with ``after == -1`` is released at the run start. A row with
  ``after == g`` is released when group ``g`` completes. Either way it is sent
  ``t_sched_ns`` after its release. So ``after`` always names a flow id: "wait
  for flow ``after`` and every other message of its group".
- Dependencies point backwards: every message of the awaited group has a
  smaller ``flow_id`` than the waiting row, so there are no cycles and rows can
  be released in flow-id order; ``validate_schedule`` checks this.

If a group never completes (a flow fails), the rows after it are never
released; the runner records them as not sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from ..header import KIND_CODES
from ..presets import Model, PresetError
from ..presets import model as lookup_model

COLUMNS: dict[str, str] = {
    "flow_id": "int64",
    "kind": "object",
    "tenant": "object",
    "src": "object",
    "dst": "object",
    "bytes": "int64",
    "t_sched_ns": "int64",
    "request_id": "int64",
    "layer": "int64",
    "chunk": "int64",
    "round": "int64",
    "step": "int64",
    "dscp": "int64",
    "lane": "int64",
    "barrier": "int64",
    "after": "int64",
    "proto": "object",
    "scaled": "bool",
}
# Columns a generator may leave out of its rows: their "none" value.
DEFAULTS = {
    "request_id": -1,
    "layer": -1,
    "chunk": -1,
    "round": -1,
    "step": -1,
    "dscp": 0,
    "lane": 0,
    "barrier": -1,
    "after": -1,
    "proto": "tcp",
    "scaled": True,
}


class WorkloadError(ValueError):
    """A workload parameter that cannot be honoured; says which, its value, what is allowed."""


def rng_from(seed: int | np.random.Generator) -> np.random.Generator:
    """A generator from a seed; a ``Generator`` is used as is (caller owns its state)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def build_schedule(
    columns: dict[str, Sequence | np.ndarray], first_flow_id: int = 0
) -> pd.DataFrame:
    """A schedule frame from column arrays; flow ids are numbered from ``first_flow_id``.

    ``barrier``/``after`` given here are row indices (or -1) and become flow ids.
    """
    n = len(columns["src"])
    data: dict[str, np.ndarray] = {}
    for name, dtype in COLUMNS.items():
        if name == "flow_id":
            data[name] = np.arange(first_flow_id, first_flow_id + n, dtype=np.int64)
        elif name in columns:
            data[name] = np.asarray(columns[name], dtype=dtype)
        elif n == 0:
            data[name] = np.empty(0, dtype=dtype)
        else:
            data[name] = np.full(n, DEFAULTS[name], dtype=dtype)
        if len(data[name]) != n:
            raise ValueError(f"column {name} has {len(data[name])} rows, expected {n}")
    for name in ("barrier", "after"):
        col = data[name]
        data[name] = np.where(col >= 0, col + first_flow_id, -1).astype(np.int64)
    return pd.DataFrame(data)


def empty_schedule() -> pd.DataFrame:
    """A schedule with no rows and the right columns and dtypes."""
    return build_schedule({"src": []})


def concat_schedules(schedules: Iterable[pd.DataFrame], first_flow_id: int = 0) -> pd.DataFrame:
    """Several workloads' schedules as one, flow ids renumbered to stay unique.

    Each schedule's ``flow_id``, ``barrier`` and ``after`` are shifted together,
    so its dependencies keep pointing at the same rows.
    """
    parts, next_id = [], first_flow_id
    for frame in schedules:
        if frame.empty:
            continue
        shift = next_id - int(frame["flow_id"].min())
        part = frame.copy()
        part["flow_id"] += shift
        for name in ("barrier", "after"):
            part[name] = np.where(part[name] >= 0, part[name] + shift, -1).astype(np.int64)
        parts.append(part)
        next_id = int(part["flow_id"].max()) + 1
    if not parts:
        return empty_schedule()
    return pd.concat(parts, ignore_index=True)


def validate_schedule(schedule: pd.DataFrame) -> None:
    """Raise ``WorkloadError`` unless ``schedule`` keeps the contract above."""
    if list(schedule.columns) != list(COLUMNS):
        raise WorkloadError(f"schedule columns {list(schedule.columns)}, expected {list(COLUMNS)}")
    if not schedule["flow_id"].is_unique:
        raise WorkloadError("schedule flow_id values are not unique")
    unknown = set(schedule["kind"]) - set(KIND_CODES)
    if unknown:
        raise WorkloadError(f"unknown kinds {sorted(unknown)}; allowed: {', '.join(KIND_CODES)}")
    if (schedule["src"] == schedule["dst"]).any():
        raise WorkloadError("a schedule row sends from a host to itself")
    if (schedule["bytes"] <= 0).any() or (schedule["t_sched_ns"] < 0).any():
        raise WorkloadError("schedule rows need bytes > 0 and t_sched_ns >= 0")
    groups = set(schedule.loc[schedule["barrier"] >= 0, "barrier"])
    waits = schedule[schedule["after"] >= 0]
    missing = set(waits["after"]) - groups
    if missing:
        raise WorkloadError(f"rows wait for completion groups that do not exist: {sorted(missing)}")
    last_of_group = schedule[schedule["barrier"] >= 0].groupby("barrier")["flow_id"].max()
    if (waits["after"].map(last_of_group) >= waits["flow_id"]).any():
        raise WorkloadError("a row waits for a group whose messages do not all come before it")


# ---- parameter checks shared by the generators -------------------------------------------


def check_positive(name: str, value: float, integer: bool = False) -> None:
    """``value`` must be > 0 (and an int if ``integer``)."""
    kind = "a positive integer" if integer else "a positive number"
    numbers = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    ok_type = isinstance(value, numbers)
    if isinstance(value, bool) or not ok_type or not value > 0:
        raise WorkloadError(f"{name} must be {kind}, got {value!r}")


def check_hosts(name: str, names: Sequence[str], hosts: Sequence[str] | None) -> None:
    """Names are distinct and, when the fabric's ``hosts`` are given, among them."""
    if len(set(names)) != len(names):
        raise WorkloadError(f"{name} lists a host twice: {list(names)}")
    if hosts is not None:
        unknown = [h for h in names if h not in set(hosts)]
        if unknown:
            raise WorkloadError(
                f"{name} names hosts {unknown} the fabric lacks; hosts: {list(hosts)}"
            )


def resolve_model(value: str | Model) -> Model:
    """The model preset, with an unknown name reported as a ``WorkloadError``."""
    try:
        return lookup_model(value)
    except PresetError as exc:
        raise WorkloadError(f"model: {exc}") from None


def ms_to_ns(ms: float) -> int:
    return int(round(ms * 1e6))

"""What a planned run will ask of this machine, before anything is built (pure).

The emulator's cost is not bytes alone: every message costs the agents, the
kernel and OVS a fixed amount, so a run is judged on three figures, each the
**peak over 100 ms windows** (a mean would hide the bursts that break fidelity):

- ``switch_hop_mbps``: emulated bits per second × switches on each message's path,
  by path length (the calibrated capacity depends on it);
- ``messages_per_s``: message-hops started per second (each message counted once
  per switch on its path: OVS's cost is per packet per switch), by size class
  (``small``: one segment; ``bulk``: more);
- ``connections``: TCP connections open at once (persistent: one per source,
  destination, DSCP and lane; per_flow: messages in flight).

Message instants come from the plan: a static schedule's rows at their
scheduled instants (rows waiting for a group, and a live driver's messages, from
the fluid simulator ``traffic.serving.sim``, which runs the same driver code as
the live run), each lasting bytes ÷ its path's bottleneck rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from topologies import Fabric
from traffic.serving.sim import fabric_rate, simulate
from traffic.wire import HEADER_LEN as HEADER

WINDOW_NS = 100_000_000
SMALL_BYTES = 1448  # one TCP segment at MTU 1500
BIN_NS = 1_000_000  # bulk messages' bits are spread over their duration at this grain


@dataclass
class Demand:
    """Per-window demand of one planned run (windows of ``WINDOW_NS`` from t0)."""

    hop_bits: dict[int, np.ndarray] = field(default_factory=dict)  # path length -> bits/window
    starts: dict[str, np.ndarray] = field(default_factory=dict)  # size class -> starts/window
    connections: int = 0
    messages: int = 0
    by_workload: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def windows(self) -> int:
        return max([0, *(len(a) for a in (*self.hop_bits.values(), *self.starts.values()))])

    def __add__(self, other: Demand) -> Demand:
        out = Demand(
            connections=self.connections + other.connections,
            messages=self.messages + other.messages,
            by_workload={**self.by_workload, **other.by_workload},
        )
        for name in ("hop_bits", "starts"):
            a, b = getattr(self, name), getattr(other, name)
            merged = {k: _pad_add(a.get(k), b.get(k)) for k in set(a) | set(b)}
            setattr(out, name, merged)
        return out

    def peak_switch_hop_mbps(self) -> float:
        total = _sum(self.hop_bits.values(), self.windows)
        return float(total.max() / (WINDOW_NS / 1e9) / 1e6) if total.size else 0.0

    def peak_messages_per_s(self) -> float:
        total = _sum(self.starts.values(), self.windows)
        return float(total.max() / (WINDOW_NS / 1e9)) if total.size else 0.0

    def mean_messages_per_s(self) -> float:
        total = _sum(self.starts.values(), self.windows)
        return float(total.mean() / (WINDOW_NS / 1e9)) if total.size else 0.0


def _pad_add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
    if a is None:
        return b.copy()
    if b is None:
        return a.copy()
    out = np.zeros(max(len(a), len(b)))
    out[: len(a)] += a
    out[: len(b)] += b
    return out


def _sum(arrays: Any, n: int) -> np.ndarray:
    out = np.zeros(n)
    for a in arrays:
        out[: len(a)] += a
    return out


def message_table(messages: pd.DataFrame, fabric: Fabric, scale: float) -> pd.DataFrame:
    """Messages (``src, dst, bytes`` real, ``scaled``, ``proto``, ``dscp``, ``t_start_ns``
    and optionally ``t_end_ns``) with ``emulated`` bytes, ``hops`` (switches on the
    path) and an end instant at the path's bottleneck rate where none is given."""
    from experiments.analysis.fidelity import switch_counter

    out = messages.reset_index(drop=True).copy()
    real = out["bytes"].to_numpy(dtype=np.float64)
    scaled = out["scaled"].to_numpy(dtype=bool) if "scaled" in out else np.ones(len(out), bool)
    out["emulated"] = np.maximum(HEADER, np.where(scaled, np.rint(real * scale), real)).astype(
        np.int64
    )
    pairs = out[["src", "dst"]].drop_duplicates()
    count, rate = switch_counter(fabric), fabric_rate(fabric, scale)
    pairs = pairs.assign(
        hops=[count(a, b) for a, b in pairs.itertuples(index=False)],
        bps=[rate(a, b) for a, b in pairs.itertuples(index=False)],
    )
    joined = out[["src", "dst"]].merge(pairs, on=["src", "dst"], how="left")
    out["hops"] = joined["hops"].to_numpy(dtype=np.int64)
    duration = out["emulated"].to_numpy(dtype=np.float64) * 8 / joined["bps"].to_numpy() * 1e9
    if "t_end_ns" not in out or out["t_end_ns"].isna().all():
        out["t_end_ns"] = out["t_start_ns"].to_numpy(dtype=np.float64) + duration
    return out


def demand_of(
    table: pd.DataFrame, connection: str = "persistent", workload: int | None = None
) -> Demand:
    """The per-window demand of a ``message_table``."""
    d = Demand(messages=len(table))
    if table.empty:
        return d
    start = table["t_start_ns"].to_numpy(dtype=np.float64)
    end = np.maximum(table["t_end_ns"].to_numpy(dtype=np.float64), start + 1)
    n_windows = int(math.ceil(end.max() / WINDOW_NS)) + 1
    bits = table["emulated"].to_numpy(dtype=np.float64) * 8
    hops = table["hops"].to_numpy()
    bins = int(math.ceil(end.max() / BIN_NS)) + 2
    per_window = WINDOW_NS // BIN_NS
    for length in np.unique(hops):
        if length == 0:
            continue
        m = hops == length
        s, e, b = start[m] / BIN_NS, end[m] / BIN_NS, bits[m] * length
        rate = b / (e - s)  # bits per bin while the message lasts
        first, last = np.floor(s).astype(np.int64), np.floor(e).astype(np.int64)
        grid = np.zeros(bins + 2)
        np.add.at(grid, first, rate)  # the whole bins first..last, then the parts of the
        np.add.at(grid, last + 1, -rate)  # first and last bin outside [s, e] come off
        per_bin = np.cumsum(grid)[: bins + 1]
        np.add.at(per_bin, first, -rate * (s - first))
        np.add.at(per_bin, last, -rate * (last + 1 - e))
        per_bin = np.pad(per_bin, (0, max(0, n_windows * per_window - len(per_bin))))
        windows = per_bin[: n_windows * per_window].reshape(-1, per_window).sum(axis=1)
        d.hop_bits[int(length)] = windows
    size = table["emulated"].to_numpy()
    cost = np.maximum(hops, 1).astype(np.float64)  # a message costs each switch it crosses
    for cls, mask in (("small", size <= SMALL_BYTES), ("bulk", size > SMALL_BYTES)):
        if mask.any():
            w = (start[mask] // WINDOW_NS).astype(np.int64)
            d.starts[cls] = np.bincount(w, weights=cost[mask], minlength=n_windows)
    tcp = table[table["proto"] == "tcp"] if "proto" in table else table
    if connection == "persistent":
        key = ["src", "dst", "dscp"] + (["lane"] if "lane" in tcp else [])
        d.connections = len(tcp[key].drop_duplicates()) if len(tcp) else 0
    else:
        t = np.concatenate([tcp["t_start_ns"].to_numpy(float), tcp["t_end_ns"].to_numpy(float)])
        steps = np.concatenate([np.ones(len(tcp)), -np.ones(len(tcp))])
        d.connections = int(np.cumsum(steps[np.argsort(t, kind="stable")]).max()) if len(t) else 0
    if workload is not None:
        d.by_workload[workload] = {
            "messages": float(len(table)),
            "peak_messages_per_s": d.peak_messages_per_s(),
            "peak_switch_hop_mbps": d.peak_switch_hop_mbps(),
        }
    return d


def schedule_demand(
    schedule: pd.DataFrame,
    fabric: Fabric,
    scale: float,
    connection: str = "persistent",
    workload_of: Mapping[int, int] | None = None,
) -> Demand:
    """Demand of a static schedule (rows waiting for a group are placed by the fluid
    simulator); ``workload_of``: flow id -> workload index, for the per-workload figures."""
    if schedule.empty:
        return Demand()
    rows = schedule
    if (rows["after"] >= 0).any():
        rows = _simulated_schedule(rows, fabric, scale)
    else:
        rows = rows.assign(t_start_ns=rows["t_sched_ns"])
    table = message_table(rows, fabric, scale)
    if not workload_of:
        return demand_of(table, connection)
    index = table["flow_id"].map(workload_of)
    out = Demand()
    for w in sorted(index.dropna().unique()):
        out = out + demand_of(table[index == w], connection, int(w))
    return out


def driver_demand(
    driver: Any,
    fabric: Fabric,
    scale: float,
    connection: str = "persistent",
    workload: int | None = None,
) -> Demand:
    """Demand of a live driver, from its run under the fluid simulator (real-equivalent
    rates, so the instants are those of the real fabric)."""
    result = simulate(driver, fabric_rate(fabric, 1.0))
    flows = result.flows
    if flows.empty:
        return Demand()
    flows = flows.assign(scaled=True, proto="tcp", dscp=0)
    table = message_table(flows.drop(columns=["t_end_ns"]), fabric, scale)
    return demand_of(table, connection, workload)


MESSAGE_COLUMNS = ["src", "dst", "bytes", "scaled", "proto", "dscp", "t_start_ns"]


def plan_messages(
    schedule: pd.DataFrame, driver: Any, fabric: Fabric, scale: float
) -> pd.DataFrame:
    """Every message of a plan with its start instant, placed as ``schedule_demand`` and
    ``driver_demand`` place them (``MESSAGE_COLUMNS``; ``bytes`` real-equivalent). The
    driver is run to its end under the fluid simulator: pass one no run will use."""
    parts = []
    if not schedule.empty:
        if (schedule["after"] >= 0).any():
            parts.append(_simulated_schedule(schedule, fabric, scale))
        else:
            parts.append(schedule.assign(t_start_ns=schedule["t_sched_ns"]))
    if driver is not None:
        flows = simulate(driver, fabric_rate(fabric, 1.0)).flows
        if not flows.empty:
            parts.append(flows.assign(scaled=True, proto="tcp", dscp=0))
    if not parts:
        return pd.DataFrame(columns=MESSAGE_COLUMNS)
    return pd.concat([p[MESSAGE_COLUMNS] for p in parts], ignore_index=True)


def _simulated_schedule(schedule: pd.DataFrame, fabric: Fabric, scale: float) -> pd.DataFrame:
    """Start instants of a schedule with completion groups, from the fluid simulator."""
    from traffic.workloads.replay import ScheduleDriver

    result = simulate(ScheduleDriver(schedule), fabric_rate(fabric, 1.0))
    starts = dict(zip(result.flows["flow_id"], result.flows["t_start_ns"], strict=True))
    out = schedule.copy()
    out["t_start_ns"] = out["flow_id"].map(starts).fillna(out["t_sched_ns"]).astype(np.int64)
    return out

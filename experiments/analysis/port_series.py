"""Switch-egress samples as numpy arrays, one series per port, folded without a pandas
groupby (pure: arrays in, arrays out).

    ports = PortIds()
    pid = ports.of(queues)                        # each row's port as a small integer
    order, starts = series(pid, queues["t_ns"])   # rows by port, then time; each port's first
    n, span_ns, sent = standing_stretches(pid[order], t[order], ...)

A run's queue table is every port's samples interleaved in time (``t_ns, node, port,
...``, see ``experiments.measurement.samplers``); these functions sort it once, by port
then time (stable: equal times keep their order), and work on all ports at once, so a
chunk of 8,000 samples of 40 ports costs a few array passes instead of 40 groups.
``experiments.analysis.fidelity.busy_dequeue`` judges a whole run with them and
``experiments.analysis.standing.Standing`` each chunk of a run as it goes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa


def column(rows: pd.DataFrame | pa.Table, name: str, dtype: type) -> np.ndarray:
    """Column ``name`` of a frame or an Arrow table as a numpy array of ``dtype``."""
    if isinstance(rows, pa.Table):
        return rows.column(name).to_numpy().astype(dtype, copy=False)
    return rows[name].to_numpy(dtype=dtype)


class PortIds:
    """A stable small integer for each (node, port) seen, in order of first sight."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, int], int] = {}
        self.keys: list[tuple[str, int]] = []

    def of(self, rows: pd.DataFrame | pa.Table) -> np.ndarray:
        """Each row's port id (``node`` and ``port`` columns of a frame or an Arrow
        table: a chunk read for the live view is never made a frame)."""
        if isinstance(rows, pa.Table):
            nodes = rows.column("node").combine_chunks().dictionary_encode()
            node_code = nodes.indices.to_numpy(zero_copy_only=False)
            node_names = nodes.dictionary.to_pylist()
        else:
            node_code, node_names = pd.factorize(rows["node"])
        port = column(rows, "port", np.int64)
        pair = node_code.astype(np.int64) << 32 | port
        unique, inverse = np.unique(pair, return_inverse=True)
        local = np.empty(unique.size, dtype=np.int64)
        for i, p in enumerate(unique.tolist()):
            key = (str(node_names[p >> 32]), int(p & 0xFFFFFFFF))
            if key not in self.index:
                self.index[key] = len(self.keys)
                self.keys.append(key)
            local[i] = self.index[key]
        return local[inverse.reshape(-1)]

    def values(self, by_port: Mapping[tuple[str, int], float]) -> np.ndarray:
        """``by_port``'s value of each port id (0.0 where it has none)."""
        return np.array([by_port.get(k) or 0.0 for k in self.keys], dtype=np.float64)


def series(pid: np.ndarray, t: object) -> tuple[np.ndarray, np.ndarray]:
    """The order that sorts rows by port, then time (stable), and the index in that
    order where each port's series starts."""
    t = np.asarray(t, dtype=np.int64)
    if t.size < 2 or bool((t[1:] >= t[:-1]).all()):  # as sampled: only the ports to sort
        order = np.argsort(pid, kind="stable")
    else:
        order = np.lexsort((t, pid))
    sorted_pid = pid[order]
    starts = np.flatnonzero(np.r_[True, sorted_pid[1:] != sorted_pid[:-1]]) if pid.size else pid
    return order, starts


def standing_stretches(
    pid: np.ndarray,
    t: np.ndarray,
    sent: np.ndarray,
    backlog_pkts: np.ndarray,
    backlog_bytes: np.ndarray,
    rate_bps: np.ndarray,
    min_ns: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per port id (arrays as long as ``rate_bps``): stretches where its queue stood for
    ≥ ``min_ns``, their summed span (ns) and the bytes sent over them; rows sorted by
    port, then time (``series``). The rule is ``fidelity.busy_dequeue``'s: an interval
    (a sample to the port's next) stood if the queue was non-empty at both ends, the
    sent counter did not go backwards, time moved, and, where the port's rate is known
    (``rate_bps`` > 0), it held at its start what the port can send in the interval."""
    nports = rate_bps.size
    dt = np.diff(t)
    up = backlog_pkts > 0
    busy = (pid[1:] == pid[:-1]) & up[:-1] & up[1:] & (np.diff(sent) >= 0) & (dt > 0)
    rate = rate_bps[pid[:-1]]
    busy &= backlog_bytes[:-1] * 8 >= rate * dt / 1e9
    edges = np.diff(np.concatenate(([0], busy.astype(np.int8), [0])))
    start, end = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # samples start..end
    span = t[end] - t[start]
    keep = span >= min_ns
    where = pid[start[keep]]
    count = np.bincount(where, minlength=nports)
    span_ns = np.bincount(where, weights=span[keep].astype(np.float64), minlength=nports)
    nbytes = (sent[end] - sent[start])[keep].astype(np.float64)
    return count, span_ns, np.bincount(where, weights=nbytes, minlength=nports)

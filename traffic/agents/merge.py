"""The schedule as agents read it, and the agents' records merged back into one
row per message (pure: no process, no socket).

- ``plan``: a schedule with what agents need (``bytes_emulated``, wire codes).
- ``agent_rows`` / ``message_row``: a planned row or a live driver's message in
  the compact form a worker loads (``src`` names the sending host).
- ``flows_table``: planned rows, the driver's messages, the coordinator's
  outcome of each flow and the workers' ``Sent``/``Received`` records -> the
  ``flows.parquet`` table (``FLOW_COLUMNS``), one row per message.
- ``with_records``: the workers' records laid over rows of that table (rows saved
  during the run, before the records were collected).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from topologies.scale import Scale

from ..driver import Message
from ..header import KIND_CODES
from ..wire import scale_bytes
from .records import Received, Sent

FLOW_COLUMNS = [
    "flow_id",
    "kind",
    "tenant",
    "src",
    "dst",
    "bytes",
    "bytes_real",
    "dscp",
    "proto",
    "request_id",
    "layer",
    "chunk",
    "round",
    "step",
    "barrier",
    "after",
    "t_release_ns",
    "t_sched_ns",
    "t_issue_ns",
    "t_start_ns",
    "t_end_ns",
    "fct_ms",
    "lateness_ms",
    "issue_lateness_ms",
    "ok",
    "error",
    "cc",
    "connection",
]
_PLAN_COLUMNS = [
    "flow_id",
    "kind",
    "tenant",
    "src",
    "dst",
    "bytes",
    "bytes_emulated",
    "dscp",
    "proto",
    "request_id",
    "layer",
    "chunk",
    "round",
    "step",
    "barrier",
    "after",
    "t_sched_ns",
]


def tenant_codes(schedule: pd.DataFrame, more: Iterable[str] | None = None) -> dict[str, int]:
    """Tenants numbered in sorted order (the header's tenant field)."""
    names = set(schedule["tenant"].astype(str)) | set(more or [])
    return {t: i for i, t in enumerate(sorted(names))}


def plan(
    schedule: pd.DataFrame, scale: Scale, tenants: dict[str, int] | None = None
) -> pd.DataFrame:
    """The schedule with what agents need: ``bytes_emulated`` (scaled, header included),
    ``kind_code`` and ``tenant_code`` (``tenants``, default: ``tenant_codes``), and
    ``t_sched_ns`` on the wall clock (``× scale.d``: the schedule is real-equivalent)."""
    if not isinstance(scale, Scale):
        raise TypeError(f"scale={scale!r}; must be a topologies.scale.Scale")
    out = schedule.copy()
    if scale.d != 1:
        out["t_sched_ns"] = np.ceil(out["t_sched_ns"].to_numpy() * scale.d).astype("int64")
    out["bytes_emulated"] = [
        scale_bytes(int(b), bool(s), scale)
        for b, s in zip(out["bytes"], out["scaled"], strict=True)
    ]
    out["kind_code"] = out["kind"].map(KIND_CODES).astype("int64")
    tenants = tenants if tenants is not None else tenant_codes(out)
    out["tenant_code"] = out["tenant"].astype(str).map(tenants).astype("int64")
    return out


def message_row(
    m: Message, scale: Scale, tenants: Mapping[str, int], ips: Mapping[str, str]
) -> dict:
    """A live driver's message in the agent's compact form, ``t`` absolute."""
    if m.src == m.dst:
        raise ValueError(f"flow {m.flow_id}: src and dst are both {m.src}")
    return {
        "fid": m.flow_id,
        "kind": KIND_CODES[m.kind],
        "tenant": tenants[m.tenant],
        "src": m.src,
        "dst": m.dst,
        "ip": ips[m.dst],
        "bytes": scale_bytes(m.bytes, m.scaled, scale),
        "t": int(m.t_ns),
        "req": m.request_id,
        "layer": m.layer,
        "chunk": m.chunk,
        "dscp": m.dscp,
        "lane": 0,  # a live driver's messages share a pair's one connection per DSCP
        "after": -1,
        "proto": m.proto,
    }


def agent_rows(planned: pd.DataFrame, hosts: Iterable[str], ips: Mapping[str, str]) -> list[dict]:
    """The rows ``hosts`` send, in the agent's compact form."""
    mine = planned[planned["src"].isin(list(hosts))]
    return [
        {
            "fid": int(r.flow_id),
            "kind": int(r.kind_code),
            "tenant": int(r.tenant_code),
            "src": r.src,
            "dst": r.dst,
            "ip": ips[r.dst],
            "bytes": int(r.bytes_emulated),
            "t": int(r.t_sched_ns),
            "req": int(r.request_id),
            "layer": int(r.layer),
            "chunk": int(r.chunk),
            "dscp": int(r.dscp),
            "lane": int(getattr(r, "lane", 0)),  # a live driver's frame has none
            "after": int(r.after),
            "proto": r.proto,
        }
        for r in mine.itertuples(index=False)
    ]


def live_frame(messages: Sequence[Message], scale: Scale) -> pd.DataFrame:
    """A driver's messages as planned rows (``t_sched_ns`` 0: sent at their release)."""
    n = len(messages)
    cols = {
        c: [getattr(m, c) for m in messages]
        for c in (
            "flow_id",
            "kind",
            "tenant",
            "src",
            "dst",
            "bytes",
            "dscp",
            "proto",
            "request_id",
            "layer",
            "chunk",
            "step",
        )
    }
    cols["bytes_emulated"] = [scale_bytes(m.bytes, m.scaled, scale) for m in messages]
    for c in ("round", "barrier", "after"):
        cols[c] = [-1] * n
    cols["t_sched_ns"] = [0] * n
    return pd.DataFrame(cols, columns=_PLAN_COLUMNS)


def flows_table(
    planned: pd.DataFrame,
    live: pd.DataFrame | None,
    outcomes: Mapping[int, tuple[bool, str]],
    release_ns: Mapping[int, int],
    t_end: Mapping[int, int],
    sent: Iterable[Sent],
    received: Iterable[Received],
    cc: str,
    connection: str,
) -> pd.DataFrame:
    """One row per message (``FLOW_COLUMNS``): the plan, what happened and when.

    ``outcomes``/``release_ns``/``t_end``: the coordinator's view (``deps``);
    ``sent``/``received``: every worker's records (``with_records``)."""
    p = planned[_PLAN_COLUMNS]
    if live is not None and len(live):
        p = pd.concat([p, live[_PLAN_COLUMNS]], ignore_index=True)
    fids = p["flow_id"].tolist()
    out = pd.DataFrame(
        {
            "flow_id": p["flow_id"].to_numpy(),
            "kind": p["kind"].to_numpy(),
            "tenant": p["tenant"].to_numpy(),
            "src": p["src"].to_numpy(),
            "dst": p["dst"].to_numpy(),
            "bytes": p["bytes_emulated"].to_numpy(),
            "bytes_real": p["bytes"].to_numpy(),
            "dscp": p["dscp"].to_numpy(),
            "proto": p["proto"].to_numpy(),
        }
    )
    for c in ("request_id", "layer", "chunk", "round", "step", "barrier", "after"):
        out[c] = p[c].to_numpy()
    settled = [outcomes[fid] for fid in fids]
    ok = [o[0] for o in settled]
    out["t_release_ns"] = pd.array([release_ns.get(fid) for fid in fids], dtype="Int64")
    out["t_sched_ns"] = out["t_release_ns"] + p["t_sched_ns"].to_numpy()
    ends = [t_end.get(fid) if good else None for fid, good in zip(fids, ok, strict=True)]
    out["t_end_ns"] = pd.array(ends, dtype="Int64")
    out["ok"] = np.asarray(ok, dtype=bool)
    out["error"] = [o[1] for o in settled]
    return with_records(out, sent, received, cc, connection)


def with_records(
    flows: pd.DataFrame,
    sent: Iterable[Sent],
    received: Iterable[Received],
    cc: str,
    connection: str,
) -> pd.DataFrame:
    """``flows`` (the coordinator's columns) with what the workers recorded laid over
    it, and the columns that follow: ``t_issue_ns`` and ``t_start_ns`` from the sender
    (the receiver's header instant if the sender recorded none), the most precise
    error of a failed flow (the sender's, else the receiver's, else the coordinator's),
    ``fct_ms``, the two latenesses, ``cc`` and ``connection``."""
    by_sent = {r.flow_id: r for r in sent}
    by_recv = {r.flow_id: r for r in received}
    issue, start, errors = [], [], []
    for fid, ok, err in zip(
        flows["flow_id"].tolist(), flows["ok"].tolist(), flows["error"].tolist(), strict=True
    ):
        s, r = by_sent.get(fid), by_recv.get(fid)
        if not ok and s is not None and s.error:
            err = s.error
        elif not ok and r is not None and r.error:
            err = r.error
        issue.append(s.t_issue_ns if s else None)
        start.append(s.t_start_ns if s else (r.t_send_ns if r else None))
        errors.append(err)
    out = flows.copy()
    out["t_issue_ns"] = pd.array(issue, dtype="Int64")
    out["t_start_ns"] = pd.array(start, dtype="Int64")
    out["fct_ms"] = _ms(out["t_end_ns"] - out["t_start_ns"])
    out["lateness_ms"] = _ms(out["t_start_ns"] - out["t_sched_ns"])
    # The agent's own lag: start also waits for a persistent connection that is
    # still busy with earlier messages (head-of-line blocking, as in any transport
    # library), which is the workload's behaviour, not the emulator's.
    out["issue_lateness_ms"] = _ms(out["t_issue_ns"] - out["t_sched_ns"])
    out["error"] = errors
    out["cc"] = cc
    out["connection"] = connection
    return out[FLOW_COLUMNS]


def _ms(ns: pd.Series) -> np.ndarray:
    return (ns / 1e6).to_numpy(dtype="float64", na_value=np.nan)

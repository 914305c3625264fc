"""What each injected fault did to the traffic, in ms from the fault's time zero (the
injector's ``t_start_ns``, else ``t_ns``: :mod:`.faults`).

- ``first_probe_ms``: when probe traffic got through again. Per probe pair (``src->dst``
  of ``kind`` "probe" flows, one datagram each, timed by when it was sent: ``t_start_ns``,
  else ``t_sched_ns``), the probes lost (not ok) that were sent from time zero until the
  next fault's time zero are the pair's outage; it ends at the first ok probe sent after
  the last of them, whenever that is. The fault's figure is the latest end over the pairs
  hit; None when some hit pair never got one through. ``probes_lost`` counts the outage's
  probes and ``probe_pairs_hit`` its pairs. With none lost it is the first ok probe sent
  from time zero (``probes_lost`` 0): the probes' own spacing, not an outage. All three
  are None in a run without probes. A probe lost to congestion in that span counts too.
- ``back_to_rate_ms`` and the rest of the rate figures: :mod:`.fault_rate`.
- ``affected``: the traffic in the fault's window, from time zero to its end (the undoing
  fault's time zero: a ``link_down``'s next ``link_up`` of that link, a ``switch_down``'s
  ``switch_up``, a ``link_degrade``'s next degrade of the link, a ``controller_down``'s
  ``controller_up`` ready instant; a flap's last operation), else one second
  (``window_ms`` says which). Flows (probes left out, they have their own figures) whose
  [start, end] meets the window, i.e. in flight at time zero or started before the
  window's end: ``flows, bytes`` (as scheduled), ``failed`` and ``errors`` (the most
  common reasons). Requests whose [arrival, arrival + e2e] meets it (an unserved one lives
  to the run's end): ``requests, requests_failed`` (unserved) and their TTFT p50 beside
  that of the other requests (``ttft_p50_ms``, ``others_ttft_p50_ms``).
- ``controller_down``: the flows (probes left out) started in the window,
  ``flows_started``, and how many of them failed, ``flows_started_failed``.
- ``agent_kill``: the host's flows (as source or destination, probes included) in flight
  at the kill or started after it: ``host_flows``, ``host_flows_failed``, ``host_errors``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.fault_rate import rate_recovery
from experiments.analysis.metrics.flows import ok_mask

DEFAULT_WINDOW_NS = 1_000_000_000
TOP_ERRORS = 3


def impact(
    row: dict[str, Any],
    t0: int,
    horizon: int | None,
    end: int | None,
    fabric: Any,
    *,
    flows: pd.DataFrame | None,
    links: pd.DataFrame | None,
    requests: pd.DataFrame | None,
) -> dict[str, Any]:
    """The data-plane figures of the fault ``row`` (see the module doc) with time zero
    ``t0``, the next fault's at ``horizon`` and its own end at ``end`` (None: unknown)."""
    end = end if end is not None else t0 + DEFAULT_WINDOW_NS
    if flows is not None and not {"t_start_ns", "t_end_ns", "src", "dst"} <= set(flows):
        flows = None  # an empty table, as after an interrupted run
    out = probe_recovery(flows, t0, horizon) | rate_recovery(links, t0, fabric)
    out["window_ms"] = ms_after(t0, end)
    out["affected"] = affected(flows, requests, t0, end)
    if row["fault"] == "controller_down":
        out |= _started(flows, t0, end)
    if row["fault"] == "agent_kill":
        out |= _host_flows(flows, row.get("node"), t0)
    return out


def probe_recovery(flows: pd.DataFrame | None, t0: int, horizon: int | None) -> dict[str, Any]:
    """``first_probe_ms, probes_lost, probe_pairs_hit`` (module doc)."""
    probes = _of_kind(flows, "probe")
    if probes is None or probes.empty:
        return {"first_probe_ms": None, "probes_lost": None, "probe_pairs_hit": None}
    sent = _start_ns(probes)
    ok = ok_mask(probes).to_numpy()
    pair = (probes["src"].astype(str) + "->" + probes["dst"].astype(str)).to_numpy()
    after = sent >= t0
    lost = ~ok & after & (sent < (np.inf if horizon is None else horizon))
    if not lost.any():
        first = sent[ok & after]
        return {
            "first_probe_ms": ms_after(t0, first.min() if first.size else None),
            "probes_lost": 0,
            "probe_pairs_hit": 0,
        }
    hit = sorted(set(pair[lost]))
    ends = []
    for p in hit:
        last_lost = sent[lost & (pair == p)].max()
        through = sent[ok & (pair == p) & (sent > last_lost)]
        ends.append(through.min() if through.size else None)
    worst = None if None in ends else max(ends)
    return {
        "first_probe_ms": ms_after(t0, worst),
        "probes_lost": int(lost.sum()),
        "probe_pairs_hit": len(hit),
    }


def affected(
    flows: pd.DataFrame | None, requests: pd.DataFrame | None, t0: int, end: int
) -> dict[str, Any]:
    """The flows and requests the window [``t0``, ``end``) touched (module doc)."""
    out: dict[str, Any] = dict.fromkeys(("flows", "bytes", "failed", "errors"))
    work = _workload(flows)
    if work is not None:
        start, stop = _start_ns(work), _end_ns(work)
        hit = work[(start < end) & (stop >= t0)]
        failed = hit[~ok_mask(hit)]
        out |= {
            "flows": len(hit),
            "bytes": int(hit["bytes"].sum()),
            "failed": len(failed),
            "errors": _errors(failed),
        }
    out |= dict.fromkeys(("requests", "requests_failed", "ttft_p50_ms", "others_ttft_p50_ms"))
    if requests is not None and "arrival_ns" in requests and "ttft_ms" in requests:
        arrival = requests["arrival_ns"].to_numpy(dtype=float)
        e2e = requests["e2e_ms"].to_numpy(dtype=float) if "e2e_ms" in requests else np.nan
        gone = np.where(np.isfinite(e2e), arrival + e2e * 1e6, np.inf)
        hit = (arrival < end) & (gone >= t0)
        ttft = requests["ttft_ms"].to_numpy(dtype=float)
        unserved = ~np.isfinite(ttft)
        if "served" in requests:
            unserved |= ~requests["served"].fillna(False).astype(bool).to_numpy()
        out |= {
            "requests": int(hit.sum()),
            "requests_failed": int((hit & unserved).sum()),
            "ttft_p50_ms": _p50(ttft[hit]),
            "others_ttft_p50_ms": _p50(ttft[~hit]),
        }
    return out


def _started(flows: pd.DataFrame | None, t0: int, end: int) -> dict[str, Any]:
    work = _workload(flows)
    if work is None:
        return {"flows_started": None, "flows_started_failed": None}
    start = _start_ns(work)
    began = work[(start >= t0) & (start < end)]
    return {"flows_started": len(began), "flows_started_failed": int((~ok_mask(began)).sum())}


def _host_flows(flows: pd.DataFrame | None, node: Any, t0: int) -> dict[str, Any]:
    if flows is None or node is None:
        return {"host_flows": None, "host_flows_failed": None, "host_errors": None}
    mine = flows[(flows["src"] == node) | (flows["dst"] == node)]
    after = mine[_end_ns(mine) >= t0]
    failed = after[~ok_mask(after)]
    return {
        "host_flows": len(after),
        "host_flows_failed": len(failed),
        "host_errors": _errors(failed),
    }


def ms_after(t0: int, t: Any) -> float | None:
    """``t`` in ms after ``t0`` (both ns), None for an unknown ``t``."""
    if t is None or (isinstance(t, float) and not np.isfinite(t)):
        return None
    return round((int(t) - t0) / 1e6, 3)


def _workload(flows: pd.DataFrame | None) -> pd.DataFrame | None:
    """The flows but probes."""
    if flows is None or "kind" not in flows:
        return flows
    return flows[flows["kind"] != "probe"]


def _of_kind(flows: pd.DataFrame | None, kind: str) -> pd.DataFrame | None:
    if flows is None or "kind" not in flows:
        return None
    return flows[flows["kind"] == kind]


def _start_ns(flows: pd.DataFrame) -> np.ndarray:
    """When each flow started (its schedule where it never did); NaN: neither known."""
    start = flows["t_start_ns"].astype(float)
    if "t_sched_ns" in flows:
        start = start.fillna(flows["t_sched_ns"].astype(float))
    return start.to_numpy()


def _end_ns(flows: pd.DataFrame) -> np.ndarray:
    """When each flow ended; one with no recorded end is taken to last the whole run."""
    return flows["t_end_ns"].astype(float).fillna(np.inf).to_numpy()


def _errors(failed: pd.DataFrame) -> dict[str, int]:
    if "error" not in failed:
        return {"no error recorded": len(failed)} if len(failed) else {}
    reasons = Counter(str(e) for e in failed["error"].fillna("no error recorded"))
    return dict(reasons.most_common(TOP_ERRORS))


def _p50(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else None

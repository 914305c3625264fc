"""The peak second against the rest, from requests.parquet: what production burstiness
(FineServe: a peak second absorbing up to 18 % of an hour's requests) does to the
requests that arrive in it.

The *peak second* is the busiest one-second interval of the run's arrivals: of all
intervals [t, t + 1 s) that start at an arrival, the one holding the most arrivals (the
earliest on a tie). Its requests are set against every other request of the run (the
*rest*). Per group: TTFT; the time from arrival to the end of prefill (``prefill_ms``:
queueing plus compute, so with the same prompt sizes a longer one is queueing); and
the prefill backlog a request met (``requests_ahead``: earlier requests whose prefill
had not ended when it arrived); and its KV transfer (``kv_transfer_ms``: the fabric's
share of the burst). Only open-loop requests count (``session_id`` < 0):
a session's turns arrive when the previous one ends, so they cannot burst.

Columns read: ``arrival_ns``, ``ttft_ms``, ``prefill_end_ns`` (NaN: never prefilled,
it counts as still ahead), ``kv_transfer_ms`` and ``session_id`` when present.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.stats import latency_stats, value_stats

SECOND_NS = 1_000_000_000


def busiest_second(arrival_ns: np.ndarray) -> tuple[int, int]:
    """(index of the first arrival, number of arrivals) of the busiest interval
    [t, t + 1 s) starting at an arrival; ``arrival_ns`` sorted ascending."""
    ends = np.searchsorted(arrival_ns, arrival_ns + SECOND_NS, side="left")
    counts = ends - np.arange(len(arrival_ns))
    start = int(np.argmax(counts))
    return start, int(counts[start])


def requests_ahead(arrival_ns: np.ndarray, prefill_end_ns: np.ndarray) -> np.ndarray:
    """Per request (sorted by arrival): earlier requests still waiting for or in prefill
    at its arrival."""
    end = np.sort(np.where(np.isnan(prefill_end_ns), np.inf, prefill_end_ns))
    # a prefill ends after its arrival, so every prefill ended by t arrived before t
    done = np.searchsorted(end, arrival_ns, side="right")
    return np.maximum(np.arange(len(arrival_ns)) - done, 0)


def peak_second_metrics(requests: pd.DataFrame) -> dict[str, Any] | None:
    """``{requests, span_s, mean_per_s, peak, rest, peak_over_rest_ttft_p50}`` where
    ``peak`` is ``{start_s, share, requests, unserved, ttft_ms, prefill_ms, kv_transfer_ms,
    requests_ahead}`` (``start_s`` from the first arrival; ``share`` of all requests; an
    unserved request is in no latency) and ``rest`` the same
    without ``start_s``/``share``; None with fewer than two open-loop arrivals or when
    they all fall within one second (no rest to compare)."""
    rows = requests
    if "session_id" in rows:
        rows = rows[rows["session_id"].astype(float) < 0]
    rows = rows[rows["arrival_ns"].notna()].sort_values("arrival_ns", kind="stable")
    t = rows["arrival_ns"].to_numpy(dtype=float)
    if len(t) < 2 or t[-1] - t[0] < SECOND_NS:
        return None
    start, count = busiest_second(t)
    in_peak = np.zeros(len(t), dtype=bool)
    in_peak[start : start + count] = True
    if "prefill_end_ns" in rows:
        prefill_end = rows["prefill_end_ns"].to_numpy(dtype=float)
    else:
        prefill_end = np.full(len(t), np.nan)
    ahead = requests_ahead(t, prefill_end).astype(float)
    prefill_ms = (prefill_end - t) / 1e6
    ttft = rows["ttft_ms"].to_numpy(dtype=float)
    kv = rows["kv_transfer_ms"].to_numpy(dtype=float) if "kv_transfer_ms" in rows else ttft * np.nan

    def group(mask: np.ndarray) -> dict[str, Any]:
        return {
            "requests": int(mask.sum()),
            "unserved": int(np.isnan(ttft[mask]).sum()),
            "ttft_ms": latency_stats(ttft[mask]),
            "prefill_ms": latency_stats(prefill_ms[mask]),
            "kv_transfer_ms": latency_stats(kv[mask]),
            "requests_ahead": value_stats(ahead[mask]),
        }

    peak, rest = group(in_peak), group(~in_peak)
    span_s = (t[-1] - t[0]) / SECOND_NS
    peak_p50, rest_p50 = peak["ttft_ms"]["p50"], rest["ttft_ms"]["p50"]
    return {
        "requests": len(t),
        "span_s": span_s,
        "mean_per_s": len(t) / span_s,
        "peak": {"start_s": (t[start] - t[0]) / SECOND_NS, "share": count / len(t)} | peak,
        "rest": rest,
        "peak_over_rest_ttft_p50": peak_p50 / rest_p50 if peak_p50 and rest_p50 else None,
    }

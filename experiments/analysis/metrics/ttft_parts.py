"""Each request's time to first token, split where the run's own records split it
(pure): from its arrival to the end of its prefill (waiting for an instance, and the
prefill itself), the KV transfer still running after the prefill ended (what the fabric
added), and the decode start (waiting for the decode batch and its first step).

The prefill's end is where the request's KV transfer was scheduled: its one message
(``monolithic``) or its last layer's (``layer_pipelined``, each layer sent when it is
computed). The three parts add up to the TTFT exactly (arrival to first token); only
disaggregated serving moves KV, so a colocated run has no split.
"""

from __future__ import annotations

import pandas as pd

PARTS = ("wait_and_prefill_ms", "kv_after_prefill_ms", "decode_start_ms")
LABELS = {
    "wait_and_prefill_ms": "waiting + prefill",
    "kv_after_prefill_ms": "KV transfer after prefill",
    "decode_start_ms": "decode start",
}


def ttft_parts(
    requests: pd.DataFrame | None, flows: pd.DataFrame | None, transfer: str = "monolithic"
) -> pd.DataFrame | None:
    """One row per served request with KV transfers, in arrival order: ``request_id``,
    ``arrival_s`` (after the first arrival), ``ttft_ms`` and the ``PARTS`` (ms); None
    when the run moved no KV."""
    if requests is None or flows is None or not len(requests) or "request_id" not in flows:
        return None
    kv = flows[(flows["kind"] == "kv_transfer") & flows["request_id"].notna()]
    if not len(kv):
        return None
    sent = kv.groupby("request_id")["t_sched_ns"]
    per = pd.DataFrame(
        {
            "prefill_end_ns": sent.min() if transfer == "monolithic" else sent.max(),
            "kv_end_ns": kv.groupby("request_id")["t_end_ns"].max(),
        }
    )
    needed = ["request_id", "arrival_ns", "first_token_ns"]
    if not set(needed) <= set(requests.columns):
        return None
    served = requests[requests["served"].astype(bool)] if "served" in requests else requests
    req = served[needed].merge(per, left_on="request_id", right_index=True, how="inner")
    if not len(req):
        return None
    req = req.sort_values("arrival_ns", kind="stable")
    arrival, first = req["arrival_ns"].astype(float), req["first_token_ns"].astype(float)
    prefill_end, kv_end = req["prefill_end_ns"].astype(float), req["kv_end_ns"].astype(float)
    ready = pd.concat([prefill_end, kv_end], axis=1).max(axis=1)
    return pd.DataFrame(
        {
            "request_id": req["request_id"].to_numpy(),
            "arrival_s": ((arrival - arrival.min()) / 1e9).to_numpy(),
            "ttft_ms": ((first - arrival) / 1e6).to_numpy(),
            "wait_and_prefill_ms": ((prefill_end - arrival) / 1e6).to_numpy(),
            "kv_after_prefill_ms": ((ready - prefill_end) / 1e6).to_numpy(),
            "decode_start_ms": ((first - ready) / 1e6).to_numpy(),
        }
    )

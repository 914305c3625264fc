"""Agentic-session metrics from requests.parquet: what a session's user waits for and how
much of each turn's prompt the prefix cache spared.

A session's rows share ``session_id`` (``-1``: an open-loop request, not a session) and
are numbered by ``turn``. Its *completion time* runs from its first turn's arrival to its
last turn's last token; a session with an unserved turn has none and is counted as
incomplete. The *hit rate* of a set of turns is their cached prompt tokens over their
prompt tokens; the *reusable rate* is what an infinite, perfectly routed cache could
give the later turns: the previous turn's full 512-token blocks over the prompt.

How tails compound over a session's turns: its *waiting* is the sum of its turns' TTFTs
(what the user waits for the model, tool calls excluded; complete sessions only), and
``slow_turns`` counts the sessions with at least one turn slower than the run's
per-turn TTFT p90, beside what independent turns would give, 1 − 0.9^turns averaged
over the sessions: a session of n turns meets the per-turn tail n times.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.analysis.metrics.stats import latency_stats, value_stats

BLOCK_TOKENS = 512  # as traffic.traces: a session reuses its previous prompt's full blocks


def _hit_rate(turns: pd.DataFrame) -> float | None:
    prompt = float(turns["input_tokens"].sum())
    return float(turns["cached_tokens"].sum()) / prompt if prompt > 0 else None


def session_metrics(requests: pd.DataFrame) -> dict[str, Any] | None:
    """``{sessions, completed, turns, completion_ms, ttft_ms: {first_turn, later_turns},
    hit_rate: {first_turn, later_turns}, reusable_rate, by_turn: [...]}``, or None when
    the run has no sessions. ``by_turn`` holds, per turn index, ``{turn, requests, served,
    ttft_p50_ms, hit_rate}``."""
    if "session_id" not in requests or not (requests["session_id"] >= 0).any():
        return None
    rows = requests[requests["session_id"] >= 0].sort_values(["session_id", "turn"])
    ttft = rows["ttft_ms"].astype(float)
    served = ttft.notna()
    end_ns = rows["arrival_ns"] + rows["e2e_ms"].astype(float) * 1e6
    by_session = rows.assign(end_ns=end_ns, served=served).groupby("session_id")
    complete = by_session["served"].all()
    span_ms = (by_session["end_ns"].max() - by_session["arrival_ns"].min()) / 1e6
    first, later = rows[rows["turn"] == 0], rows[rows["turn"] > 0]
    previous = rows.groupby("session_id")["input_tokens"].shift(1)
    reusable = (previous[rows["turn"] > 0] // BLOCK_TOKENS * BLOCK_TOKENS).sum()
    later_prompt = float(later["input_tokens"].sum())
    by_turn = []
    for turn, group in rows.groupby("turn"):
        t = group["ttft_ms"].astype(float)
        by_turn.append(
            {
                "turn": int(turn),
                "requests": len(group),
                "served": int(t.notna().sum()),
                "ttft_p50_ms": float(t.median()) if t.notna().any() else None,
                "ttft_p99_ms": float(t.quantile(0.99)) if t.notna().any() else None,
                "hit_rate": _hit_rate(group),
            }
        )
    return {
        "sessions": int(by_session.ngroups),
        "completed": int(complete.sum()),
        "turns": value_stats(np.asarray(by_session.size(), dtype=float)),
        "completion_ms": latency_stats(span_ms[complete]),
        "ttft_ms": {
            "first_turn": latency_stats(first["ttft_ms"]),
            "later_turns": latency_stats(later["ttft_ms"]),
        },
        "hit_rate": {"first_turn": _hit_rate(first), "later_turns": _hit_rate(later)},
        "reusable_rate": float(reusable) / later_prompt if later_prompt > 0 else None,
        "by_turn": by_turn,
        "waiting_ms": latency_stats(by_session["ttft_ms"].sum()[complete]),
        "slow_turns": _slow_turns(rows, by_session.size()),
    }


def _slow_turns(rows: pd.DataFrame, turns: pd.Series) -> dict[str, Any]:
    """Sessions with a turn above the per-turn TTFT p90, measured and if independent."""
    ttft = rows["ttft_ms"].astype(float)
    if not ttft.notna().any():
        return {"threshold_ms": None, "sessions_with_one": None, "if_independent": None}
    threshold = float(ttft.quantile(0.9))
    slow = (ttft > threshold).groupby(rows["session_id"]).any()
    return {
        "threshold_ms": threshold,
        "sessions_with_one": float(slow.mean()),
        "if_independent": float((1 - 0.9 ** turns.astype(float)).mean()),
    }

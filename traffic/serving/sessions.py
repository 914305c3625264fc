"""Agentic sessions: chains of turns whose next turn waits for the previous one's answer.

An agent (or a chatting user) is a closed loop: it reads the answer, calls a tool (or
thinks), and only then sends the next prompt, which carries everything said so far.
``session_arrivals`` writes such sessions in the arrivals table shape
(``traffic.traces``) plus three columns:

    session_id  int, the session (0, 1, ... in order of their first turn)
    turn        int, the turn within it (0 first)
    after_ms    float, turn > 0: how long after the previous turn's last token it
                arrives (``tool_ms``); NaN for turn 0, which arrives at ``arrival_ms``

``arrival_ms`` is the session's start for turn 0 and NaN for later turns: they have no
instant until the driver (``ServingDriver``, under the fluid simulator or the live fleet
alike) releases them when the previous turn finishes (``chain_turns``).

Sessions start as a Poisson process at ``rate_per_s``; each draws its ``turns`` and its
first prompt (``context_tokens``). Turn k+1's prompt is turn k's whole context (prompt
plus output) plus ``growth_tokens`` (the tool's result, the user's next message). Its
hash ids are turn k's *full* 512-token blocks followed by new ids, so the prefix-cache
pool and a KV-aware router see the reuse a real session offers (a partly filled last
block is not reusable: its successor holds different tokens). Every count is a number
or a distribution as synthetic arrivals allow (``TokenDist``); ``tool_ms`` may be 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..traces import BLOCK_TOKENS, COLUMNS, DistributionLike, TokenDist, is_distribution
from .requests import Request

SESSION_COLUMNS = [*COLUMNS, "session_id", "turn", "after_ms"]
Count = int | Mapping[str, float] | DistributionLike | TokenDist


class SessionError(ValueError):
    """A session the model cannot hold; ``key`` names the sessions key to change."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def _delay(spec: float | Mapping[str, float] | DistributionLike | TokenDist) -> TokenDist | float:
    """``tool_ms``: a number of ms (0 allowed) or a distribution of whole ms."""
    if isinstance(spec, Mapping | TokenDist) or is_distribution(spec):
        return TokenDist.parse(spec)
    if isinstance(spec, bool) or not float(spec) >= 0:
        raise ValueError(f"tool_ms must be a number >= 0 or a distribution, got {spec!r}")
    return float(spec)


def longest_context(
    context_tokens: Count, growth_tokens: Count, output_tokens: Count, turns: Count
) -> tuple[int, int]:
    """The context (prompt + output) of a session's first and of its last turn when every
    count takes its largest value (fixed: the value, uniform: high, lognormal: the mean,
    which a draw may exceed)."""

    def top(spec: Count) -> int:
        d = TokenDist.parse(spec)
        return {"fixed": d.value, "uniform": d.high}.get(d.kind, math.ceil(d.mean))

    first = top(context_tokens) + top(output_tokens)
    return first, first + (top(turns) - 1) * (top(growth_tokens) + top(output_tokens))


def check_context(
    tokens: int, key: str, max_context_tokens: int | None, model: str, where: str = ""
) -> None:
    """Refuse a turn whose context ``tokens`` outgrows the model's limit, naming ``key``."""
    if max_context_tokens is not None and tokens > max_context_tokens:
        raise SessionError(
            f"{where}needs {tokens:,} tokens of context (prompt + output);"
            f" {model} holds at most {max_context_tokens:,}: lower {key}",
            key,
        )


def session_arrivals(
    rng: np.random.Generator | int,
    *,
    n: int,
    rate_per_s: float,
    turns: Count = 8,
    context_tokens: Count = 2048,
    growth_tokens: Count = 256,
    output_tokens: Count = 128,
    tool_ms: float | Mapping[str, float] | DistributionLike | TokenDist = 500.0,
    max_context_tokens: int | None = None,
    model: str = "the model",
) -> pd.DataFrame:
    """``n`` sessions as the module docstring says, deterministic given the seed/rng.

    A session whose drawn context exceeds ``max_context_tokens`` raises
    :class:`SessionError` naming the key to lower.
    """
    if n < 1 or not rate_per_s > 0:
        raise ValueError(f"sessions need n >= 1 and rate_per_s > 0, got {n}, {rate_per_s}")
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    dists = {
        k: TokenDist.parse(v)
        for k, v in (
            ("turns", turns),
            ("context_tokens", context_tokens),
            ("growth_tokens", growth_tokens),
            ("output_tokens", output_tokens),
        )
    }
    delay = _delay(tool_ms)
    starts = np.cumsum(rng.exponential(1.0 / rate_per_s, size=n)) * 1e3
    rows: list[tuple] = []
    next_id = 0
    for s in range(n):
        k_turns = int(dists["turns"].sample(rng, 1)[0])
        outs = dists["output_tokens"].sample(rng, k_turns)
        grows = dists["growth_tokens"].sample(rng, k_turns)
        waits = delay.sample(rng, k_turns) if isinstance(delay, TokenDist) else [delay] * k_turns
        prompt, ids = 0, []
        for k in range(k_turns):
            if k == 0:
                prompt = int(dists["context_tokens"].sample(rng, 1)[0])
                kept = 0
            else:
                kept = prompt // BLOCK_TOKENS  # the previous prompt's full blocks
                prompt = prompt + int(outs[k - 1]) + int(grows[k])
            fresh = math.ceil(prompt / BLOCK_TOKENS) - kept
            ids = ids[:kept] + list(range(next_id, next_id + fresh))
            next_id += fresh
            check_context(
                prompt + int(outs[k]),
                "context_tokens" if k == 0 else "turns",
                max_context_tokens,
                model,
                f"session {s} turn {k} ",
            )
            rows.append(
                (
                    float(starts[s]) if k == 0 else math.nan,
                    prompt,
                    int(outs[k]),
                    list(ids),
                    s,
                    k,
                    math.nan if k == 0 else float(waits[k]),
                )
            )
    frame = pd.DataFrame(rows, columns=SESSION_COLUMNS)
    for col in ("input_tokens", "output_tokens", "session_id", "turn"):
        frame[col] = frame[col].astype("int64")
    return frame


def chain_turns(requests: Sequence[Request], arrivals: pd.DataFrame) -> list[int | None]:
    """Link each session turn to the next (``Request.next_turn``, ``after_ns``) and return
    every request's arrival offset from t0 in ns: None for a turn its predecessor
    releases. Arrivals without session columns are all open-loop."""
    offsets = [
        None if math.isnan(float(ms)) else int(round(float(ms) * 1e6))
        for ms in arrivals["arrival_ms"]
    ]
    if "session_id" not in arrivals:
        return offsets
    previous: dict[int, Request] = {}
    columns = (arrivals["session_id"], arrivals["turn"], arrivals["after_ms"])
    for r, session, turn, after_ms in zip(requests, *columns, strict=True):
        r.session, r.turn = int(session), int(turn)
        if turn > 0:
            before = previous[r.session]
            before.next_turn = r
            r.after_ns = int(round(float(after_ms) * 1e6))
            r.arrival_ns = -1
        previous[r.session] = r
    return offsets

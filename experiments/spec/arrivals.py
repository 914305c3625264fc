"""The ``arrivals`` of a serving workload in a spec: a trace file, a synthetic
generator (poisson, bursty, peaky) or agentic sessions, with token counts fixed or drawn
from a distribution; and the check that a session's context fits its model.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from experiments.spec.schema import (
    REQUIRED,
    Check,
    Ctx,
    Derived,
    Field,
    bad,
    choice,
    either,
    existing_file,
    integer,
    join,
    missing,
    number,
    optional,
    section,
)
from traffic.peaky import check_peaky
from traffic.presets import MODELS
from traffic.serving.sessions import SessionError, check_context, longest_context, session_arrivals
from traffic.traces import FORMATS, PATTERNS, TokenDist, read_azure, synthetic_arrivals


def _signature_defaults(fn: Callable[..., Any], names: list[str]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    return {n: None if params[n].default is params[n].empty else params[n].default for n in names}


TOKEN_DISTS = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("mean", "sigma")}


def _token_dist_post(out: dict[str, Any], path: str, ctx: Ctx) -> dict[str, Any]:
    given = {k: v for k, v in out.items() if v is not None}
    wanted = TOKEN_DISTS[given["dist"]]
    for key in given:
        if key != "dist" and key not in wanted:
            allowed = f"with dist {given['dist']}, keys {', '.join(wanted)}"
            raise bad(join(path, key), given[key], allowed)
    for key in wanted:
        if key not in given and key != "sigma":  # sigma has a default
            raise missing(join(path, key), f"for dist {given['dist']}: {', '.join(wanted)}")
    try:
        TokenDist.parse(given)
    except ValueError as exc:
        allowed = "uniform with 1 <= low <= high; lognormal with mean >= 1"
        raise bad(path, given, allowed, str(exc)) from None
    return given


TOKEN_DIST = either(
    integer(1),
    section(
        {
            "dist": Field(choice(TOKEN_DISTS), "fixed", "the distribution of token counts"),
            "value": Field(optional(integer(1)), None, "fixed: the count"),
            "low": Field(optional(integer(1)), None, "uniform: the smallest count"),
            "high": Field(optional(integer(1)), None, "uniform: the largest count"),
            "mean": Field(optional(number(ge=1)), None, "lognormal: the mean count"),
            "sigma": Field(optional(number(ge=0)), None, "lognormal: sigma of the log"),
        },
        _token_dist_post,
        sparse=True,
    ),
)

_TRACE_DEFAULTS = _signature_defaults(
    read_azure, ["limit", "speedup", "start_s", "window_s", "token_scale"]
)
TRACE_ARRIVALS = section(
    {
        "trace": Field(
            existing_file("a trace file"), doc="the trace file, relative to the spec's folder"
        ),
        "format": Field(choice(FORMATS), doc="the trace's format"),
        "limit": Field(
            optional(integer(1)), _TRACE_DEFAULTS["limit"], "at most this many requests"
        ),
        "speedup": Field(
            number(gt=0),
            _TRACE_DEFAULTS["speedup"],
            "arrival times ÷ speedup (2: twice the request rate)",
        ),
        "start_s": Field(
            number(ge=0), _TRACE_DEFAULTS["start_s"], "skip the trace's first start_s seconds"
        ),
        "window_s": Field(
            optional(number(gt=0)),
            _TRACE_DEFAULTS["window_s"],
            "take this many seconds of the trace from start_s",
        ),
        "token_scale": Field(
            number(gt=0), _TRACE_DEFAULTS["token_scale"], "token counts × token_scale"
        ),
    }
)
_SYNTH_CHECKS: dict[str, Check] = {
    "n": optional(integer(1)),
    "duration_s": optional(number(gt=0)),
    "rate_per_s": number(gt=0),
    "pattern": choice(PATTERNS),
    "on_s": number(gt=0),
    "off_s": number(ge=0),
    "input_tokens": TOKEN_DIST,
    "output_tokens": TOKEN_DIST,
    "shared_prefix_blocks": integer(0),
    "n_prefixes": integer(1),
    "peak_second_share": number(gt=0, le=1),
    "window_s": optional(number(ge=2)),
}
_SYNTH_DOCS = {
    "n": "how many requests (default: as many as arrive in duration_s)",
    "duration_s": "arrivals stop after this long (default: the run's duration_s, without n)",
    "rate_per_s": "mean request arrivals per second",
    "pattern": "poisson; bursty: Poisson at rate_per_s in on_s windows, off_s apart;"
    " peaky: a heavy-tailed modulated Poisson whose busiest second of every window_s"
    " holds peak_second_share of its requests",
    "on_s": "bursty: how long each burst lasts, s",
    "off_s": "bursty: the silence between bursts, s",
    "input_tokens": "prompt tokens: a count or {dist, ...}",
    "output_tokens": "generated tokens: a count or {dist, ...}",
    "shared_prefix_blocks": "KV blocks of a prefix shared by the requests of one prefix group",
    "n_prefixes": "how many distinct shared prefixes the requests draw from",
    "peak_second_share": "peaky: the share of a window's requests its busiest second absorbs",
    "window_s": "peaky: the window the share is of, s (default: the arrivals' span)",
}


def _synthetic_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    """A peaky share its window can hold: more than every-second-alike, less than all."""
    if out["pattern"] != "peaky":
        return
    spans = [s for s in (out["duration_s"], out["n"] and out["n"] / out["rate_per_s"]) if s]
    window = out["window_s"] if out["window_s"] is not None else min(spans, default=None)
    if window is None:
        return
    try:
        check_peaky(out["peak_second_share"], window)
    except ValueError as exc:
        if window < 2:
            raise bad(join(path, "window_s"), window, "a window of 2 s or more", str(exc)) from None
        allowed = f"a share above 1/{math.ceil(window)} and below 1"
        raise bad(join(path, "peak_second_share"), out["peak_second_share"], allowed) from None


_SYNTH_DEFAULTS = _signature_defaults(synthetic_arrivals, list(_SYNTH_CHECKS))
SYNTHETIC = section(
    {
        name: Field(
            check,
            REQUIRED if name == "rate_per_s" else _SYNTH_DEFAULTS[name],
            _SYNTH_DOCS[name],
        )
        for name, check in _SYNTH_CHECKS.items()
    }
    | {
        # Without a request count, arrivals stop when the run does.
        "duration_s": Field(
            _SYNTH_CHECKS["duration_s"],
            Derived(lambda out, ctx: ctx.duration_s if out["n"] is None else None),
            _SYNTH_DOCS["duration_s"],
        )
    },
    _synthetic_post,
)
SYNTHETIC_ARRIVALS = section({"synthetic": Field(SYNTHETIC, doc="generated arrivals")})

_SESSION_CHECKS: dict[str, Check] = {
    "n": integer(1),
    "rate_per_s": number(gt=0),
    "turns": TOKEN_DIST,
    "context_tokens": TOKEN_DIST,
    "growth_tokens": TOKEN_DIST,
    "output_tokens": TOKEN_DIST,
    "tool_ms": either(number(ge=0), TOKEN_DIST),
}
_SESSION_DOCS = {
    "n": "how many sessions",
    "rate_per_s": "mean session starts per second (Poisson)",
    "turns": "turns per session: a count or {dist, ...}",
    "context_tokens": "the first turn's prompt tokens: a count or {dist, ...}",
    "growth_tokens": "tokens each later turn adds to the context (tool result, next message)",
    "output_tokens": "generated tokens per turn: a count or {dist, ...}",
    "tool_ms": "a turn arrives this long after the previous turn's last token, ms",
}
_SESSION_DEFAULTS = _signature_defaults(session_arrivals, list(_SESSION_CHECKS))
SESSIONS_ARRIVALS = section(
    {
        "sessions": Field(
            section(
                {
                    name: Field(
                        check,
                        REQUIRED if _SESSION_DEFAULTS[name] is None else _SESSION_DEFAULTS[name],
                        _SESSION_DOCS[name],
                    )
                    for name, check in _SESSION_CHECKS.items()
                }
            ),
            doc="agentic sessions: chains of turns, each released when the previous ends",
        )
    }
)


def session_context(out: dict[str, Any], path: str) -> None:
    """Refuse sessions whose longest context the model cannot hold, naming the key."""
    sessions = (out["arrivals"] or {}).get("sessions")
    model = MODELS[out["model"]]
    if sessions is None or model.max_context_tokens is None:
        return
    counts = [sessions[k] for k in ("context_tokens", "growth_tokens", "output_tokens", "turns")]
    first, last = longest_context(*counts)
    key, tokens = ("context_tokens", first) if first > model.max_context_tokens else ("turns", last)
    try:
        turn = "first" if key == "context_tokens" else "last"
        check_context(
            tokens, key, model.max_context_tokens, model.name, f"a session's {turn} turn "
        )
    except SessionError as exc:
        where = join(path, f"arrivals.sessions.{key}")
        allowed = f"sessions whose context fits {model.name}'s {model.max_context_tokens:,} tokens"
        raise bad(where, sessions[key], allowed, str(exc)) from None


def arrivals() -> Check:
    allowed = (
        "{trace: FILE, format, limit, speedup, start_s, window_s, token_scale},"
        " {synthetic: {rate_per_s, ...}} or {sessions: {n, rate_per_s, ...}}"
    )

    def fn(raw: Any, path: str, ctx: Ctx) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise bad(path, raw, allowed)
        given = [k for k in ("trace", "synthetic", "sessions") if k in raw]
        if len(given) > 1:
            raise bad(path, sorted(raw), allowed, f"{' and '.join(given)} both given")
        if "synthetic" in raw:
            return SYNTHETIC_ARRIVALS(raw, path, ctx)
        if "sessions" in raw:
            return SESSIONS_ARRIVALS(raw, path, ctx)
        if "trace" in raw:
            return TRACE_ARRIVALS(raw, path, ctx)
        raise missing(join(path, "trace"), f"arrivals are {allowed}")

    json = {"anyOf": [TRACE_ARRIVALS.json, SYNTHETIC_ARRIVALS.json, SESSIONS_ARRIVALS.json]}
    return Check(fn, allowed, lambda v: isinstance(v, dict), json)

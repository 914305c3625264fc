"""The ``serving`` workload of a spec: model and GPU presets, prefill and
decode instances on the fabric's servers, router, KV transfer, prefix cache,
arrivals (a trace file or a synthetic generator) and SLO targets.

Shapes, enum values and names are checked here; what the router, the cache pool
and the compute model do with them is ``traffic``'s business.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.spec.schema import (
    REQUIRED,
    Check,
    Ctx,
    Derived,
    Field,
    bad,
    boolean,
    choice,
    divides,
    either,
    integer,
    join,
    list_of,
    missing,
    name_text,
    number,
    optional,
    section,
    server,
)
from traffic.presets import GPUS, MODELS
from traffic.traces import FORMATS, TokenDist, read_azure, synthetic_arrivals
from traffic.workloads.kv_transfer import MODES as TRANSFERS

ROUTERS = ("round_robin", "least_loaded", "kv_affinity", "topology_aware")
SERVING_MODES = ("disaggregated", "colocated")
KV_DTYPES = ("fp16", "int8")
TOKEN_DISTS = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("mean", "sigma")}


def _signature_defaults(fn: Callable[..., Any], names: list[str]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    return {n: None if params[n].default is params[n].empty else params[n].default for n in names}


def _trace_file() -> Check:
    allowed = "a trace file: a path relative to the spec file's folder, or absolute"

    def fn(value: Any, path: str, ctx: Ctx) -> str:
        if not isinstance(value, str) or not value:
            raise bad(path, value, allowed)
        file = Path(value).expanduser()
        file = file if file.is_absolute() else ctx.base_dir / file
        if not file.is_file():
            raise bad(path, value, allowed, f"no such file {file}")
        return str(file.resolve())

    return Check(fn, allowed, lambda v: isinstance(v, str))


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
            "dist": Field(choice(TOKEN_DISTS), "fixed"),
            "value": Field(optional(integer(1)), None),
            "low": Field(optional(integer(1)), None),
            "high": Field(optional(integer(1)), None),
            "mean": Field(optional(number(ge=1)), None),
            "sigma": Field(optional(number(ge=0)), None),
        },
        _token_dist_post,
    ),
)

_TRACE_DEFAULTS = _signature_defaults(
    read_azure, ["limit", "speedup", "start_s", "window_s", "token_scale"]
)
TRACE_ARRIVALS = section(
    {
        "trace": Field(_trace_file()),
        "format": Field(choice(FORMATS)),
        "limit": Field(optional(integer(1)), _TRACE_DEFAULTS["limit"]),
        "speedup": Field(number(gt=0), _TRACE_DEFAULTS["speedup"]),
        "start_s": Field(number(ge=0), _TRACE_DEFAULTS["start_s"]),
        "window_s": Field(optional(number(gt=0)), _TRACE_DEFAULTS["window_s"]),
        "token_scale": Field(number(gt=0), _TRACE_DEFAULTS["token_scale"]),
    }
)
_SYNTH_CHECKS: dict[str, Check] = {
    "n": optional(integer(1)),
    "duration_s": optional(number(gt=0)),
    "rate_per_s": number(gt=0),
    "pattern": choice(("poisson", "bursty")),
    "on_s": number(gt=0),
    "off_s": number(ge=0),
    "input_tokens": TOKEN_DIST,
    "output_tokens": TOKEN_DIST,
    "shared_prefix_blocks": integer(0),
    "n_prefixes": integer(1),
}
_SYNTH_DEFAULTS = _signature_defaults(synthetic_arrivals, list(_SYNTH_CHECKS))
SYNTHETIC = section(
    {
        name: Field(
            check,
            REQUIRED if name == "rate_per_s" else _SYNTH_DEFAULTS[name],
        )
        for name, check in _SYNTH_CHECKS.items()
    }
    | {
        # Without a request count, arrivals stop when the run does.
        "duration_s": Field(
            _SYNTH_CHECKS["duration_s"],
            Derived(lambda out, ctx: ctx.duration_s if out["n"] is None else None),
        )
    }
)
SYNTHETIC_ARRIVALS = section({"synthetic": Field(SYNTHETIC)})


def _arrivals() -> Check:
    allowed = (
        "{trace: FILE, format, limit, speedup, start_s, window_s, token_scale}"
        " or {synthetic: {rate_per_s, ...}}"
    )

    def fn(raw: Any, path: str, ctx: Ctx) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise bad(path, raw, allowed)
        if "trace" in raw and "synthetic" in raw:
            raise bad(path, sorted(raw), allowed, "trace and synthetic both given")
        if "synthetic" in raw:
            return SYNTHETIC_ARRIVALS(raw, path, ctx)
        if "trace" in raw:
            return TRACE_ARRIVALS(raw, path, ctx)
        raise missing(join(path, "trace"), f"arrivals are {allowed}")

    return Check(fn, allowed, lambda v: isinstance(v, dict))


INSTANCES = section(
    {
        "servers": Field(list_of(server(), 1, distinct=True)),
        # Default: one instance per server.
        "tp": Field(integer(1), Derived(lambda out, ctx: len(ctx.servers[out["servers"][0]]))),
    }
)


def _serving_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    if out["mode"] == "disaggregated" and out["decode"] is None:
        raise missing(join(path, "decode"), "{servers, tp} in disaggregated mode")
    roles = ("prefill", "decode") if out["mode"] == "disaggregated" else ("prefill",)
    if len(roles) == 2:
        shared = [s for s in out["decode"]["servers"] if s in out["prefill"]["servers"]]
        if shared:
            where = join(path, "decode.servers")
            raise bad(where, shared, "servers that are not prefill servers (instances overlap)")
    for role in roles:
        servers, tp = out[role]["servers"], out[role]["tp"]
        where = join(path, f"{role}.tp")
        divides(where, tp, MODELS[out["model"]].kv_heads, f"{out['model']}'s KV heads")
        gpus = sum(len(ctx.servers[s]) for s in servers)
        divides(where, tp, gpus, f"the GPUs of {role} servers {servers}")


SERVING = section(
    {
        "kind": Field(choice(["serving"])),
        "model": Field(choice(MODELS)),
        "gpu": Field(choice(GPUS), "h100"),
        "mode": Field(choice(SERVING_MODES), "disaggregated"),
        "prefill": Field(INSTANCES),
        "decode": Field(optional(INSTANCES), None),
        "router": Field(choice(ROUTERS), "round_robin"),
        "router_weight": Field(number(ge=0), 1.0),
        "transfer": Field(choice(TRANSFERS), "monolithic"),
        "kv_dtype": Field(choice(KV_DTYPES), "fp16"),
        "prefix_cache": Field(
            section(
                {"enabled": Field(boolean(), False), "capacity_blocks": Field(integer(1), 4096)}
            ),
            {},
        ),
        "arrivals": Field(_arrivals()),
        "slo": Field(
            section(
                {"ttft_ms": Field(number(gt=0), 2000.0), "tpot_ms": Field(number(gt=0), 100.0)}
            ),
            {},
        ),
        "tenant": Field(name_text(), "default"),
        "dscp": Field(integer(0, 63), 0),
    },
    _serving_post,
)

"""The ``workloads:`` entries of a spec: one schema per kind.

A network workload's parameters are declared by its generator in
``traffic.workloads``: names and defaults are read from the function's
signature and each key's one-line doc from its docstring's ``- ``name``: ...``
list, so neither can drift. This table adds each parameter's type and range, the
defaults that follow from the fabric or the run (``receiver``, ``duration_s``,
...), and the rules that span parameters. The parameters the runner supplies
(the fabric's hosts, the seed, flow and request numbering) are not spec keys.
``serving`` is in ``experiments.spec.serving``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from experiments.spec.schema import (
    REQUIRED,
    Check,
    Ctx,
    Derived,
    Field,
    bad,
    choice,
    divides,
    either,
    host,
    integer,
    join,
    kind_of,
    kinds_json,
    list_of,
    name_text,
    number,
    optional,
    section,
)
from experiments.spec.serving import SERVING
from traffic.flowsizes import FLOW_SIZE_CDFS
from traffic.header import HEADER_LEN
from traffic.presets import DTYPE_BYTES, GPUS, MODELS
from traffic.workloads import background, incast, kv_transfer, moe_alltoall, probe
from traffic.workloads.alltoall import ROUTINGS
from traffic.workloads.kv_transfer import MODES as TRANSFERS
from traffic.workloads.probe import MAX_PROBE_BYTES

RUNTIME = ("hosts", "seed", "first_flow_id", "first_request_id")
MAX_LANE = 1023  # persistent connections of one sender to one receiver and DSCP

Post = Callable[[dict[str, Any], str, Ctx], None]


@dataclass(frozen=True)
class WorkloadKind:
    """A workload generator and the spec-level type of each of its parameters."""

    fn: Callable[..., Any]
    checks: dict[str, Check]
    derived: dict[str, Derived] = field(default_factory=dict)
    post: Post | None = None
    runtime: tuple[str, ...] = RUNTIME
    docs: dict[str, str] = field(default_factory=dict)  # where a key means more than the parameter

    def fields(self) -> dict[str, Field]:
        out = {}
        docs = COMMON_DOCS | param_docs(self.fn) | self.docs
        for name, param in inspect.signature(self.fn).parameters.items():
            # A parameter without a check is not a spec key yet (a unit test flags it).
            if name not in self.runtime and name in self.checks:
                default = REQUIRED if param.default is param.empty else param.default
                doc = docs.get(name, "")
                out[name] = Field(self.checks[name], self.derived.get(name, default), doc)
        return out


def param_docs(fn: Callable[..., Any]) -> dict[str, str]:
    """Each parameter's first sentence in ``fn``'s docstring list (``- ``a``: text``,
    also ``- ``a`` / ``b``: text`` for two); parameters of a bullet that only points
    elsewhere ("as in the other generators") get nothing."""
    out: dict[str, str] = {}
    for bullet in re.split(r"\n\s*- ", "\n" + inspect.cleandoc(fn.__doc__ or "")):
        head, sep, body = bullet.partition(": ")
        names = re.findall(r"``(\w+)``", head)
        if not sep or not names or not re.fullmatch(r"[`\w\s/,]+", head):
            continue
        text = " ".join(body.split("\n\n")[0].split()).replace("``", "`")
        first = re.match(r"(.+?\.)(\s|$)", text)
        line = (first.group(1) if first else text).rstrip(".")
        if not line.startswith("as "):
            out.update(dict.fromkeys(names, line))
    return out


COMMON_DOCS = {
    "start_ms": "when the workload starts, in ms after the run starts",
    "tenant": "the tenant its flows belong to (controller.tenants, noisy_neighbour)",
    "dscp": "the DSCP mark of its packets (controller.qos.classes pick their class by it)",
}


def _common() -> dict[str, Check]:
    return {"start_ms": number(ge=0), "tenant": name_text(), "dscp": integer(0, 63)}


def _model(out: dict[str, Any]) -> Any:
    return MODELS[out["model"]]


def _first_host_not_sending(out: dict[str, Any], ctx: Ctx) -> str:
    senders = out["senders"] if isinstance(out["senders"], list) else []
    return next(h for h in ctx.hosts if h not in senders)


def _host_gbps(out: dict[str, Any], ctx: Ctx) -> float:
    assert ctx.fabric is not None
    return next(link.real_gbps for link in ctx.fabric.links if link.kind == "host")


def _run_length(out: dict[str, Any], ctx: Ctx) -> float | None:
    return ctx.duration_s


def _incast_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    senders, receiver = out["senders"], out["receiver"]
    if isinstance(senders, int):
        others = len(ctx.hosts) - 1
        if senders > others:
            raise bad(
                join(path, "senders"), senders, f"1..{others} (hosts other than the receiver)"
            )
    elif receiver in senders:
        raise bad(join(path, "receiver"), receiver, "a host that is not one of the senders")


def _kv_transfer_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    shared = [h for h in out["decode_hosts"] if h in out["prefill_hosts"]]
    if shared:
        raise bad(join(path, "decode_hosts"), shared, "hosts that are not prefill_hosts")
    heads = _model(out).kv_heads
    for side in ("prefill", "decode"):
        hosts, tp = out[f"{side}_hosts"], out[f"{side}_tp"]
        if tp is not None:
            divides(join(path, f"{side}_tp"), tp, len(hosts), f"the number of {side}_hosts")
        divides(join(path, f"{side}_tp"), tp or len(hosts), heads, f"{out['model']}'s KV heads")


def _alltoall_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    if out["hidden_size"] is not None and out["top_k"] is not None:
        return
    moe = [name for name, m in MODELS.items() if m.is_moe]
    if out["model"] is None or not MODELS[out["model"]].is_moe:
        allowed = f"an MoE preset ({', '.join(moe)}), or give both hidden_size and top_k"
        raise bad(join(path, "model"), out["model"], allowed)


HOST_LIST = list_of(host(), 1, distinct=True)

NETWORK_KINDS: dict[str, WorkloadKind] = {
    "incast": WorkloadKind(
        incast,
        {
            "receiver": host(),
            "senders": either(integer(1), HOST_LIST),
            "sru_bytes": integer(1),
            "rounds": integer(1),
            "jitter_us": number(ge=0),
            "lane": integer(0, MAX_LANE),
            **_common(),
        },
        {"receiver": Derived(_first_host_not_sending)},
        _incast_post,
    ),
    "kv_transfer": WorkloadKind(
        kv_transfer,
        {
            "prefill_hosts": HOST_LIST,
            "decode_hosts": HOST_LIST,
            "model": choice(MODELS),
            "tokens": either(integer(1), list_of(integer(1), 1)),
            "mode": choice(TRANSFERS),
            "dtype": choice(DTYPE_BYTES),
            "prefill_tp": optional(integer(1)),
            "decode_tp": optional(integer(1)),
            "gpu": choice(GPUS),
            "efficiency": number(gt=0, le=1),
            "rate_rps": optional(number(gt=0)),
            **_common(),
        },
        post=_kv_transfer_post,
    ),
    "moe_alltoall": WorkloadKind(
        moe_alltoall,
        {
            "group": list_of(host(), 2, distinct=True),
            "steps": integer(1),
            "tokens_per_step": integer(1),
            "model": optional(choice(MODELS)),
            "hidden_size": optional(integer(1)),
            "top_k": optional(integer(1)),
            "dtype": choice(DTYPE_BYTES),
            "step_interval_ms": number(gt=0),
            "expert_compute_us": number(ge=0),
            "routing": choice(ROUTINGS),
            **_common(),
        },
        post=_alltoall_post,
    ),
    "background": WorkloadKind(
        background,
        {
            "hosts": list_of(host(), 2, distinct=True),
            "load": number(gt=0, le=1),
            "host_gbps": number(gt=0),
            "duration_s": number(gt=0),
            "distribution": choice(FLOW_SIZE_CDFS),
            # k: sizes × k, arrivals ÷ k; auto: the smallest k that fits this machine
            "flow_size_scale": either(choice(["auto"]), number(ge=1)),
            **_common(),
        },
        {
            "flow_size_scale": Derived(lambda out, ctx: "auto"),
            "hosts": Derived(lambda out, ctx: ctx.hosts),
            "host_gbps": Derived(_host_gbps),
            "duration_s": Derived(_run_length),
        },
        runtime=("seed", "first_flow_id"),  # ``hosts`` here are the hosts that take part
        docs={
            "flow_size_scale": "k >= 1: flow sizes × k, arrivals ÷ k (load and size shape kept, "
            "k times fewer flows); auto: the smallest k that fits this machine's envelope",
            "hosts": "hosts that send and receive (default: every host of the fabric)",
            "host_gbps": "the real host link rate, Gbit/s (default: the fabric's)",
            "duration_s": "arrivals fall in [start, start + duration_s) (default: the run's)",
        },
    ),
    "probe": WorkloadKind(
        probe,
        {
            "pairs": list_of(list_of(host(), 2, 2, distinct=True), 1),
            "rate_hz": number(gt=0),
            "size_bytes": integer(HEADER_LEN, MAX_PROBE_BYTES),
            "duration_s": number(gt=0),
            **_common(),
        },
        {"duration_s": Derived(_run_length)},
    ),
}


def _kind_doc(kind: WorkloadKind) -> str:
    first = inspect.cleandoc(kind.fn.__doc__ or "").split("\n\n")[0]
    return " ".join(first.split())


KINDS: dict[str, Check] = {
    name: section({"kind": Field(choice([name]), doc=_kind_doc(kind))} | kind.fields(), kind.post)
    for name, kind in NETWORK_KINDS.items()
} | {"serving": SERVING}


def workload() -> Check:
    """One ``workloads:`` entry: ``kind`` picks the schema of the other keys."""
    allowed = f"a mapping with kind ({', '.join(KINDS)}) and that kind's parameters"

    def fn(raw: Any, path: str, ctx: Ctx) -> dict[str, Any]:
        return KINDS[kind_of(raw, path, KINDS, allowed)](raw, path, ctx)

    return Check(fn, allowed, lambda v: isinstance(v, dict), kinds_json(KINDS))


def workload_seed(run_seed: int, index: int) -> int:
    """The seed of workload ``index`` of a run: independent streams per workload, so
    adding a workload does not reshuffle the others."""
    return int(np.random.SeedSequence([run_seed, index]).generate_state(1)[0])

"""The ``serving`` workload of a spec: model and GPU presets, prefill and
decode instances on the fabric's servers and GPUs, router, KV transfer, prefix cache,
per-kind marks, arrivals (``experiments.spec.arrivals``) and SLO targets.

Shapes, enum values and names are checked here; what the router, the cache pool
and the compute model do with them is ``traffic``'s business.
"""

from __future__ import annotations

from typing import Any

from experiments.spec.arrivals import arrivals, session_context
from experiments.spec.schema import (
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
    mapping,
    missing,
    name_text,
    number,
    optional,
    section,
    server,
)
from experiments.spec.tiers import KV_TIERS, check_kv_tiers
from traffic.presets import GPUS, MODELS
from traffic.serving.driver import DEFAULT_TOPOLOGY_BUDGET_MS, SERVING_MODES
from traffic.serving.instances import gpu_indices, tp_fits
from traffic.serving.marks import MESSAGE_KINDS
from traffic.serving.routers import ROUTERS
from traffic.workloads.kv_transfer import MODES as TRANSFERS

KV_DTYPES = ("fp16", "int8")


def _gpu_choice() -> Check:
    """GPU indices of every server of the pool, or a mapping server → its GPU indices."""
    indices = list_of(integer(0), 1, distinct=True)
    per_server = mapping(server(), indices)
    by_server = {
        "type": "object",
        "additionalProperties": indices.json,
        "title": "a mapping of server number → GPU indices",
    }
    json = {"anyOf": [indices.json, by_server]}
    return Check(
        either(indices, per_server).fn,
        f"{indices.allowed}, or {per_server.allowed}",
        lambda v: isinstance(v, list | dict),
        json,
    )


def _pool_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    """A mapping names exactly the pool's servers; every GPU index exists on its server."""
    gpus = out["gpus"]
    if isinstance(gpus, dict) and sorted(gpus) != sorted(out["servers"]):
        allowed = f"a mapping with exactly the pool's servers {out['servers']} as keys"
        raise bad(join(path, "gpus"), gpus, allowed)
    for s in out["servers"]:
        count = len(ctx.servers[s])
        for i, g in enumerate(gpu_indices(gpus, s)):
            if g >= count:
                where = join(path, f"gpus.{s}.{i}" if isinstance(gpus, dict) else f"gpus.{i}")
                raise bad(where, g, f"a GPU index of server {s}: 0..{count - 1}", "no such GPU")


INSTANCES = section(
    {
        "servers": Field(list_of(server(), 1, distinct=True), doc="the servers of this pool"),
        "gpus": Field(
            _gpu_choice(),
            Derived(lambda out, ctx: list(range(len(ctx.servers[out["servers"][0]])))),
            "GPU indices within each of its servers, or {server: indices}"
            " (default: all of a server's)",
        ),
        "tp": Field(
            integer(1),
            Derived(lambda out, ctx: len(gpu_indices(out["gpus"], out["servers"][0]))),
            "GPUs per instance (tensor-parallel degree; default: the pool's GPUs of a server)",
        ),
    },
    _pool_post,
)


def _qos_class() -> Check:
    """A class name of ``controller.qos.classes``, resolved to the class's DSCP."""
    allowed = "a class of controller.qos.classes"

    def fn(value: Any, path: str, ctx: Ctx) -> int:
        marks = {c["name"]: c["dscp"] for c in _qos(ctx)["classes"]}
        if value not in marks:
            names = ", ".join(marks) or "none declared"
            raise bad(path, value, f"a DSCP from 0 to 63 or {allowed}: {names}")
        return marks[value]

    json = {"type": "string", "title": allowed}
    return Check(fn, allowed, lambda v: isinstance(v, str), json)


def _qos(ctx: Ctx) -> dict[str, Any]:
    return (ctx.extra.get("controller") or {}).get("qos") or {"classes": [], "tenant_class": {}}


_KIND_DOCS = {
    "kv_transfer": "the prompt's KV, monolithic or per layer (kv_transfer, kv_layer flows)",
    "collective": "a decode step's tensor-parallel all-reduce, every token",
    "cache_fetch": "prefix-cache blocks fetched from another prefill server",
    "tier_fetch": "KV moved to or from a storage node's flash tier (kv_tiers.flash)",
}
DSCP_BY_KIND = section(
    {
        kind: Field(
            either(integer(0, 63), _qos_class()),
            0,
            f"{_KIND_DOCS[kind]}: a DSCP, or a class name (its DSCP)",
        )
        for kind in MESSAGE_KINDS
    }
)


def _marks_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    """Per-kind marks must survive the controller's trust boundary, which re-marks
    whatever is not one of the sending host's tenant's classes (``controller.qos``):
    every kind at the pools' GPUs, ``tier_fetch`` also at the storage nodes of a flash
    tier (they send the fetches back)."""
    qos, tenants = _qos(ctx), (ctx.extra.get("controller") or {}).get("tenants", {})
    if not isinstance(out["dscp"], dict) or not qos["classes"]:
        return
    marks = {c["name"]: c["dscp"] for c in qos["classes"]}
    default = qos.get("default_class") or qos["classes"][-1]["name"]
    owner = {h: t for t, hosts in tenants.items() for h in hosts}
    roles = ("prefill", "decode") if out["mode"] == "disaggregated" else ("prefill",)
    pools = [(s, out[r]["gpus"]) for r in roles for s in out[r]["servers"]]
    senders = [
        (ctx.servers[s][g], list(out["dscp"])) for s, gpus in pools for g in gpu_indices(gpus, s)
    ]
    if (out.get("kv_tiers") or {}).get("flash") and ctx.fabric is not None:
        senders += [(n.name, ["tier_fetch"]) for n in ctx.fabric.storage_nodes]
    for host, kinds in senders:
        tenant = owner.get(host)
        if tenant in qos["tenant_class"]:
            given, whose = qos["tenant_class"][tenant], f"controller.qos.tenant_class.{tenant}"
        else:
            given, whose = default, "the default class of hosts without a tenant_class"
        names = given if isinstance(given, list) else [given]
        kept = sorted({marks[n] for n in names})
        for kind in kinds:
            mark = out["dscp"][kind]
            if mark not in kept:
                why = f"{host}'s switch port re-marks it {marks[names[0]]}"
                allowed = f"a mark of {whose} ({', '.join(names)}): {', '.join(map(str, kept))}"
                raise bad(join(path, f"dscp.{kind}"), mark, allowed, why)


def _check_pools(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    """Pools may share a server, not a GPU of it. Pools that both take every GPU of a
    shared server are refused at ``decode.servers``, a GPU in both at ``decode.gpus``."""
    pre, dec = out["prefill"], out["decode"]
    both = {
        s: sorted(set(gpu_indices(pre["gpus"], s)) & set(gpu_indices(dec["gpus"], s)))
        for s in dec["servers"]
        if s in pre["servers"]
    }
    both = {s: g for s, g in both.items() if g}
    if not both:
        return
    if all(len(g) == len(ctx.servers[s]) for s, g in both.items()):
        raise bad(
            join(path, "decode.servers"),
            sorted(both),
            "servers that are not prefill servers, or disjoint gpus of them (instances overlap)",
        )
    (server_, gpus), *_ = both.items()
    mine = gpu_indices(pre["gpus"], server_)
    raise bad(
        join(path, "decode.gpus"),
        gpus,
        f"GPUs not in the prefill pool's {list(mine)} of server {server_}",
        f"a GPU in both pools (instances overlap) on server {server_}",
    )


def _check_tp(out: dict[str, Any], path: str, role: str) -> None:
    """tp divides the KV heads, and an instance lies within one server's share of the
    pool or spans whole shares (never part of one server and part of the next)."""
    servers, gpus, tp = out[role]["servers"], out[role]["gpus"], out[role]["tp"]
    where = join(path, f"{role}.tp")
    heads = MODELS[out["model"]].kv_heads
    divides(where, tp, heads, f"{out['model']}'s KV heads")
    shares = [len(gpu_indices(gpus, s)) for s in servers]
    if not tp_fits(shares, tp):
        fits = [d for d in range(1, heads + 1) if heads % d == 0 and tp_fits(shares, d)]
        raise bad(
            where,
            tp,
            f"a tp that divides the GPUs {role}.gpus takes of each server {shares} or spans"
            f" whole servers: {', '.join(map(str, fits))}",
            "an instance would straddle two servers",
        )


def one_serving(workloads: Check) -> Check:
    """The ``workloads`` list ``workloads`` checks, holding at most one ``serving`` entry:
    a run drives one serving deployment (run a second spec for another)."""

    def fn(value: Any, path: str, ctx: Ctx) -> list[Any]:
        out = workloads(value, path, ctx)
        serving = [i for i, w in enumerate(out) if w["kind"] == "serving"]
        if len(serving) > 1:
            where = join(path, serving[1])
            others = ", ".join(f"workloads.{i}" for i in serving)
            raise bad(
                where,
                "serving",
                "one serving workload per spec (run a second spec instead)",
                f"{others} are all serving",
            )
        return out

    return Check(fn, workloads.allowed, workloads.accepts, workloads.json)


def _serving_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    session_context(out, path)
    if out["mode"] == "disaggregated" and out["decode"] is None:
        raise missing(join(path, "decode"), "{servers, gpus, tp} in disaggregated mode")
    roles = ("prefill", "decode") if out["mode"] == "disaggregated" else ("prefill",)
    if len(roles) == 2:
        _check_pools(out, path, ctx)
    for role in roles:
        _check_tp(out, path, role)
    _marks_post(out, path, ctx)
    check_kv_tiers(out, path, ctx)


SERVING = section(
    {
        "kind": Field(choice(["serving"]), doc="LLM serving: requests routed to GPU instances"),
        "model": Field(choice(MODELS), doc="the model preset (kvfabric calc kv --model)"),
        "gpu": Field(choice(GPUS), "h100", "the GPU preset of every instance"),
        "mode": Field(
            choice(SERVING_MODES),
            "disaggregated",
            "prefill and decode on separate pools (KV crosses the fabric), or colocated",
        ),
        "prefill": Field(INSTANCES, doc="the prefill pool"),
        "decode": Field(optional(INSTANCES), None, "the decode pool (disaggregated mode)"),
        "router": Field(choice(ROUTERS), "round_robin", "how a request picks its instances"),
        "router_weight": Field(
            number(ge=0), 1.0, "kv_affinity: the weight of a cache hit against load"
        ),
        "topology_budget_ms": Field(
            number(gt=0),
            DEFAULT_TOPOLOGY_BUDGET_MS,
            "topology_aware: a tier (NVLink, rail, spine) is preferred while a prefill"
            " instance's KV in flight over it takes at most this long at the tier's rate, ms",
        ),
        "transfer": Field(
            choice(TRANSFERS),
            "monolithic",
            "KV sent after prefill, or layer by layer as prefill runs",
        ),
        "kv_dtype": Field(choice(KV_DTYPES), "fp16", "the KV cache's element type"),
        "prefix_cache": Field(
            section(
                {
                    "enabled": Field(boolean(), False, "a prefix cache on the prefill servers"),
                    "capacity_blocks": Field(integer(1), 4096, "its capacity, KV blocks"),
                    "shared": Field(
                        boolean(),
                        True,
                        "true: one pool, a block held on another prefill server is fetched"
                        " over the fabric (Mooncake); false: each server's cache on its own",
                    ),
                }
            ),
            {},
            "the prefix cache (Mooncake-style pool, or one cache per server)",
        ),
        "kv_tiers": Field(
            optional(KV_TIERS),
            None,
            "tiered KV storage: HBM per GPU, optional CXL and flash tiers (null: HBM only,"
            " no eviction)",
        ),
        "arrivals": Field(
            arrivals(),
            doc="a trace {trace, format, ...}, {synthetic: {...}} or {sessions: {...}}",
        ),
        "slo": Field(
            section(
                {
                    "ttft_ms": Field(number(gt=0), 2000.0, "time-to-first-token target, ms"),
                    "tpot_ms": Field(number(gt=0), 100.0, "time-per-output-token target, ms"),
                }
            ),
            {},
            "the targets SLO attainment and goodput are judged by",
        ),
        "tenant": Field(name_text(), "default", "the tenant its flows belong to"),
        "dscp": Field(
            either(integer(0, 63), _qos_class(), DSCP_BY_KIND),
            0,
            "its packets' DSCP: one, or per message kind (a mark its tenant's QoS classes keep)",
        ),
    },
    _serving_post,
)

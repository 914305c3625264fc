"""The top-level schema of a spec: run, scale, fabric, the cluster that emulates it,
controller, agents, sampler, fidelity thresholds, faults, workloads and the sweep grid.

``validate(raw, base_dir)`` checks a spec as written (a dict from YAML, overrides
applied) and returns it resolved: every default filled in, numbers normalised.
The fabric section is checked by building the ``Fabric`` (``topologies``), so its
errors are the generator's own, prefixed with the key path; names used later
(hosts of a tenant, the two ends of a failing link) are checked against it.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from controller.policy import SEEDED, known_policies
from controller.valiant import fabric_problem
from experiments.spec.cluster import CLUSTER
from experiments.spec.faults import FAULT, faults_post
from experiments.spec.schema import (
    Check,
    Ctx,
    Field,
    SpecError,
    anything,
    bad,
    boolean,
    capture_point,
    choice,
    either,
    given_keys,
    host,
    integer,
    join,
    kind_of,
    list_of,
    listing,
    mapping,
    missing,
    name_text,
    node,
    number,
    optional,
    remember,
    section,
    text,
    unknown_keys,
)
from experiments.spec.serving import one_serving
from experiments.spec.workloads import workload
from topologies import Fabric
from topologies.fabric import FabricError
from topologies.generators import GENERATORS, defaults, make_fabric, param_doc
from topologies.scale import (
    DEFAULT_BANDWIDTH_SCALE,
    DEFAULT_MTU,
    MAX_MTU,
    MAX_TIME_DILATION,
    Scale,
)
from topologies.shaping import MAX_BUFFER_PKTS
from topologies.transport import RTO_MAX_MS
from traffic.wire import CONNECTIONS

POLICIES = tuple(known_policies())  # the controller's registry: a new policy is a spec value
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")


@lru_cache(maxsize=64)
def _build(kind: str, params: tuple[tuple[str, Any], ...]) -> Fabric:
    return make_fabric(kind, **dict(params))


def build_fabric(resolved: dict[str, Any]) -> Fabric:
    """The ``Fabric`` of a resolved ``fabric:`` section (cached: fabrics are immutable)."""
    params = tuple(
        (k, tuple(v) if isinstance(v, list) else v) for k, v in resolved.items() if k != "kind"
    )
    return _build(resolved["kind"], params)


def _fabric() -> Check:
    kinds = ", ".join(GENERATORS)
    allowed = f"a mapping with kind ({kinds}) and that generator's parameters"

    def fn(raw: Any, path: str, ctx: Ctx) -> dict[str, Any]:
        kind = kind_of(raw, path, GENERATORS, allowed)
        params = defaults(kind)
        unknown_keys(raw, ["kind", *params], path)
        out: dict[str, Any] = {"kind": kind}
        for name, default in params.items():
            value = raw.get(name, default)
            if isinstance(default, str):
                if not isinstance(value, str):
                    raise bad(join(path, name), value, param_doc(kind, name))
                out[name] = value
                continue
            if isinstance(default, tuple):  # sizes: the generator checks them
                if not isinstance(value, list | tuple):
                    raise bad(join(path, name), value, param_doc(kind, name))
                out[name] = list(value)
                continue
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            if not numeric:
                need = "an integer" if isinstance(default, int) else "a rate in Gbit/s > 0"
                raise bad(join(path, name), value, need)
            if isinstance(default, int) and isinstance(value, float) and value.is_integer():
                value = int(value)
            out[name] = float(value) if isinstance(default, float) else value
        try:
            ctx.fabric = build_fabric(out)
        except FabricError as exc:
            where = join(path, exc.param) if exc.param else path
            value = raw.get(exc.param) if exc.param else raw
            raise SpecError(f"{where}: {exc}", where, value) from None
        return out

    return Check(fn, allowed, lambda v: isinstance(v, dict), _fabric_json())


def _fabric_json() -> dict[str, Any]:
    """Each generator's parameters, typed by their defaults (the generator checks ranges)."""
    branches = []
    for kind, gen in GENERATORS.items():
        props: dict[str, Any] = {"kind": {"const": kind, "description": _first_line(gen)}}
        for name, default in defaults(kind).items():
            props[name] = _param_json(default) | {
                "default": list(default) if isinstance(default, tuple) else default,
                "description": param_doc(kind, name),
            }
        branches.append(
            {
                "type": "object",
                "properties": props,
                "required": ["kind"],
                "additionalProperties": False,
            }
        )
    return {"oneOf": branches}


def _param_json(default: Any) -> dict[str, Any]:
    """A generator parameter's JSON type by its default: a name, a list of sizes, a
    count from 0 (a default of 0 allows none), or a positive number."""
    if isinstance(default, str):
        return {"type": "string"}
    if isinstance(default, tuple):
        return {"type": "array", "items": {"type": "integer", "minimum": 2}, "minItems": 1}
    if isinstance(default, int):
        return (
            {"type": "integer", "minimum": 0}
            if default == 0
            else {"type": "integer", "exclusiveMinimum": 0}
        )
    return {"type": "number", "exclusiveMinimum": 0}


def _first_line(fn: Any) -> str:
    return " ".join((fn.__doc__ or "").split("\n\n")[0].split())


def _qos_class_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    if out["rate_share"] is None and out["priority"] is None:
        raise missing(join(path, "rate_share"), "a rate_share in (0, 1] or a priority 0..7")
    if out["rate_share"] is not None and out["priority"] is not None:
        raise bad(
            join(path, "priority"),
            out["priority"],
            "no priority next to a rate_share: a class is weighted or strict",
        )


QOS_CLASS = section(
    {
        "name": Field(name_text(), doc="the class's name (tenant_class, default_class)"),
        "dscp": Field(integer(0, 63), doc="the DSCP mark that puts a packet in this class"),
        "rate_share": Field(
            optional(number(gt=0, le=1)),
            None,
            "the share of each egress this class is assured (weighted)",
        ),
        "priority": Field(
            optional(integer(0, 7)), None, "strict priority instead of a share: 0 is served first"
        ),
        "buffer_pkts": Field(
            optional(integer(1, MAX_BUFFER_PKTS)),
            None,
            "this class's queue limit, packets (default: the link's buffer)",
        ),
    },
    _qos_class_post,
)


def _controller_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    tenants, owner = out["tenants"], {}
    for tenant, hosts in tenants.items():
        for i, h in enumerate(hosts):
            if h in owner:
                why = f"{h} is already in tenant {owner[h]}"
                raise bad(join(path, f"tenants.{tenant}.{i}"), h, "a host of one tenant only", why)
            owner[h] = tenant
    if out["policy"] == "tenant_paths" and not tenants:
        raise missing(join(path, "tenants"), "tenant -> hosts, for policy tenant_paths")
    problem = fabric_problem(ctx.fabric) if ctx.fabric and out["policy"] in SEEDED else None
    if problem is not None:
        others = listing([p for p in POLICIES if p not in SEEDED])
        raise bad(join(path, "policy"), out["policy"], f"on this fabric: {others}", problem)
    known = f"a tenant of controller.tenants: {listing(list(tenants)) or 'none declared'}"
    for tenant in out["spines"]:
        if tenant not in tenants:
            raise bad(join(path, f"spines.{tenant}"), tenant, known)
    classes = out["qos"]["classes"]
    for key in ("name", "dscp", "priority"):
        values = [c[key] for c in classes]
        for i, value in enumerate(values):
            if value is not None and value in values[:i]:
                where = join(path, f"qos.classes.{i}.{key}")
                raise bad(where, value, f"a {key} not used by another class")
    shares = sum(c["rate_share"] or 0.0 for c in classes)
    if shares > 1 + 1e-9:
        raise bad(join(path, "qos.classes"), shares, "rate_share values summing to at most 1")
    names = [c["name"] for c in classes]
    of_classes = f"a class of controller.qos.classes: {', '.join(names) or 'none'}"
    for tenant, given in out["qos"]["tenant_class"].items():
        where = join(path, f"qos.tenant_class.{tenant}")
        if tenant not in tenants:
            raise bad(where, tenant, known)
        for i, cls in enumerate(given if isinstance(given, list) else [given]):
            if cls not in names:
                raise bad(join(where, i) if isinstance(given, list) else where, cls, of_classes)
    default = out["qos"]["default_class"]
    if default is not None and default not in names:
        raise bad(join(path, "qos.default_class"), default, of_classes)


CONTROLLER = section(
    {
        "policy": Field(
            choice(POLICIES), "shortest_path", "the routing policy the controller installs"
        ),
        "tls": Field(
            boolean(),
            False,
            "OpenFlow over TLS only, with a CA made for the run and removed "
            "with it (what switches on other machines use)",
        ),
        "tenants": Field(
            mapping(name_text(), list_of(host(), 1, distinct=True)),
            {},
            "tenant -> its hosts (tenant_paths, QoS classes, noisy_neighbour)",
        ),
        "spines": Field(
            mapping(
                name_text(), list_of(node(("spine", "core"), "a spine switch"), 1, distinct=True)
            ),
            {},
            "tenant -> the spines its traffic may cross (policy tenant_paths)",
        ),
        "qos": Field(
            section(
                {
                    "classes": Field(
                        list_of(QOS_CLASS), [], "the egress classes, each a queue under HTB"
                    ),
                    "tenant_class": Field(
                        mapping(
                            name_text(), either(name_text(), list_of(name_text(), 1, distinct=True))
                        ),
                        {},
                        "tenant -> a class, or a list whose marks the tenant's packets keep",
                    ),
                    "default_class": Field(
                        optional(name_text()),
                        None,
                        "the class of unmarked traffic (default: the last)",
                    ),
                }
            ),
            {},
            "egress classes (HTB shares or strict priority) and which tenant gets which",
        ),
    },
    _controller_post,
)

PAIR = section(
    {
        "victim": Field(name_text(), doc="the tenant whose latency is judged"),
        "aggressor": Field(name_text(), doc="the tenant whose traffic may slow it"),
    }
)


def _spec_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    """Checks across sections: the fault timeline as a whole, noisy-neighbour tenants
    (one serving workload per spec: ``serving.one_serving``)."""
    assert ctx.fabric is not None
    scale = Scale(**out["scale"])
    # at auto, the smallest dilation (1): the planner checks the rates again at its choice
    faults_post(out["faults"], ctx.fabric, scale.dilated(1) if scale.auto else scale)
    _tenants_post(out, path, ctx)
    _transport_post(out, path, ctx, scale)


def _transport_post(out: dict[str, Any], path: str, ctx: Ctx, scale: Scale) -> None:
    """transport.congestion and agents.cc name one setting: a spec sets either, or both
    to the same value; the resolved spec holds the one in use in both. The minimum RTO
    must fit the kernel's range at the dilation (at auto, checked again when built)."""
    transport, agents = out["transport"], out["agents"]
    given = transport["congestion"]
    if given is not None:
        if "cc" in ctx.extra.get("agents given", ()) and agents["cc"] != given:
            raise bad(
                join(path, "transport.congestion"),
                given,
                f"agents.cc's value ({agents['cc']}) or null: the two keys name one setting",
            )
        agents["cc"] = given
    transport["congestion"] = agents["cc"]
    rto_min = transport["rto_min_ms"]
    if rto_min is not None and not scale.auto and rto_min * scale.d > RTO_MAX_MS:
        raise bad(
            join(path, "transport.rto_min_ms"),
            rto_min,
            f"at most {RTO_MAX_MS / scale.d:g} at scale.time_dilation {scale.d:g}",
            f"{rto_min * scale.d:g} ms of wall time is above the kernel's {RTO_MAX_MS} ms cap",
        )


def _tenants_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    """A noisy-neighbour pair names tenants the workloads use."""
    used = {w.get("tenant", "default") for w in out["workloads"]} | set(
        out["controller"]["tenants"]
    )
    for i, pair in enumerate(out["noisy_neighbour"]):
        for role in ("victim", "aggressor"):
            if pair[role] not in used:
                where = join(path, f"noisy_neighbour.{i}.{role}")
                raise bad(where, pair[role], f"a tenant of the workloads: {listing(sorted(used))}")


SWEEP_KEY = text(
    r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*", "a dotted key path such as workloads.0.senders"
)

SPEC_FIELDS: dict[str, Field] = {
    "name": Field(name_text(), doc="the experiment's name: results go to <out>/<name>/"),
    "seed": Field(integer(0), 1, "seed of every random draw (a run's seed: seed + repeat)"),
    "duration_s": Field(remember("duration_s", number(gt=0)), doc="how long the traffic runs, s"),
    "scale": Field(
        section(
            {
                "bandwidth": Field(
                    number(gt=0, le=1),
                    DEFAULT_BANDWIDTH_SCALE,
                    "emulated ÷ real rate and bytes (1e-4: 400 Gbit/s runs at 40 Mbit/s)",
                ),
                "mtu": Field(
                    integer(DEFAULT_MTU, MAX_MTU),
                    DEFAULT_MTU,
                    "every interface's MTU, bytes; above 1500 (jumbo frames) each packet "
                    "carries more and the switches forward fewer, at a coarser grain: "
                    "one packet stands for (mtu + 14) ÷ scale.bandwidth real bytes; "
                    "buffers keep their bytes",
                ),
                "time_dilation": Field(
                    either(number(ge=1, le=MAX_TIME_DILATION), choice(["auto"])),
                    1,
                    "wall seconds per real-equivalent second, d: links run at real × "
                    "scale.bandwidth ÷ d and every time (schedules, compute, timers, "
                    "duration_s) lasts × d on the wall clock, while every reported time "
                    "and rate reads in real-equivalent units; auto: the smallest of 1, 2, "
                    "4, 8, … at which the run fits this machine's envelope "
                    "(kvfabric run --max-dilation caps it)",
                ),
            }
        ),
        {},
        "the emulation's scale",
    ),
    "fabric": Field(_fabric(), doc="the topology: kind and its generator's parameters"),
    "cluster": Field(
        optional(CLUSTER),
        None,
        "several machines emulating the fabric together (default: this one alone)",
    ),
    "controller": Field(
        remember("controller", CONTROLLER), {}, "routing policy, tenants and QoS classes"
    ),
    "agents": Field(
        given_keys(
            "agents",
            section(
                {
                    "cc": Field(
                        choice(CONGESTION_CONTROLS),
                        "cubic",
                        "the hosts' TCP congestion control (transport.congestion is another "
                        "name for it)",
                    ),
                    "connection": Field(
                        choice(CONNECTIONS),
                        "persistent",
                        "one TCP connection per host pair, or one per flow",
                    ),
                    "processes": Field(
                        either(choice(["auto", "per_host"]), integer(1)),
                        "auto",
                        "agent worker processes: one per CPU (auto), one per host, or N",
                    ),
                    "flush_s": Field(
                        number(gt=0, le=3600),
                        2.0,
                        "seconds between saves of the finished flows, requests and tokens to "
                        "the run folder while it runs (a killed run keeps them)",
                    ),
                }
            ),
        ),
        {},
        "the processes that send and receive every host's traffic",
    ),
    "transport": Field(
        section(
            {
                "congestion": Field(
                    optional(choice(CONGESTION_CONTROLS)),
                    None,
                    "the hosts' TCP congestion control, another name for agents.cc: set "
                    "either (both only to the same value); null: agents.cc decides; the "
                    "resolved spec holds the one in use in both",
                ),
                "rto_min_ms": Field(
                    optional(number(ge=1, le=RTO_MAX_MS)),
                    None,
                    "TCP's minimum retransmission timeout, real-equivalent ms: every "
                    "host route gets rto_min of this × scale.time_dilation wall ms (at "
                    "most 120 s); null: the kernel's 200 ms of wall time, which does not "
                    "dilate",
                ),
                "delayed_ack": Field(
                    boolean(),
                    True,
                    "the kernel's delayed ACKs (40–200 ms of wall time, which do not "
                    "dilate); false: quickack on every host route, an ACK per segment",
                ),
                "tail_loss_probe": Field(
                    boolean(),
                    True,
                    "the kernel's tail-loss probe (its timer has wall-time floors, so at "
                    "a time dilation it probes sooner in real-equivalent time); false: "
                    "net.ipv4.tcp_early_retrans=0 in every host",
                ),
            }
        ),
        {},
        "TCP's timers in every host, real-equivalent: stretched × scale.time_dilation",
    ),
    "sampler": Field(
        section(
            {
                "rate_hz": Field(
                    number(gt=0, le=10_000), 200.0, "queue samples per second per shaped egress"
                ),
                "flush_s": Field(
                    number(gt=0, le=3600),
                    1.0,
                    "seconds between saves of the samples to the run folder while it runs "
                    "(a killed run keeps them)",
                ),
            }
        ),
        {},
        "the switch-queue sampler",
    ),
    "fidelity": Field(
        section(
            {
                "lateness_p99_ms": Field(
                    number(gt=0), 2.0, "the agents' issue lateness p99 a faithful run keeps"
                ),
                "cpu_max_pct": Field(
                    number(gt=0, le=100), 90.0, "machine CPU p95 a faithful run stays under, %"
                ),
                "dequeue_rate_tolerance": Field(
                    number(gt=0, le=1),
                    0.05,
                    "how far a busy egress may dequeue above or below its configured rate",
                ),
            }
        ),
        {},
        "the verdict's thresholds",
    ),
    "capture": Field(
        section(
            {
                "at": Field(
                    list_of(capture_point(), distinct=True),
                    [],
                    "hosts or switch ports to tcpdump (gpu0_0, leaf0:3, leaf0:spine1)",
                ),
                "snaplen": Field(integer(64, 65535), 65535, "bytes kept of each packet"),
                "max_mb": Field(number(gt=0, le=10_000), 20.0, "size limit of each capture, MB"),
                "window_s": Field(
                    optional(list_of(number(ge=0), 2, 2)),
                    None,
                    "[from, to] s of traffic to capture (default: all)",
                ),
            }
        ),
        {},
        "packet captures into the run's captures/",
    ),
    "faults": Field(list_of(FAULT), [], "link, switch, controller and agent failures at run times"),
    "workloads": Field(
        one_serving(list_of(workload())),
        [],
        "the traffic: each entry's kind picks its parameters",
    ),
    "noisy_neighbour": Field(
        list_of(PAIR), [], "tenant pairs whose interference the summary measures"
    ),
    "sweep": Field(
        mapping(SWEEP_KEY, list_of(anything(), 1)),
        {},
        "key path -> values: one run per point of the grid",
    ),
}
SPEC = section(SPEC_FIELDS, _spec_post)


def validate(raw: Any, base_dir: Path) -> dict[str, Any]:
    """The resolved spec (sweep grid included, unexpanded) or a ``SpecError``."""
    if raw is None:
        raise missing("name", "a spec needs name, duration_s and fabric")
    return SPEC(raw, "", Ctx(base_dir=base_dir))

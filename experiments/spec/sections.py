"""The top-level schema of a spec: run, scale, fabric, controller, agents, sampler,
fidelity thresholds, faults, workloads and the sweep grid.

``validate(raw, base_dir)`` checks a spec as written (a dict from YAML, overrides
applied) and returns it resolved: every default filled in, numbers normalised.
The fabric section is checked by building the ``Fabric`` (``topologies``), so its
errors are the generator's own, prefixed with the key path; names used later
(hosts of a tenant, the two ends of a failing link) are checked against it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from controller.policy import known_policies
from experiments.spec.schema import (
    Check,
    Ctx,
    Field,
    SpecError,
    anything,
    bad,
    capture_point,
    choice,
    either,
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
from experiments.spec.workloads import workload
from topologies import Fabric
from topologies.fabric import FabricError
from topologies.generators import GENERATORS, defaults, make_fabric
from topologies.shaping import MAX_BUFFER_PKTS

# The policies a spec may name; the controller adds its own as they land.
POLICIES = tuple(
    dict.fromkeys(("shortest_path", "ecmp", "adaptive", "tenant_paths", *known_policies()))
)
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
CONNECTIONS = ("persistent", "per_flow")
DEFAULT_BANDWIDTH_SCALE = 1.0e-4


@lru_cache(maxsize=64)
def _build(kind: str, params: tuple[tuple[str, Any], ...]) -> Fabric:
    return make_fabric(kind, **dict(params))


def build_fabric(resolved: dict[str, Any]) -> Fabric:
    """The ``Fabric`` of a resolved ``fabric:`` section (cached: fabrics are immutable)."""
    params = tuple((k, v) for k, v in resolved.items() if k != "kind")
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
            # The generator's message names the parameter: "spine_leaf: spines=0 is not ..."
            found = re.match(rf"{kind}: (\w+)=", str(exc))
            where = join(path, found.group(1)) if found else path
            value = raw.get(found.group(1)) if found else raw
            raise SpecError(f"{where}: {exc}", where, value) from None
        return out

    return Check(fn, allowed, lambda v: isinstance(v, dict))


def _qos_class_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    if out["rate_share"] is None and out["priority"] is None:
        raise missing(join(path, "rate_share"), "a rate_share in (0, 1] or a priority 0..7")
    if out["rate_share"] is not None and out["priority"] is not None:
        raise bad(join(path, "priority"), out["priority"],
                  "no priority next to a rate_share: a class is weighted or strict")  # fmt: skip


QOS_CLASS = section(
    {
        "name": Field(name_text()),
        "dscp": Field(integer(0, 63)),
        "rate_share": Field(optional(number(gt=0, le=1)), None),
        "priority": Field(optional(integer(0, 7)), None),  # strict priority: 0 is served first
        "buffer_pkts": Field(optional(integer(1, MAX_BUFFER_PKTS)), None),  # else the link's
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
        "policy": Field(choice(POLICIES), "shortest_path"),
        "tenants": Field(mapping(name_text(), list_of(host(), 1, distinct=True)), {}),
        "spines": Field(
            mapping(name_text(), list_of(node(("spine", "core"), "a spine switch"), 1, True)), {}
        ),
        "qos": Field(
            section(
                {
                    "classes": Field(list_of(QOS_CLASS), []),
                    # a class, or a list: the tenant's own marks of those classes are kept
                    "tenant_class": Field(
                        mapping(
                            name_text(), either(name_text(), list_of(name_text(), 1, distinct=True))
                        ),
                        {},
                    ),
                    "default_class": Field(optional(name_text()), None),  # else the last class
                }
            ),
            {},
        ),
    },
    _controller_post,
)

LINK_ENDS = list_of(node(), 2, 2, distinct=True)


def _fault_post(out: dict[str, Any], path: str, ctx: Ctx) -> dict[str, Any]:
    given = [k for k in ("link_down", "link_up") if out[k] is not None]
    if not given:
        raise missing(join(path, "link_down"), "exactly one of link_down or link_up: [a, b]")
    if len(given) == 2:
        raise bad(path, given, "exactly one of link_down or link_up per fault")
    duration = ctx.duration_s or 0.0
    if out["at_s"] >= duration:
        raise bad(join(path, "at_s"), out["at_s"], f"a time in [0, {duration:g}) s (duration_s)")
    event = given[0]
    a, b = out[event]
    assert ctx.fabric is not None
    peers = sorted(link.other(a) for link in ctx.fabric.links_of(a))
    if b not in peers:
        why = f"{a} and {b} are not linked"
        raise bad(
            join(path, event), [a, b], f"two linked nodes; {a} links to {listing(peers)}", why
        )
    return {"at_s": out["at_s"], event: [a, b]}


FAULT = section(
    {
        "at_s": Field(number(ge=0)),
        "link_down": Field(optional(LINK_ENDS), None),
        "link_up": Field(optional(LINK_ENDS), None),
    },
    _fault_post,
)

PAIR = section({"victim": Field(name_text()), "aggressor": Field(name_text())})


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

SPEC = section(
    {
        "name": Field(name_text()),
        "seed": Field(integer(0), 1),
        "duration_s": Field(remember("duration_s", number(gt=0))),
        "scale": Field(
            section({"bandwidth": Field(number(gt=0, le=1), DEFAULT_BANDWIDTH_SCALE)}), {}
        ),
        "fabric": Field(_fabric()),
        "controller": Field(CONTROLLER, {}),
        "agents": Field(
            section(
                {
                    "cc": Field(choice(CONGESTION_CONTROLS), "cubic"),
                    "connection": Field(choice(CONNECTIONS), "persistent"),
                    # agent worker processes: one per CPU (auto), one per host, or N
                    "processes": Field(either(choice(["auto", "per_host"]), integer(1)), "auto"),
                }
            ),
            {},
        ),
        "sampler": Field(section({"rate_hz": Field(number(gt=0, le=10_000), 200.0)}), {}),
        "fidelity": Field(
            section(
                {
                    "lateness_p99_ms": Field(number(gt=0), 2.0),
                    "cpu_max_pct": Field(number(gt=0, le=100), 90.0),
                    "dequeue_rate_tolerance": Field(number(gt=0, le=1), 0.05),
                }
            ),
            {},
        ),
        "capture": Field(
            section(
                {
                    "at": Field(list_of(capture_point(), distinct=True), []),
                    "snaplen": Field(integer(64, 65535), 65535),
                    "max_mb": Field(number(gt=0, le=10_000), 20.0),
                    "window_s": Field(optional(list_of(number(ge=0), 2, 2)), None),
                }
            ),
            {},
        ),
        "faults": Field(list_of(FAULT), []),
        "workloads": Field(list_of(workload()), []),
        "noisy_neighbour": Field(list_of(PAIR), []),
        "sweep": Field(mapping(SWEEP_KEY, list_of(anything(), 1)), {}),
    },
    _tenants_post,
)


def validate(raw: Any, base_dir: Path) -> dict[str, Any]:
    """The resolved spec (sweep grid included, unexpanded) or a ``SpecError``."""
    if raw is None:
        raise missing("name", "a spec needs name, duration_s and fabric")
    return SPEC(raw, "", Ctx(base_dir=base_dir))

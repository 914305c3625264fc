"""Routing policies: fabric + state + parameters in, rules and groups out (no
OpenFlow library). ``compute`` is the one entry point for every policy.

- ``shortest_path``: every switch forwards each destination to the one
  equal-cost port it prefers (the same for every destination, chosen at random
  from the run's seed, ``ties.py``), so all traffic between two leaves shares
  one spine (a baseline that concentrates load).
- ``ecmp``: a select group over every equal-cost next hop.
- ``adaptive``: ECMP, plus a rule at each host's network port that copies new
  TCP/UDP flows to the controller, which places them with
  ``adaptive.place_flow`` (params ``idle_timeout_s``, and ``poll_s``: port
  counters polled at least every 200 ms).
- ``tenant_paths``: ECMP, plus per-tenant source+destination routes confined
  to the tenant's spines (``tenants.py``).
- ``minimal``: ECMP over the minimal routes (``minimal.py``): on a dragonfly, one
  global link at most; elsewhere the fewest-hop routes (as ``ecmp``).
- ``valiant``: minimal, plus each pair of hosts routed through an intermediate group
  (dragonfly) or switch drawn from ``params["seed"]`` (``valiant.py``).
- ``ugal``: minimal, plus each new TCP/UDP flow placed on its minimal route or a
  Valiant one by the port counters (``ugal.py``; params ``seed``, ``idle_timeout_s``,
  ``poll_s`` as ``adaptive``).

Any policy takes ``params["qos"]`` (DSCP marking at host ports, ``qos.py``),
``params["tenants"]`` and ``params["seed"]`` (the run's seed: every tie among equal
candidates is broken at random from it, never by index). The table and priority
layout is in ``core.py``.

``params`` are plain data, the controller's own format (they reach the controller
process as JSON and are checked here, not by the spec): the experiments side builds
them from the run's configuration, and a configuration section given in their place
(``Qos``, a read-only ``tenants`` table) is read as the plain data it was resolved from
(``core.plain_params``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from topologies import Fabric

from . import adaptive, qos, tenants, valiant
from .core import (
    PRIORITY_DEFAULT,
    TABLE_CLASSIFY,
    TABLE_PLACE,
    TABLE_ROUTE,
    FabricState,
    Forward,
    PolicyError,
    check_keys,
    plain_params,
)
from .ecmp import destination_routes, materialise
from .minimal import longest_route_hops, minimal_hops
from .paths import next_hops
from .rules import Rule, RuleSet, diff
from .ties import seed_of

__all__ = ["FabricState", "PolicyError", "compute", "diff", "known_policies", "POLICIES"]

COMMON_PARAMS = ("tenants", "qos", "seed")


@dataclass(frozen=True)
class Context:
    fabric: Fabric
    state: FabricState
    params: dict[str, Any]
    hops: dict[str, dict[str, list[tuple[str, int]]]]
    tenants: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Policy:
    routes: Callable[[Context], tuple[list[Forward], list[Rule]]]
    params: tuple[str, ...] = ()


def _shortest_path(ctx: Context) -> tuple[list[Forward], list[Rule]]:
    return destination_routes(ctx.fabric, ctx.hops, spread=False, seed=seed_of(ctx.params)), []


def _ecmp(ctx: Context) -> tuple[list[Forward], list[Rule]]:
    return destination_routes(ctx.fabric, ctx.hops, spread=True), []


def _adaptive(ctx: Context) -> tuple[list[Forward], list[Rule]]:
    adaptive.idle_timeout(ctx.params)  # validated here, before anything is built
    adaptive.poll_interval(ctx.params)
    return destination_routes(ctx.fabric, ctx.hops, spread=True), adaptive.packet_in_rules(
        ctx.fabric
    )


def _tenant_paths(ctx: Context) -> tuple[list[Forward], list[Rule]]:
    if not ctx.tenants:
        raise PolicyError("policy tenant_paths needs params['tenants']: {tenant: [host, ...]}")
    if any(sw.kind == "router" for sw in ctx.fabric.switches):
        raise PolicyError(
            f"controller.policy tenant_paths: not allowed: it keeps tenants to spines, and "
            f"this {ctx.fabric.kind} fabric has routers only"
        )
    spines = tenants.assign_spines(ctx.fabric, ctx.tenants, ctx.params.get("spines"))
    forwards = destination_routes(ctx.fabric, ctx.hops, spread=True)
    forwards += tenants.tenant_routes(ctx.fabric, ctx.state, ctx.hops, ctx.tenants, spines)
    return forwards, []


def _minimal(ctx: Context) -> tuple[list[Forward], list[Rule]]:
    hops = minimal_hops(ctx.fabric, ctx.state.down_pairs())
    return destination_routes(ctx.fabric, hops, spread=True), []


def _valiant(ctx: Context) -> tuple[list[Forward], list[Rule]]:
    seed = valiant.check_seed(ctx.params)
    valiant.check_fabric(ctx.fabric, "valiant")
    hops = minimal_hops(ctx.fabric, ctx.state.down_pairs())
    forwards = destination_routes(ctx.fabric, hops, spread=True)
    return forwards + valiant.valiant_routes(ctx.fabric, ctx.state, hops, seed), []


def _ugal(ctx: Context) -> tuple[list[Forward], list[Rule]]:
    valiant.check_seed(ctx.params)
    valiant.check_fabric(ctx.fabric, "ugal")
    adaptive.idle_timeout(ctx.params)
    adaptive.poll_interval(ctx.params)
    forwards, _ = _minimal(ctx)
    return forwards, adaptive.packet_in_rules(ctx.fabric)


POLICIES: dict[str, Policy] = {
    "shortest_path": Policy(_shortest_path),
    "ecmp": Policy(_ecmp),
    "adaptive": Policy(_adaptive, ("idle_timeout_s", "poll_s")),
    "tenant_paths": Policy(_tenant_paths, ("spines",)),
    "minimal": Policy(_minimal),
    "valiant": Policy(_valiant, ("seed",)),
    "ugal": Policy(_ugal, ("seed", "idle_timeout_s", "poll_s")),
}
# Policies that place each new flow from the controller (packet-in), and those that draw
# from the run's seed (the experiments side passes it as params["seed"]).
PLACING = ("adaptive", "ugal")
SEEDED = ("valiant", "ugal")


def compute(
    fabric: Fabric,
    policy: str,
    state: FabricState | None = None,
    params: dict[str, Any] | None = None,
) -> RuleSet:
    """Every rule and group ``policy`` wants on ``fabric`` in ``state``.

    Links down in ``state`` appear in no rule and no group; a destination a
    switch cannot reach gets no rule there. Raises PolicyError naming any
    unknown policy or bad parameter.
    """
    try:
        spec = POLICIES[policy]
    except KeyError:
        raise PolicyError(
            f"policy {policy!r} is not known: allowed {', '.join(POLICIES)}"
        ) from None
    state = state or FabricState()
    params = plain_params(dict(params or {}))
    check_keys(f"policy {policy}", params, spec.params + COMMON_PARAMS)
    seed_of(params)  # checked here, before anything is built
    groups = tenants.parse_tenants(fabric, params["tenants"]) if "tenants" in params else {}
    hops = next_hops(fabric, state.down_pairs())
    forwards, extra = spec.routes(Context(fabric, state, params, hops, groups))
    if "qos" in params:
        extra = extra + qos.marking_rules(fabric, groups, params["qos"])
    ruleset = materialise(forwards)
    ruleset.rules = _table_defaults(fabric) + extra + ruleset.rules
    return ruleset


def path_hops(
    fabric: Fabric, policy: str, state: FabricState, params: dict[str, Any]
) -> dict[str, int] | None:
    """For the low-diameter policies (``minimal``, ``valiant``, ``ugal``): how many
    ordered pairs of hosts cross n switch-to-switch hops on their longest proactive
    route (``{"n": pairs}``; a ``ugal`` flow placed on a Valiant route is counted by the
    session). None for every other policy."""
    if policy not in ("minimal", "valiant", "ugal"):
        return None
    hops = minimal_hops(fabric, state.down_pairs())
    if policy == "valiant":
        found = valiant.route_hops(fabric, state, hops, valiant.check_seed(params))
    else:
        found = longest_route_hops(fabric, hops)
    return {str(n): found[n] for n in sorted(found)}


def _table_defaults(fabric: Fabric) -> list[Rule]:
    """Table-miss entries that pass packets down the pipeline to the routing table."""
    return [
        Rule(sw.name, PRIORITY_DEFAULT, (), (("goto_table", nxt),), table=table)
        for sw in fabric.switches
        for table, nxt in ((TABLE_CLASSIFY, TABLE_PLACE), (TABLE_PLACE, TABLE_ROUTE))
    ]


def known_policies() -> Iterable[str]:
    return POLICIES.keys()

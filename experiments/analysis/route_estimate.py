"""What the low-diameter routings (``minimal``, ``valiant``, ``ugal``) predict for flows
that start together, for ``kvfabric estimate``: each flow's share of its injection rate
and its FCT slowdown, from the routes the controller's policy core gives them.

The model is fluid. Every flow crosses the links of its route (a flow with several
equal minimal routes splits evenly over them, as a hash spreads many flows); the links
share their real rate max-min fairly among the flows crossing them (progressive
filling: every unfrozen flow's rate grows alike until a link fills, which freezes the
flows crossing it). When a flow ends the rest are shared again, so with equal sizes a
flow's FCT is the time to move its bytes through that sequence of shares. Its slowdown
is FCT ÷ the time alone (its route's slowest link); its share is its mean rate ÷ its
host link's rate. No slow start, loss or queue: a lower bound on what TCP measures.

Routes: ``minimal`` as ``controller.minimal`` (a dragonfly's one global link at most),
``valiant`` each host pair's route drawn from the run's seed as the controller draws
it (``controller.valiant.route``), so the estimate sees the same intermediates the
run will. ``ugal`` has two answers: with load information fresher than the flows'
arrivals it takes, per the textbook, whichever of the two is better
(``ugal_fresh``); flows that start within one counter-polling interval all see an idle
fabric, and UGAL routes minimally on a tie (``ugal_same_counters``, which is what a
wave of simultaneous transfers gets).

The balance of the load over the inter-group (dragonfly) or router-to-router links is
``link_mmr``: MMR as the BMWG inference-fabric draft's [TERMINOLOGY] defines it, the
largest load ÷ the mean load (``experiments.analysis.bmwg.fabric.mmr``, 1.0 a perfect
balance), with the max ÷ min ratio beside it. Max ÷ mean, not max ÷ min: minimal
routing of group-to-group traffic leaves most global links idle, and max ÷ min is then
unbounded (None) while max ÷ mean still says how far from balanced it is.

``textbook`` gives the closed forms for a dragonfly whose groups each send everything
to one other group (Kim et al., 2008): minimal puts a group's a·p hosts on the m
global links to that group, a share of m·global ÷ (a·p·host); Valiant spreads them over
the group's a·h global links, each packet crossing two, a share of a·h·global ÷
(2·a·p·host); both capped at 1.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from controller import valiant
from controller.core import FabricState, ingress
from controller.minimal import minimal_hops, routes
from experiments.analysis.bmwg.fabric import max_min_ratio, mmr
from topologies import Fabric

Pair = tuple[str, str]
Link = tuple[str, str]  # a directed link: (from node, to node)
POLICIES = ("minimal", "valiant", "valiant_spread")
SPREAD_DRAWS = 32  # Valiant routes per pair in the many-flows limit
EPSILON = 1e-12


def policy_routes(fabric: Fabric, policy: str, pairs: Sequence[Pair], seed: int) -> list[dict]:
    """Per pair, its routes (node lists, hosts included) under ``policy``: ``{"pair",
    "routes"}``, every route taken equally often. ``valiant_spread``: the pair's traffic
    split over ``SPREAD_DRAWS`` Valiant routes drawn afresh (many flows per pair, or
    per-packet spraying: the textbook's assumption)."""
    state = FabricState()
    hops = minimal_hops(fabric)
    out = []
    for src, dst in pairs:
        minimal = [[src] + r for r in routes(hops, ingress(fabric, src, dst)[0], dst)]
        chosen = minimal
        if policy == "valiant":
            rng = valiant.pair_random(seed, src, dst)
            detour = valiant.route(fabric, state, hops, src, dst, rng)
            chosen = [detour] if detour is not None else minimal
        elif policy == "valiant_spread":
            draws = [
                valiant.route(fabric, state, hops, src, dst, valiant.pair_random(seed, src, dst, k))
                for k in range(SPREAD_DRAWS)
            ]
            chosen = [d for d in draws if d is not None] or minimal
        out.append({"pair": (src, dst), "routes": chosen})
    return out


def _usage(routed: list[dict]) -> list[dict[Link, float]]:
    """Per flow: directed link -> the share of the flow's rate crossing it."""
    found = []
    for flow in routed:
        use: dict[Link, float] = defaultdict(float)
        for path in flow["routes"]:
            for a, b in zip(path, path[1:], strict=False):
                use[(a, b)] += 1 / len(flow["routes"])
        found.append(dict(use))
    return found


def max_min_rates(
    usage: list[dict[Link, float]], capacity: dict[Link, float], active: Sequence[int]
) -> dict[int, float]:
    """Max-min fair rates (Gbit/s) of the ``active`` flows by progressive filling."""
    rates = {f: 0.0 for f in active}
    left = dict(capacity)
    growing = set(active)
    while growing:
        steps = []
        for link, cap in left.items():
            weight = sum(usage[f].get(link, 0.0) for f in growing)
            if weight > EPSILON:
                steps.append((cap / weight, link))
        if not steps:
            break
        step = min(s for s, _ in steps)
        for f in growing:
            rates[f] += step
        for link in left:
            left[link] -= step * sum(usage[f].get(link, 0.0) for f in growing)
        full = {link for s, link in steps if s <= step * (1 + 1e-9)}
        growing -= {f for f in growing if any(usage[f].get(link, 0.0) > 0 for link in full)}
    return rates


def fluid_fcts(
    usage: list[dict[Link, float]], capacity: dict[Link, float], gbits: float
) -> list[float]:
    """Seconds each flow of ``gbits`` takes when all start together and the rest are
    shared again at every completion."""
    left = {f: gbits for f in range(len(usage))}
    done = [0.0] * len(usage)
    now = 0.0
    while left:
        rates = max_min_rates(usage, capacity, sorted(left))
        step = min(left[f] / rates[f] for f in left)
        now += step
        for f in list(left):
            left[f] -= rates[f] * step
            if left[f] <= gbits * 1e-9:
                done[f] = now
                del left[f]
    return done


def _capacity(fabric: Fabric) -> dict[Link, float]:
    return {
        end: lk.real_gbps
        for lk in fabric.links
        for end in ((lk.a, lk.b), (lk.b, lk.a))
        if lk.kind != "nvlink"
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}


def route_outcome(fabric: Fabric, routed: list[dict], gbits: float) -> dict[str, Any]:
    """Shares of injection, FCT slowdowns and the busiest directed links for ``routed``."""
    capacity = _capacity(fabric)
    usage = _usage(routed)
    fcts = fluid_fcts(usage, capacity, gbits)
    alone = [gbits / min(capacity[link] for link in use) for use in usage]
    injection = [capacity[(f["pair"][0], f["routes"][0][1])] for f in routed]
    shares = [gbits / fct / rate for fct, rate in zip(fcts, injection, strict=True)]
    load: Counter[Link] = Counter()
    for use in usage:
        load.update(use)
    busiest = max(load.values())
    hops = [len(path) - 3 for f in routed for path in f["routes"]]
    between = [load.get(link, 0.0) for link in capacity if _inter_router(fabric, *link)]
    return {
        "injection_share": _stats(shares),
        "fct_slowdown": _stats([fct / a for fct, a in zip(fcts, alone, strict=True)]),
        "fct_ms": _stats([fct * 1e3 for fct in fcts]),
        "most_flows_on_a_link": busiest,
        "busiest_links": sorted(f"{a}→{b}" for (a, b), n in load.items() if n == busiest),
        "switch_hops": {"mean": sum(hops) / len(hops), "max": max(hops)},
        "link_mmr": mmr(between),
        "link_max_min_ratio": max_min_ratio(between),
    }


def _inter_router(fabric: Fabric, a: str, b: str) -> bool:
    """A link MMR weighs: between two groups on a dragonfly, between two switches else."""
    one, other = fabric.node(a), fabric.node(b)
    if one.is_host or other.is_host:
        return False
    return fabric.kind != "dragonfly" or one.pod != other.pod


def textbook(fabric: Fabric) -> dict[str, float] | None:
    """The closed-form shares of a dragonfly's group-to-group pattern, or None."""
    if fabric.kind != "dragonfly":
        return None
    prm = fabric.params
    p, a, h = prm["p"], prm["a"], prm["h"]
    groups = prm["groups"] or a * h + 1
    m = a * h // (groups - 1)  # global links between two groups
    host, glob = prm["host_gbps"], prm["global_gbps"]
    return {
        "minimal": min(1.0, m * glob / (a * p * host)),
        "valiant": min(1.0, a * h * glob / (2 * a * p * host)),
    }


def route_estimate(
    fabric: Fabric, pairs: Sequence[Pair], gbytes: float, policy: str, seed: int
) -> dict[str, Any]:
    """The estimate for ``pairs`` each moving ``gbytes`` GB, all starting together."""
    gbits = gbytes * 8
    by = {p: route_outcome(fabric, policy_routes(fabric, p, pairs, seed), gbits) for p in POLICIES}
    fresh = max(("minimal", "valiant"), key=lambda p: by[p]["injection_share"]["mean"])
    by["ugal_fresh"] = by[fresh] | {"takes": fresh}
    by["ugal_same_counters"] = by["minimal"] | {"takes": "minimal"}
    this = "ugal_same_counters" if policy == "ugal" else policy
    return {
        "flows": len(pairs),
        "gbytes_per_flow": gbytes,
        "seed": seed,
        "textbook_injection_share": textbook(fabric),
        "by_policy": by,
        "this_policy": by.get(this),
    }

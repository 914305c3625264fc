"""Routing policies: fabric + state in, rules and groups out (no OpenFlow library).

``shortest_path`` is the baseline: every switch forwards each destination to
its lowest-numbered equal-cost port, so all traffic between two leaves shares
one spine. Other policies build on the same next-hop table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from topologies import Fabric

from .paths import next_hops
from .rules import IPV4, Rule, RuleSet

PRIORITY_ROUTE = 100


class PolicyError(ValueError):
    """A policy name or parameter that cannot be honoured."""


@dataclass(frozen=True)
class FabricState:
    """What the controller knows at an instant: links that are down."""

    down: frozenset[frozenset[str]] = field(default_factory=frozenset)

    def with_link(self, a: str, b: str, up: bool) -> FabricState:
        pair = frozenset((a, b))
        return FabricState(self.down - {pair} if up else self.down | {pair})

    def down_pairs(self) -> list[tuple[str, str]]:
        return [tuple(sorted(p)) for p in self.down]  # type: ignore[misc]


def shortest_path(fabric: Fabric, state: FabricState | None = None) -> RuleSet:
    """One deterministic path per destination: the lowest equal-cost port."""
    state = state or FabricState()
    table = next_hops(fabric, state.down_pairs())
    rules = []
    for sw, per_dst in table.items():
        for dst, hops in per_dst.items():
            rules.append(_route(sw, fabric.node(dst).ip or "", hops[0][1]))
    return RuleSet(rules=rules)


def _route(switch: str, dst_ip: str, port: int) -> Rule:
    return Rule(
        switch=switch,
        priority=PRIORITY_ROUTE,
        match=(("eth_type", IPV4), ("ipv4_dst", dst_ip)),
        actions=(("output", port),),
    )


POLICIES: dict[str, Callable[..., RuleSet]] = {"shortest_path": shortest_path}


def compute(fabric: Fabric, policy: str, state: FabricState | None = None) -> RuleSet:
    """The rules ``policy`` wants on ``fabric`` in ``state``."""
    try:
        fn = POLICIES[policy]
    except KeyError:
        raise PolicyError(
            f"policy {policy!r} is not known: allowed {', '.join(POLICIES)}"
        ) from None
    return fn(fabric, state)


def known_policies() -> Iterable[str]:
    return POLICIES.keys()

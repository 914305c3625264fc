"""OpenFlow 1.3 rules and groups as plain data.

The policy core returns these; the os-ken app and the ``ovs-ofctl`` installer
only translate them. Match fields use OpenFlow 1.3 OXM names (as os-ken does).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

IPV4 = 0x0800

# OXM name -> ovs-ofctl field name, for fields whose ovs-ofctl spelling differs.
_OFCTL_FIELDS = {
    "eth_type": "dl_type",
    "ipv4_src": "nw_src",
    "ipv4_dst": "nw_dst",
    "ip_proto": "nw_proto",
    "in_port": "in_port",
}


@dataclass(frozen=True)
class Rule:
    """One flow entry: on ``switch``, packets matching ``match`` get ``actions``.

    ``actions`` is a tuple of ``(name, value)``: ``("output", port)``,
    ``("group", group_id)`` or ``("set_field", ("ip_dscp", 46))``.
    """

    switch: str
    priority: int
    match: tuple[tuple[str, Any], ...]
    actions: tuple[tuple[str, Any], ...]
    idle_timeout: int = 0
    table: int = 0

    def match_dict(self) -> dict[str, Any]:
        return dict(self.match)

    def outputs(self) -> list[int]:
        return [v for a, v in self.actions if a == "output"]

    def group(self) -> int | None:
        return next((v for a, v in self.actions if a == "group"), None)


@dataclass(frozen=True)
class Group:
    """An OpenFlow group; ``buckets`` are action tuples like ``Rule.actions``."""

    switch: str
    group_id: int
    type: str  # "select" (ECMP) | "all" | "indirect"
    buckets: tuple[tuple[tuple[str, Any], ...], ...]

    def outputs(self) -> list[int]:
        return [v for bucket in self.buckets for a, v in bucket if a == "output"]


@dataclass
class RuleSet:
    """Everything a policy wants installed, keyed by switch name."""

    rules: list[Rule] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)

    def for_switch(self, switch: str) -> tuple[list[Rule], list[Group]]:
        return (
            [r for r in self.rules if r.switch == switch],
            [g for g in self.groups if g.switch == switch],
        )

    def switches(self) -> list[str]:
        return sorted({r.switch for r in self.rules} | {g.switch for g in self.groups})


def ofctl_match(match: Iterable[tuple[str, Any]]) -> str:
    return ",".join(f"{_OFCTL_FIELDS.get(k, k)}={_value(v)}" for k, v in match)


def ofctl_actions(actions: Iterable[tuple[str, Any]]) -> str:
    parts = []
    for name, value in actions:
        if name == "output":
            parts.append(f"output:{value}")
        elif name == "group":
            parts.append(f"group:{value}")
        elif name == "set_field":
            fname, fvalue = value
            parts.append(f"set_field:{_value(fvalue)}->{fname}")
        else:
            raise ValueError(f"action {name!r} has no ovs-ofctl translation")
    return ",".join(parts) or "drop"


def ofctl_flow(rule: Rule) -> str:
    """The rule as one line of ``ovs-ofctl add-flows`` input."""
    head = f"table={rule.table},priority={rule.priority}"
    if rule.idle_timeout:
        head += f",idle_timeout={rule.idle_timeout}"
    match = ofctl_match(rule.match)
    return f"{head}{',' + match if match else ''},actions={ofctl_actions(rule.actions)}"


def ofctl_group(group: Group) -> str:
    """The group as one line of ``ovs-ofctl add-groups`` input."""
    buckets = ",".join(f"bucket={ofctl_actions(b)}" for b in group.buckets)
    return f"group_id={group.group_id},type={group.type},{buckets}"


def _value(v: Any) -> str:
    return hex(v) if isinstance(v, int) and v > 255 else str(v)

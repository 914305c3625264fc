"""OpenFlow 1.3 rules and groups as plain data.

The policy core returns these; the os-ken app and the ``ovs-ofctl`` installer
only translate them. Match fields use OpenFlow 1.3 OXM names (as os-ken does).
Everything converts to and from JSON-ready dicts (``to_dict``/``from_dict``),
and ``diff`` says what to send to move a switch from one rule set to another.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

IPV4 = 0x0800
TCP, UDP = 6, 17
CONTROLLER = "CONTROLLER"  # ("output", CONTROLLER): a packet-in
# Bytes of a packet copied to the controller: enough for Ethernet+IPv4+TCP/UDP.
PACKET_IN_BYTES = 128

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
    ``("output", "CONTROLLER")`` (packet-in, ``PACKET_IN_BYTES`` long),
    ``("group", group_id)``, ``("set_field", ("ip_dscp", 46))`` or
    ``("goto_table", n)``. In OpenFlow 1.3 terms every action but
    ``goto_table`` goes, in order, into one apply-actions instruction;
    ``goto_table`` is a goto-table instruction.
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

    def goto_table(self) -> int | None:
        return next((v for a, v in self.actions if a == "goto_table"), None)

    def key(self) -> tuple[str, int, int, tuple[tuple[str, Any], ...]]:
        """What identifies the flow entry on its switch (OpenFlow strict match)."""
        return (self.switch, self.table, self.priority, self.match)

    def to_dict(self) -> dict[str, Any]:
        return {
            "switch": self.switch,
            "table": self.table,
            "priority": self.priority,
            "match": [list(m) for m in self.match],
            "actions": [[a, list(v) if isinstance(v, tuple) else v] for a, v in self.actions],
            "idle_timeout": self.idle_timeout,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        return cls(
            switch=data["switch"],
            priority=int(data["priority"]),
            match=_tuples(data["match"]),
            actions=_tuples(data["actions"]),
            idle_timeout=int(data.get("idle_timeout", 0)),
            table=int(data.get("table", 0)),
        )


@dataclass(frozen=True)
class Group:
    """An OpenFlow group; ``buckets`` are action tuples like ``Rule.actions``."""

    switch: str
    group_id: int
    type: str  # "select" (ECMP) | "all" | "indirect"
    buckets: tuple[tuple[tuple[str, Any], ...], ...]

    def outputs(self) -> list[int]:
        return [v for bucket in self.buckets for a, v in bucket if a == "output"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "switch": self.switch,
            "group_id": self.group_id,
            "type": self.type,
            "buckets": [[list(a) for a in b] for b in self.buckets],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Group:
        return cls(data["switch"], int(data["group_id"]), data["type"], _tuples(data["buckets"]))


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "rules": [r.to_dict() for r in self.rules],
            "groups": [g.to_dict() for g in self.groups],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleSet:
        return cls(
            rules=[Rule.from_dict(r) for r in data.get("rules", [])],
            groups=[Group.from_dict(g) for g in data.get("groups", [])],
        )


def _tuples(value: Any) -> Any:
    """JSON lists back into the tuples rules are made of."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


@dataclass
class SwitchChanges:
    """What to send to one switch to go from an old rule set to a new one.

    Send in this order so no rule ever points at a missing group:
    ``groups_add`` (GroupMod ADD), ``groups_modify`` (MODIFY), ``rules_add``
    (FlowMod ADD, which replaces an entry with the same table, priority and
    match), ``rules_delete`` (DELETE_STRICT on table, priority and match),
    ``groups_delete`` (DELETE).
    """

    rules_add: list[Rule] = field(default_factory=list)
    rules_delete: list[Rule] = field(default_factory=list)
    groups_add: list[Group] = field(default_factory=list)
    groups_modify: list[Group] = field(default_factory=list)
    groups_delete: list[Group] = field(default_factory=list)

    def _parts(self) -> tuple[list[Rule] | list[Group], ...]:
        return (
            self.groups_add,
            self.groups_modify,
            self.rules_add,
            self.rules_delete,
            self.groups_delete,
        )

    def __bool__(self) -> bool:
        return any(self._parts())

    def messages(self) -> int:
        """How many FlowMods and GroupMods this is."""
        return sum(map(len, self._parts()))


def diff(old: RuleSet, new: RuleSet) -> dict[str, SwitchChanges]:
    """Per switch, only what changed between ``old`` and ``new`` (switches
    without changes are left out). A rule whose table, priority and match
    stay but whose actions or timeout change is re-added, not deleted."""
    changes: dict[str, SwitchChanges] = {}

    def at(sw: str) -> SwitchChanges:
        return changes.setdefault(sw, SwitchChanges())

    old_rules = {r.key(): r for r in old.rules}
    new_rules = {r.key(): r for r in new.rules}
    for key, rule in new_rules.items():
        if old_rules.get(key) != rule:
            at(rule.switch).rules_add.append(rule)
    for key, rule in old_rules.items():
        if key not in new_rules:
            at(rule.switch).rules_delete.append(rule)
    old_groups = {(g.switch, g.group_id): g for g in old.groups}
    new_groups = {(g.switch, g.group_id): g for g in new.groups}
    for key, group in new_groups.items():
        if key not in old_groups:
            at(group.switch).groups_add.append(group)
        elif old_groups[key] != group:
            at(group.switch).groups_modify.append(group)
    for key, group in old_groups.items():
        if key not in new_groups:
            at(group.switch).groups_delete.append(group)
    return {sw: changes[sw] for sw in sorted(changes) if changes[sw]}


def ofctl_match(match: Iterable[tuple[str, Any]]) -> str:
    return ",".join(f"{_OFCTL_FIELDS.get(k, k)}={_value(v)}" for k, v in match)


def ofctl_actions(actions: Iterable[tuple[str, Any]]) -> str:
    parts = []
    goto = []
    for name, value in actions:
        if name == "output" and value == CONTROLLER:
            parts.append(f"controller(max_len={PACKET_IN_BYTES})")
        elif name == "output":
            parts.append(f"output:{value}")
        elif name == "goto_table":
            goto.append(f"goto_table:{value}")  # an instruction: ovs-ofctl wants it last
        elif name == "group":
            parts.append(f"group:{value}")
        elif name == "set_field":
            fname, fvalue = value
            parts.append(f"set_field:{_value(fvalue)}->{fname}")
        else:
            raise ValueError(f"action {name!r} has no ovs-ofctl translation")
    return ",".join(parts + goto) or "drop"


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

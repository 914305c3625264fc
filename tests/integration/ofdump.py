"""Switch tables and policy-core output in one canonical form (tests only).

``parse_flows``/``parse_groups`` read ``ovs-ofctl -O OpenFlow13 dump-flows`` /
``dump-groups`` text; ``flow_of``/``group_of`` turn the core's ``Rule``/``Group``
data into the same ``Flow``/``GroupEntry`` values, as ``controller/ofp.py``
sends them (kvfabric's cookie on every flow, ``send_flow_rem`` on flows with an
idle timeout, select buckets of weight 1). Match fields use OpenFlow 1.3 OXM
names (``ipv4_dst``, ``ip_dscp``, ``tcp_src`` ...): ovs-ofctl's spellings
(``ip``, ``tcp``, ``nw_dst``, ``nw_tos``, ``tp_src`` ...) are translated.
Anything not understood is kept as a ``raw`` item, so it shows up as a
difference instead of being dropped.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from controller.ofp import COOKIE
from controller.rules import CONTROLLER, PACKET_IN_BYTES, Group, Rule

OFP_DEFAULT_PRIORITY = 32768
IPV4, IPV6 = 0x0800, 0x86DD

# ovs-ofctl protocol shorthands -> the match fields they stand for
_PROTOCOLS: dict[str, dict[str, int]] = {
    "ip": {"eth_type": IPV4},
    "ipv6": {"eth_type": IPV6},
    "arp": {"eth_type": 0x0806},
    "rarp": {"eth_type": 0x8035},
    "mpls": {"eth_type": 0x8847},
    "mplsm": {"eth_type": 0x8848},
    "icmp": {"eth_type": IPV4, "ip_proto": 1},
    "igmp": {"eth_type": IPV4, "ip_proto": 2},
    "tcp": {"eth_type": IPV4, "ip_proto": 6},
    "udp": {"eth_type": IPV4, "ip_proto": 17},
    "sctp": {"eth_type": IPV4, "ip_proto": 132},
    "icmp6": {"eth_type": IPV6, "ip_proto": 58},
    "tcp6": {"eth_type": IPV6, "ip_proto": 6},
    "udp6": {"eth_type": IPV6, "ip_proto": 17},
    "sctp6": {"eth_type": IPV6, "ip_proto": 132},
}
# ovs-ofctl field names -> OXM names (fields spelt the same are not listed)
_FIELDS = {
    "dl_type": "eth_type",
    "dl_src": "eth_src",
    "dl_dst": "eth_dst",
    "dl_vlan": "vlan_vid",
    "dl_vlan_pcp": "vlan_pcp",
    "nw_src": "ipv4_src",
    "nw_dst": "ipv4_dst",
    "ip_src": "ipv4_src",
    "ip_dst": "ipv4_dst",
    "nw_proto": "ip_proto",
    "nw_ecn": "ip_ecn",
    "icmp_type": "icmpv4_type",
    "icmp_code": "icmpv4_code",
}
_L4 = {6: "tcp", 17: "udp", 132: "sctp"}
# words in a flow's header that are neither statistics nor match fields
_FLOW_FLAGS = {
    "send_flow_rem",
    "check_overlap",
    "reset_counts",
    "no_packet_counts",
    "no_byte_counts",
}
_STATS = {
    "cookie",
    "duration",
    "table",
    "n_packets",
    "n_bytes",
    "idle_timeout",
    "hard_timeout",
    "importance",
    "idle_age",
    "hard_age",
    "priority",
}

Item = tuple[str, Any]


def _value(v: Any) -> Any:
    """One spelling per value: numbers as int, ``/32`` host masks dropped."""
    if isinstance(v, bool) or not isinstance(v, str):
        return v
    s = v.strip()
    if re.fullmatch(r"\d+", s):
        return int(s)
    if re.fullmatch(r"0x[0-9a-fA-F]+", s):
        return int(s, 16)
    s = re.sub(r"/(32|255\.255\.255\.255)$", "", s)
    return s.lower() if s.startswith("0x") else s


def _canon(items: Iterable[Item]) -> tuple[Item, ...]:
    return tuple(sorted(((k, _value(v)) for k, v in items), key=repr))


def canonical_match(items: Iterable[Item]) -> tuple[Item, ...]:
    """OXM-named match items as in ``Rule.match``, sorted and normalised."""
    return _canon(items)


@dataclass(frozen=True)
class Flow:
    table: int
    priority: int
    match: tuple[Item, ...]
    actions: tuple[Item, ...]  # in order; goto_table (an instruction) last
    idle_timeout: int = 0
    hard_timeout: int = 0
    flags: tuple[str, ...] = ()
    cookie: int = 0

    def __str__(self) -> str:
        match = ",".join(f"{k}={_show(k, v)}" for k, v in self.match) or "*"
        acts = _show_actions(self.actions)
        extra = "".join(
            f" {k}={v}"
            for k, v in (("idle_timeout", self.idle_timeout), ("hard_timeout", self.hard_timeout))
            if v
        )
        flags = f" {'+'.join(self.flags)}" if self.flags else ""
        return (
            f"table={self.table} priority={self.priority} {match} actions={acts}"
            f"{extra}{flags} cookie={self.cookie:#x}"
        )


@dataclass(frozen=True)
class Bucket:
    actions: tuple[Item, ...]
    weight: int
    watch_port: int | None = None  # None: any
    watch_group: int | None = None

    def __str__(self) -> str:
        acts = _show_actions(self.actions)
        watch = "".join(
            f" {k}={v}"
            for k, v in (("watch_port", self.watch_port), ("watch_group", self.watch_group))
            if v is not None
        )
        return f"[weight={self.weight}{watch} {acts}]"


@dataclass(frozen=True)
class GroupEntry:
    group_id: int
    type: str
    buckets: tuple[Bucket, ...]  # sorted: a bucket list is compared as a multiset
    extra: tuple[Item, ...] = ()

    def __str__(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.extra)
        return f"group {self.group_id} {self.type}{extra} " + " ".join(map(str, self.buckets))


def _show(key: str, v: Any) -> str:
    if key == "set_field":  # as ovs-ofctl writes it: value->field
        return f"{_show(v[0], v[1])}->{v[0]}"
    return hex(v) if isinstance(v, int) and key in ("eth_type", "metadata") else str(v)


def _show_actions(actions: tuple[Item, ...]) -> str:
    return ",".join(f"{k}:{_show(k, v)}" for k, v in actions) or "drop"


# ----- ovs-ofctl text -> canonical ---------------------------------------------
def ofctl(command: str, bridge: str) -> str:
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "--no-names", command, bridge],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _split_top(text: str) -> list[str]:
    """Split at commas outside parentheses (``controller(a=1,b=2)``)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _set_field(field: str, value: str) -> Item:
    field = _FIELDS.get(field, field)
    if field == "nw_tos":  # the whole ToS byte: DSCP is its top six bits
        return ("set_field", ("ip_dscp", _value(value) >> 2))
    return ("set_field", (field, _value(value)))


def parse_actions(text: str) -> tuple[Item, ...]:
    actions: list[Item] = []
    gotos: list[Item] = []
    for tok in _split_top(text.strip()):
        low = tok.lower()
        if low == "drop":
            continue
        if tok.isdigit():
            actions.append(("output", int(tok)))
        elif low.startswith("controller:"):
            actions.append(("controller", int(tok.split(":", 1)[1])))
        elif low.startswith(("output:", "group:")):
            name, value = tok.split(":", 1)
            actions.append((name.lower(), _value(value)))
        elif low.startswith("goto_table:"):
            gotos.append(("goto_table", int(tok.split(":", 1)[1])))
        elif low.startswith("set_field:") and "->" in tok:
            value, field = tok.split(":", 1)[1].rsplit("->", 1)
            actions.append(_set_field(field, value))
        elif low.startswith("mod_nw_tos:"):
            actions.append(_set_field("nw_tos", tok.split(":", 1)[1]))
        else:
            actions.append(("raw", tok))
    return tuple(actions + gotos)


def _parse_match(tokens: list[str]) -> tuple[Item, ...]:
    fields: dict[str, Any] = {}
    raw: list[Item] = []
    l4: list[tuple[str, str]] = []
    for tok in tokens:
        if "=" not in tok:
            if tok in _PROTOCOLS:
                fields.update(_PROTOCOLS[tok])
            else:
                raw.append(("raw", tok))
            continue
        key, value = tok.split("=", 1)
        if key in ("tp_src", "tp_dst"):
            l4.append((key, value))
        elif key == "nw_tos":
            fields["ip_dscp"] = _value(value) >> 2
        else:
            fields[_FIELDS.get(key, key)] = _value(value)
    for key, value in l4:  # named after the transport protocol matched
        proto = _L4.get(fields.get("ip_proto"), "tp")
        fields[f"{proto}_{key[3:]}"] = _value(value)
    return canonical_match(list(fields.items()) + raw)


def parse_flow(line: str) -> Flow | None:
    """One ``dump-flows`` line; None for a line that is not a flow."""
    m = re.search(r"(?:^|\s)actions=", line)
    if m is None:
        return None
    head, actions = line[: m.start()], line[m.end() :]
    stats: dict[str, str] = {}
    flags: list[str] = []
    rest: list[str] = []
    for tok in (t for t in re.split(r"[,\s]+", head) if t):
        key = tok.split("=", 1)[0]
        if "=" in tok and key in _STATS:
            stats[key] = tok.split("=", 1)[1]
        elif tok in _FLOW_FLAGS:
            flags.append(tok)
        else:
            rest.append(tok)
    return Flow(
        table=int(stats.get("table", 0)),
        priority=int(stats.get("priority", OFP_DEFAULT_PRIORITY)),
        match=_parse_match(rest),
        actions=parse_actions(actions),
        idle_timeout=int(stats.get("idle_timeout", 0)),
        hard_timeout=int(stats.get("hard_timeout", 0)),
        flags=tuple(sorted(flags)),
        cookie=int(stats.get("cookie", "0"), 0),
    )


def parse_flows(text: str) -> Counter[Flow]:
    return Counter(f for f in map(parse_flow, text.splitlines()) if f is not None)


def parse_group(line: str) -> GroupEntry | None:
    line = line.strip()
    if not line.startswith("group_id="):
        return None
    head, *bucket_texts = line.split(",bucket=")
    props = dict(p.split("=", 1) for p in _split_top(head) if "=" in p)
    gtype = props.pop("type")
    group_id = int(props.pop("group_id"))
    buckets = []
    for text in bucket_texts:
        at = text.find("actions=")
        head_b, acts = (text, "") if at < 0 else (text[:at], text[at + len("actions=") :])
        bprops = dict(p.split(":", 1) for p in _split_top(head_b) if ":" in p)
        bprops.pop("bucket_id", None)  # OpenFlow 1.5 only
        weight = int(bprops.pop("weight", 1 if gtype == "select" else 0))
        watch_port = int(bprops["watch_port"]) if "watch_port" in bprops else None
        watch_group = int(bprops["watch_group"]) if "watch_group" in bprops else None
        buckets.append(Bucket(parse_actions(acts), weight, watch_port, watch_group))
    return GroupEntry(group_id, gtype, tuple(sorted(buckets, key=repr)), _canon(props.items()))


def parse_groups(text: str) -> Counter[GroupEntry]:
    return Counter(g for g in map(parse_group, text.splitlines()) if g is not None)


# ----- policy core data -> canonical ----------------------------------------------
def _core_actions(actions: Iterable[Item]) -> tuple[Item, ...]:
    out: list[Item] = []
    gotos: list[Item] = []
    for name, value in actions:
        if name == "output" and value == CONTROLLER:
            out.append(("controller", PACKET_IN_BYTES))
        elif name in ("output", "group"):
            out.append((name, int(value)))
        elif name == "goto_table":
            gotos.append((name, int(value)))
        elif name == "set_field":
            field, fvalue = value
            out.append(("set_field", (field, _value(fvalue))))
        else:
            out.append(("raw", f"{name}:{value}"))
    return tuple(out + gotos)


def flow_of(rule: Rule) -> Flow:
    return Flow(
        table=rule.table,
        priority=rule.priority,
        match=canonical_match(rule.match),
        actions=_core_actions(rule.actions),
        idle_timeout=rule.idle_timeout,
        flags=("send_flow_rem",) if rule.idle_timeout else (),
        cookie=COOKIE,
    )


def group_of(group: Group) -> GroupEntry:
    weight = 1 if group.type == "select" else 0
    buckets = [Bucket(_core_actions(b), weight) for b in group.buckets]
    return GroupEntry(group.group_id, group.type, tuple(sorted(buckets, key=repr)))


# ----- comparison ---------------------------------------------------------------------
def multiset_diff(what: str, want: Counter, got: Counter, limit: int = 5) -> list[str]:
    """Readable lines for ``want`` (the core) vs ``got`` (the switch); empty if equal."""
    missing, extra = want - got, got - want
    if not missing and not extra:
        return []
    lines = [
        f"{what}: {sum(missing.values())} in the core but not on the switch, "
        f"{sum(extra.values())} on the switch but not in the core "
        f"(core {sum(want.values())}, switch {sum(got.values())})"
    ]
    for sign, items in (("-", missing), ("+", extra)):
        shown = sorted(items.elements(), key=str)
        lines += [f"  {sign} {item}" for item in shown[:limit]]
        if len(shown) > limit:
            lines.append(f"  {sign} ... and {len(shown) - limit} more")
    return lines


def table_diff(
    switch: str, bridge: str, rules: Iterable[Rule], groups: Iterable[Group]
) -> list[str]:
    """Differences between one switch's dumped tables and the core's rules and groups."""
    want_flows = Counter(map(flow_of, rules))
    want_groups = Counter(map(group_of, groups))
    got_flows = parse_flows(ofctl("dump-flows", bridge))
    got_groups = parse_groups(ofctl("dump-groups", bridge))
    return multiset_diff(f"{switch} ({bridge}) flows", want_flows, got_flows) + multiset_diff(
        f"{switch} ({bridge}) groups", want_groups, got_groups
    )

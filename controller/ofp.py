"""Translate rules-as-data into os-ken OpenFlow 1.3 messages (and nothing else)."""

from __future__ import annotations

from typing import Any

from .rules import PACKET_IN_BYTES, Group, Rule
from .session import SwitchMessages

COOKIE = 0x6B76  # "kv": every flow kvfabric installs carries it


def _actions(parser: Any, ofp: Any, actions: tuple) -> tuple[list, int | None]:
    """OpenFlow actions plus the goto-table target, if any."""
    out, goto = [], None
    for name, value in actions:
        if name == "output":
            if value == "CONTROLLER":
                out.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, PACKET_IN_BYTES))
            else:
                out.append(parser.OFPActionOutput(int(value)))
        elif name == "group":
            out.append(parser.OFPActionGroup(int(value)))
        elif name == "set_field":
            field, fvalue = value
            out.append(parser.OFPActionSetField(**{field: fvalue}))
        elif name == "goto_table":
            goto = int(value)
        else:
            raise ValueError(f"action {name!r} has no OpenFlow translation")
    return out, goto


def flow_mod(dp: Any, rule: Rule, delete: bool = False) -> Any:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    match = parser.OFPMatch(**dict(rule.match))
    if delete:
        return parser.OFPFlowMod(
            dp,
            cookie=COOKIE,
            table_id=rule.table,
            command=ofp.OFPFC_DELETE_STRICT,
            priority=rule.priority,
            match=match,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
        )
    actions, goto = _actions(parser, ofp, rule.actions)
    inst = []
    if actions:
        inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
    if goto is not None:
        inst.append(parser.OFPInstructionGotoTable(goto))
    return parser.OFPFlowMod(
        dp,
        cookie=COOKIE,
        table_id=rule.table,
        command=ofp.OFPFC_ADD,
        priority=rule.priority,
        idle_timeout=rule.idle_timeout,
        match=match,
        instructions=inst,
        flags=ofp.OFPFF_SEND_FLOW_REM if rule.idle_timeout else 0,
    )


_GROUP_TYPES = {"select": "OFPGT_SELECT", "all": "OFPGT_ALL", "indirect": "OFPGT_INDIRECT"}


def group_mod(dp: Any, group: Group, command: str = "add") -> Any:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    cmd = {"add": ofp.OFPGC_ADD, "modify": ofp.OFPGC_MODIFY, "delete": ofp.OFPGC_DELETE}[command]
    gtype = getattr(ofp, _GROUP_TYPES[group.type])
    buckets = []
    if command != "delete":
        for bucket in group.buckets:
            actions, _ = _actions(parser, ofp, bucket)
            weight = 1 if group.type == "select" else 0
            buckets.append(
                parser.OFPBucket(
                    weight=weight,
                    watch_port=ofp.OFPP_ANY,
                    watch_group=ofp.OFPG_ANY,
                    actions=actions,
                )
            )
    return parser.OFPGroupMod(dp, cmd, gtype, group.group_id, buckets)


def wipe(dp: Any) -> list[Any]:
    """Messages that remove every flow and group from a switch."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return [
        parser.OFPFlowMod(
            dp,
            table_id=ofp.OFPTT_ALL,
            command=ofp.OFPFC_DELETE,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            match=parser.OFPMatch(),
        ),
        parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, ofp.OFPGT_ALL, ofp.OFPG_ALL, []),
    ]


def encode(dp: Any, out: SwitchMessages) -> list[Any]:
    """The OpenFlow messages for one switch's ``SwitchMessages``, in its order:
    groups before the flows that point at them, deletions last, then the barrier."""
    ch = out.changes
    msgs = wipe(dp) if out.wipe else []
    msgs += [group_mod(dp, g, "add") for g in ch.groups_add]
    msgs += [group_mod(dp, g, "modify") for g in ch.groups_modify]
    msgs += [flow_mod(dp, r) for r in ch.rules_add]
    msgs += [flow_mod(dp, r, delete=True) for r in ch.rules_delete]
    msgs += [group_mod(dp, g, "delete") for g in ch.groups_delete]
    if out.barrier:
        msgs.append(dp.ofproto_parser.OFPBarrierRequest(dp))
    if out.port_stats:
        msgs.append(dp.ofproto_parser.OFPPortStatsRequest(dp, 0, dp.ofproto.OFPP_ANY))
    return msgs

"""Which rows of events.json ``faults`` make one spec fault, and which later fault undid
it (pure; the grouping :mod:`.faults` documents).

The injector writes one row per link operation, in time order, each with the spec fault it
belongs to (``fault``; older runs have only ``event``). The operations of one
``switch_down`` / ``switch_up`` share the switch (``link[0]``) and ``at_s``; those of one
``link_flap`` alternate down and up on one link, each at most a half period after the
previous one (so two flaps of a link back to back read as one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SWITCH_FAULTS = ("switch_down", "switch_up")
FLAP_SLACK_S = 1e-3  # injector at_s are exact, this only absorbs float sums
Group = Sequence[Mapping[str, Any]]


def fault_groups(applied: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The applied rows (events.json ``faults``, in time order) of each spec fault."""
    groups: list[list[Mapping[str, Any]]] = []
    for f in applied:
        kind = kind_of(f)
        same = next(
            (
                g
                for g in reversed(groups)
                if kind_of(g[0]) == kind
                and (kind != "link_flap" or sorted(g[0]["link"]) == sorted(f["link"]))
            ),
            None,
        )
        if same is not None and (
            (kind in SWITCH_FAULTS and _same_switch_op(same, f))
            or (kind == "link_flap" and _continues_flap(same, f))
        ):
            same.append(f)
        else:
            groups.append([f])
    return groups


def time_zero(group: Group) -> int:
    """The fault's time zero: its first operation's ``t_start_ns`` (``t_ns`` before)."""
    return min(int(f.get("t_start_ns", f["t_ns"])) for f in group)


def _same_switch_op(group: list[Mapping[str, Any]], f: Mapping[str, Any]) -> bool:
    return group[0].get("at_s") == f.get("at_s") and group[0]["link"][0] == f["link"][0]


def _continues_flap(group: list[Mapping[str, Any]], f: Mapping[str, Any]) -> bool:
    if len(group) == 1:
        return f["event"] == "link_up"
    half = float(group[1]["at_s"]) - float(group[0]["at_s"])
    return float(f["at_s"]) - float(group[-1]["at_s"]) <= half + FLAP_SLACK_S


def kind_of(f: Mapping[str, Any]) -> str:
    """The spec fault a row belongs to (its ``event`` in runs before ``fault``)."""
    return str(f.get("fault") or f["event"])


UNDO = {
    "link_down": "link_up",
    "switch_down": "switch_up",
    "controller_down": "controller_up",
    "link_degrade": "link_degrade",
}


def undone_by(groups: Sequence[Group], i: int) -> Group | None:
    """The later fault that undid ``groups[i]``: the next ``link_up`` of a ``link_down``'s
    link, ``switch_up`` of its switch, ``link_degrade`` of its link, ``controller_up``."""
    first = groups[i][0]
    undo = UNDO.get(kind_of(first))
    for later in groups[i + 1 :]:
        f = later[0]
        if kind_of(f) != undo:
            continue
        if undo == "controller_up":
            return later
        if undo == "switch_up" and f["link"][0] == first["link"][0]:
            return later
        if undo != "switch_up" and sorted(f["link"]) == sorted(first["link"]):
            return later
    return None


def recovery(group: Group, undo: Group | None) -> int | None:
    """When the fault ended: the undoing fault's time zero (a controller's ready instant,
    else its row's), a flap's last operation; None when nothing undid it."""
    if kind_of(group[0]) == "link_flap":
        return int(group[-1]["t_ns"])
    if undo is None:
        return None
    if kind_of(undo[0]) == "controller_up":
        return int(undo[0].get("ready_ns") or undo[0]["t_ns"])
    return time_zero(undo)

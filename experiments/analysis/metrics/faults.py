"""What each injected fault cost the control plane, timed from the fault itself.

Time zero is the fault injector's own timestamp, taken just before it acted (``t_start_ns``
of ``events.json`` ``faults``; runs before it was recorded fall back to ``t_ns``, when the
injector had finished). From there: when the controller heard of it (its first port
status event on an end of the fault's links), when it had sent the last rule of the
reroute and when every switch had acknowledged it (barrier). A link is taken down with
one ``ip link`` per end, so time zero is at most that command's few milliseconds early:
the figures are upper bounds. Detection is immediate here (the veth's carrier), unlike a
real switch's loss-of-signal or BFD timers.

One row per spec fault: the link operations of one ``switch_down`` / ``switch_up`` (same
switch and ``at_s``) are one row, and so are the cycles of one ``link_flap`` (rows of the
link each at most a half period after the previous); ``links`` lists every link. Its port
events are those on its links' ends from its time zero until the next fault's; its
reroutes those logged from the first to the last of them (the reroute of a port event
carries that event's instant), and its last rule and acknowledgement are the last
reroute's. The data-plane side of each row is :mod:`.fault_impact`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from experiments.analysis.metrics.fault_impact import impact, ms_after

PORT_EVENT = {"link_down": "port_down", "link_up": "port_up"}
SWITCH_FAULTS = ("switch_down", "switch_up")
FLAP_SLACK_S = 1e-3  # injector at_s are exact, this only absorbs float sums


def fault_timings(
    applied: Sequence[Mapping[str, Any]],
    controller: Sequence[Mapping[str, Any]],
    fabric: Any = None,
    *,
    flows: pd.DataFrame | None = None,
    links: pd.DataFrame | None = None,
    requests: pd.DataFrame | None = None,
) -> list[dict[str, Any]]:
    """One row per spec fault: ``fault, event, at_s, link, links, clock, detected_ms,
    last_rule_sent_ms, installed_ms`` (ms from the fault; None where the controller
    logged nothing), ``links_heard`` (how many of its links had a port event; needs
    ``fabric``), ``switch`` / ``node`` / ``target`` / ``cycles`` where they apply,
    then the data-plane figures of :func:`.fault_impact.impact` (None without the
    table). ``fabric`` (a ``Fabric``) restricts port events to the links' switch ports
    and lets the delivered rate count only host-facing ports."""
    groups = fault_groups(applied)
    starts = [time_zero(g) for g in groups]
    events = sorted(controller, key=lambda e: e.get("t_ns", 0))
    out = []
    for i, group in enumerate(groups):
        horizon = starts[i + 1] if i + 1 < len(starts) else None
        row = _describe(group) | _control_plane(group, starts[i], horizon, events, fabric)
        undo = _undone_by(groups, i)
        end = _recovery(group, undo)
        if row["fault"] == "controller_down":
            ready = undo and undo[0].get("ready_ns")
            row["no_controller_ms"] = ms_after(starts[i], ready)
        row |= impact(row, starts[i], horizon, end, fabric,
                      flows=flows, links=links, requests=requests)  # fmt: skip
        out.append(row)
    return out


def fault_groups(applied: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The applied rows (events.json ``faults``, in time order) of each spec fault."""
    groups: list[list[Mapping[str, Any]]] = []
    for f in applied:
        kind = _kind(f)
        same = next((g for g in reversed(groups) if _kind(g[0]) == kind
                     and (kind != "link_flap" or sorted(g[0]["link"]) == sorted(f["link"]))),
                    None)  # fmt: skip
        if same is not None and (
            (kind in SWITCH_FAULTS and _same_switch_op(same, f))
            or (kind == "link_flap" and _continues_flap(same, f))
        ):
            same.append(f)
        else:
            groups.append([f])
    return groups


def time_zero(group: Sequence[Mapping[str, Any]]) -> int:
    return min(int(f.get("t_start_ns", f["t_ns"])) for f in group)


def _kind(f: Mapping[str, Any]) -> str:
    return str(f.get("fault") or f["event"])


def _same_switch_op(group: list[Mapping[str, Any]], f: Mapping[str, Any]) -> bool:
    return group[0].get("at_s") == f.get("at_s") and group[0]["link"][0] == f["link"][0]


def _continues_flap(group: list[Mapping[str, Any]], f: Mapping[str, Any]) -> bool:
    if len(group) == 1:
        return f["event"] == "link_up"
    half = float(group[1]["at_s"]) - float(group[0]["at_s"])
    return float(f["at_s"]) - float(group[-1]["at_s"]) <= half + FLAP_SLACK_S


def _describe(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    first, kind = group[0], _kind(group[0])
    links = [list(f["link"]) for f in group if f.get("link")]
    unique = [lk for i, lk in enumerate(links) if lk not in links[:i]]
    row: dict[str, Any] = {
        "fault": kind, "event": first["event"] if len(group) == 1 else kind,
        "at_s": first.get("at_s"), "link": unique[0] if len(unique) == 1 else None,
        "links": unique,
        "clock": "t_start_ns" if all("t_start_ns" in f for f in group) else "t_ns",
    }  # fmt: skip
    if kind in SWITCH_FAULTS:
        row["switch"] = first["link"][0]
    if kind == "link_flap":
        row["cycles"] = sum(f["event"] == "link_down" for f in group)
    for key in ("node", "target", "gbps"):
        if key in first:
            row[key] = first[key]
    return row


def _control_plane(group: Sequence[Mapping[str, Any]], t0: int, horizon: int | None,
                   events: Sequence[Mapping[str, Any]], fabric: Any) -> dict[str, Any]:  # fmt: skip
    wanted = {PORT_EVENT[f["event"]] for f in group if f["event"] in PORT_EVENT}
    links = {tuple(sorted(f["link"])) for f in group if f.get("link")}
    ends = _ends(links, fabric)
    ports = [e for e in events if e.get("event") in wanted and e["t_ns"] >= t0
             and (horizon is None or e["t_ns"] < horizon) and _on(e, ends)]  # fmt: skip
    reroute = None
    if ports:
        lo, hi = ports[0]["t_ns"], ports[-1]["t_ns"]
        reroutes = [e for e in events if e.get("event") == "reroute" and e["t_ns"] >= lo]
        within = [e for e in reroutes if e["t_ns"] <= hi]
        reroute = within[-1] if within else next(iter(reroutes), None)
    heard = None
    if wanted and fabric is not None:
        heard = sum(any(_on(e, _ends([lk], fabric)) for e in ports) for lk in links)
    return {
        "links_heard": heard,
        "detected_ms": ms_after(t0, ports[0]["t_ns"] if ports else None),
        "last_rule_sent_ms": ms_after(t0, reroute and reroute.get("t_last_sent_ns")),
        "installed_ms": ms_after(t0, reroute and reroute.get("t_installed_ns")),
    }


UNDO = {"link_down": "link_up", "switch_down": "switch_up",
        "controller_down": "controller_up", "link_degrade": "link_degrade"}  # fmt: skip


def _undone_by(groups: Sequence[Sequence[Mapping[str, Any]]],
               i: int) -> Sequence[Mapping[str, Any]] | None:  # fmt: skip
    """The later fault that undid ``groups[i]``: the next ``link_up`` of a ``link_down``'s
    link, ``switch_up`` of its switch, ``link_degrade`` of its link, ``controller_up``."""
    first = groups[i][0]
    undo = UNDO.get(_kind(first))
    for later in groups[i + 1 :]:
        f = later[0]
        if _kind(f) != undo:
            continue
        if undo == "controller_up":
            return later
        if undo == "switch_up" and f["link"][0] == first["link"][0]:
            return later
        if undo != "switch_up" and sorted(f["link"]) == sorted(first["link"]):
            return later
    return None


def _recovery(group: Sequence[Mapping[str, Any]],
              undo: Sequence[Mapping[str, Any]] | None) -> int | None:  # fmt: skip
    """When the fault ended: the undoing fault's time zero (a controller's ready instant,
    else its row's), a flap's last operation; None when nothing undid it."""
    if _kind(group[0]) == "link_flap":
        return int(group[-1]["t_ns"])
    if undo is None:
        return None
    if _kind(undo[0]) == "controller_up":
        return int(undo[0].get("ready_ns") or undo[0]["t_ns"])
    return time_zero(undo)


def _ends(links: Sequence[Sequence[str]], fabric: Any) -> set[tuple[str, int]] | None:
    if fabric is None:
        return None
    out = set()
    for a, b in links:
        lk = fabric.link_between(a, b)
        out |= {(lk.a, lk.a_port), (lk.b, lk.b_port)}
    return out


def _on(event: Mapping[str, Any], ends: set[tuple[str, int]] | None) -> bool:
    return ends is None or (event.get("switch"), event.get("port")) in ends

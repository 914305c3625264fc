"""What each injected fault cost the control plane, timed from the fault itself.

Time zero is the fault injector's own timestamp, taken just before it acted (``t_start_ns``
of ``events.json`` ``faults``; runs before it was recorded fall back to ``t_ns``, when the
injector had finished). From there: when the controller heard of it (its first port
status event on an end of the fault's links), when it had sent the last rule of the
reroute and when every switch had acknowledged it (barrier). A link is taken down with
one ``ip link`` per end, so time zero is at most that command's few milliseconds early:
the figures are upper bounds. Detection is immediate here (the veth's carrier), unlike a
real switch's loss-of-signal or BFD timers.

One row per spec fault (:mod:`.fault_groups`): the link operations of one ``switch_down``
/ ``switch_up`` are one row, and so are the cycles of one ``link_flap``; ``links`` lists
every link. Its port events are those on its links' ends from its time zero until the
next fault's; its reroutes those logged from the first to the last of them (the reroute
of a port event carries that event's instant), and its last rule and acknowledgement are
the last reroute's. The data-plane side of each row is :mod:`.fault_impact`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from experiments.analysis.metrics.fault_groups import (
    SWITCH_FAULTS,
    fault_groups,
    kind_of,
    recovery,
    time_zero,
    undone_by,
)
from experiments.analysis.metrics.fault_impact import impact, ms_after

PORT_EVENT = {"link_down": "port_down", "link_up": "port_up"}


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
        until = _same_links_next(groups, starts, i)
        row = _describe(group) | _control_plane(group, starts[i], until, events, fabric)
        undo = undone_by(groups, i)
        end = recovery(group, undo)
        if row["fault"] == "controller_down":
            ready = undo and undo[0].get("ready_ns")
            row["no_controller_ms"] = ms_after(starts[i], ready)
        row |= impact(
            row, starts[i], horizon, end, fabric, flows=flows, links=links, requests=requests
        )
        out.append(row)
    return out


def _same_links_next(
    groups: Sequence[Sequence[Mapping[str, Any]]], starts: Sequence[int], i: int
) -> int | None:
    """When the next fault on any of group ``i``'s links starts: its port events are
    the control plane's until then, even if another fault came between (a controller
    restarted while the link was down learns of it later)."""
    links = {tuple(sorted(f["link"])) for f in groups[i] if f.get("link")}
    for j in range(i + 1, len(groups)):
        if links & {tuple(sorted(f["link"])) for f in groups[j] if f.get("link")}:
            return starts[j]
    return None


def _describe(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    first, kind = group[0], kind_of(group[0])
    links = [list(f["link"]) for f in group if f.get("link")]
    unique = [lk for i, lk in enumerate(links) if lk not in links[:i]]
    row: dict[str, Any] = {
        "fault": kind,
        "event": first["event"] if len(group) == 1 else kind,
        "at_s": first.get("at_s"),
        "link": unique[0] if len(unique) == 1 else None,
        "links": unique,
        "clock": "t_start_ns" if all("t_start_ns" in f for f in group) else "t_ns",
    }
    if kind in SWITCH_FAULTS:
        row["switch"] = first["link"][0]
    if kind == "link_flap":
        row["cycles"] = sum(f["event"] == "link_down" for f in group)
    for key in ("node", "target", "gbps"):
        if key in first:
            row[key] = first[key]
    return row


def _control_plane(
    group: Sequence[Mapping[str, Any]],
    t0: int,
    horizon: int | None,
    events: Sequence[Mapping[str, Any]],
    fabric: Any,
) -> dict[str, Any]:
    wanted = {PORT_EVENT[f["event"]] for f in group if f["event"] in PORT_EVENT}
    links = {tuple(sorted(f["link"])) for f in group if f.get("link")}
    ends = _ends(links, fabric)
    ports = [
        e
        for e in events
        if e.get("event") in wanted
        and e["t_ns"] >= t0
        and (horizon is None or e["t_ns"] < horizon)
        and _on(e, ends)
    ]
    reroute = None
    if ports:
        lo, hi = ports[0]["t_ns"], ports[-1]["t_ns"]
        reroutes = [
            e
            for e in events
            if e.get("event") in ("reroute", "install")
            and e["t_ns"] >= lo
            and (horizon is None or e["t_ns"] < horizon)
        ]
        within = [e for e in reroutes if e["t_ns"] <= hi]
        reroute = within[-1] if within else next(iter(reroutes), None)
        if reroute is not None and reroute["event"] == "install":
            reroute = _as_reroute(reroute, events)
    heard = None
    if wanted and fabric is not None:
        heard = sum(any(_on(e, _ends([lk], fabric)) for e in ports) for lk in links)
    return {
        "links_heard": heard,
        "detected_ms": ms_after(t0, ports[0]["t_ns"] if ports else None),
        "last_rule_sent_ms": ms_after(t0, reroute and reroute.get("t_last_sent_ns")),
        "installed_ms": ms_after(t0, reroute and reroute.get("t_installed_ns")),
    }


def _as_reroute(install: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> dict:
    """A (restarted) controller's whole install as the reroute that carried the fault:
    sent when it was computed, acknowledged when the controller was next ready."""
    ready = next(
        (e for e in events if e.get("event") == "ready" and e["t_ns"] >= install["t_ns"]), None
    )
    return {"t_last_sent_ns": install["t_ns"], "t_installed_ns": ready and ready["t_ns"]}


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

"""The ``faults:`` timeline of a spec: one entry per fault, each with ``at_s`` and
exactly one event.

Link faults (``link_down``, ``link_up``, ``switch_down``, ``switch_up``,
``link_flap``) may carry ``detect_ms``: the controller hears of the change this
long after it happened, as a real switch's loss-of-signal or BFD timers would.
``link_degrade`` sets a link's rate (both directions) mid-run, as a port falling
back to a lower speed; a later ``link_degrade`` to the link's own rate restores
it. ``controller_down`` kills the controller process and ``controller_up``
starts it again (the switches keep their flows meanwhile: secure fail mode).
``agent_kill`` stops one host's agent; the run goes on for the others.

``faults_post`` checks the timeline as a whole: a controller comes up only after
it went down, and one link has one detection delay.
"""

from __future__ import annotations

from typing import Any

from experiments.spec.schema import (
    Ctx,
    Field,
    bad,
    boolean,
    host,
    integer,
    join,
    list_of,
    listing,
    missing,
    node,
    number,
    optional,
    section,
)
from topologies import Fabric
from topologies.scale import Scale
from topologies.shaping import MIN_RATE_BPS

LINK_ENDS = list_of(node(), 2, 2, distinct=True)

LINK_EVENTS = ("link_down", "link_up", "switch_down", "switch_up", "link_flap")
FAULT_EVENTS = (*LINK_EVENTS, "link_degrade", "controller_down", "controller_up", "agent_kill")


def _linked(a: str, b: str, where: str, ctx: Ctx) -> None:
    assert ctx.fabric is not None
    peers = sorted(link.other(a) for link in ctx.fabric.links_of(a))
    if b not in peers:
        why = f"{a} and {b} are not linked"
        raise bad(where, [a, b], f"two linked nodes; {a} links to {listing(peers)}", why)


def _fault_post(out: dict[str, Any], path: str, ctx: Ctx) -> dict[str, Any]:
    given = [k for k in FAULT_EVENTS if out[k] not in (None, False)]
    if not given:
        raise missing(join(path, "link_down"), f"exactly one of {', '.join(FAULT_EVENTS)}")
    if len(given) > 1:
        raise bad(path, given, f"exactly one of {', '.join(FAULT_EVENTS)} per fault")
    duration = ctx.duration_s or 0.0
    if out["at_s"] >= duration:
        raise bad(join(path, "at_s"), out["at_s"], f"a time in [0, {duration:g}) s (duration_s)")
    event = given[0]
    value = out[event]
    assert ctx.fabric is not None
    if event in ("link_down", "link_up"):
        _linked(value[0], value[1], join(path, event), ctx)
    elif event in ("switch_down", "switch_up"):
        if ctx.fabric.node(value).is_host:
            switches = [n.name for n in ctx.fabric.switches]
            raise bad(join(path, event), value, f"a switch: {listing(switches)}", "a host")
    elif event == "link_flap":
        _linked(value["link"][0], value["link"][1], join(path, "link_flap.link"), ctx)
        end = out["at_s"] + value["count"] * value["period_ms"] / 1e3
        if end > duration:
            raise bad(
                join(path, "link_flap.count"),
                value["count"],
                f"cycles that end by duration_s ({duration:g} s)",
                f"{value['count']} cycles of {value['period_ms']:g} ms from "
                f"{out['at_s']:g} s end at {end:g} s",
            )
    elif event == "link_degrade":
        a, b = value["link"]
        _linked(a, b, join(path, "link_degrade.link"), ctx)
        full = ctx.fabric.link_between(a, b).real_gbps
        if value["gbps"] > full:
            raise bad(
                join(path, "link_degrade.gbps"),
                value["gbps"],
                f"a rate in (0, {full:g}] Gbit/s ({a}–{b}'s own rate restores it)",
                "a port cannot train above its link's speed",
            )
    if out["detect_ms"] and event not in LINK_EVENTS:
        raise bad(
            join(path, "detect_ms"),
            out["detect_ms"],
            f"0, or a delay on a link fault ({', '.join(LINK_EVENTS)})",
            f"{event} is not detected through a switch port",
        )
    resolved = {"at_s": out["at_s"], event: value}
    if out["detect_ms"]:  # left out at 0, so a spec without it resolves as before
        resolved["detect_ms"] = out["detect_ms"]
    return resolved


FLAP = section(
    {
        "link": Field(LINK_ENDS, doc="the two nodes whose link flaps"),
        "period_ms": Field(number(gt=0), doc="one cycle: down for half of it, then up, ms"),
        "count": Field(integer(1), 1, "how many cycles"),
    }
)

DEGRADE = section(
    {
        "link": Field(LINK_ENDS, doc="the two nodes whose link changes rate"),
        "gbps": Field(number(gt=0), doc="its new real-equivalent rate, Gbit/s (both ways)"),
    }
)

FAULT = section(
    {
        "at_s": Field(number(ge=0), doc="when, in s after the traffic starts"),
        "link_down": Field(optional(LINK_ENDS), None, "the two nodes whose link goes down"),
        "link_up": Field(optional(LINK_ENDS), None, "the two nodes whose link comes back up"),
        "switch_down": Field(
            optional(node()), None, "a switch that loses power: every link of it goes down"
        ),
        "switch_up": Field(optional(node()), None, "a switch that comes back: its links up"),
        "link_flap": Field(
            optional(FLAP), None, "{link, period_ms, count}: a link down and up count times"
        ),
        "link_degrade": Field(
            optional(DEGRADE),
            None,
            "{link, gbps}: the link's rate changes, as a port falling back to a lower speed",
        ),
        "controller_down": Field(
            boolean(), False, "true: the controller process is killed (switches keep flows)"
        ),
        "controller_up": Field(
            boolean(), False, "true: the controller starts again and resynchronises"
        ),
        "agent_kill": Field(optional(host()), None, "a host whose agent dies mid-run"),
        "detect_ms": Field(
            number(ge=0),
            0.0,
            "link faults: the controller hears of it this much later (loss-of-signal, BFD), ms",
        ),
    },
    _fault_post,
    sparse=True,
)


def _event(fault: dict[str, Any]) -> str:
    return next(k for k in fault if k not in ("at_s", "detect_ms"))


def fault_links(fault: dict[str, Any], fabric: Fabric) -> list[tuple[str, str]]:
    """The links a resolved link fault acts on (none for other faults)."""
    event = _event(fault)
    value = fault[event]
    if event in ("switch_down", "switch_up"):
        return [(value, lk.other(value)) for lk in fabric.links_of(value)]
    if event in ("link_flap", "link_degrade"):
        return [(value["link"][0], value["link"][1])]
    if event in ("link_down", "link_up"):
        return [(value[0], value[1])]
    return []


def detect_delays(faults: list[dict[str, Any]], fabric: Fabric) -> dict[tuple[str, int], float]:
    """``(switch, port) -> ms``: how long the controller waits before it acts on a port
    event of each switch port a fault with ``detect_ms`` touches (hosts report none)."""
    return {port: ms for port, (ms, _) in _port_delays(faults, fabric).items()}


def _port_delays(
    faults: list[dict[str, Any]], fabric: Fabric
) -> dict[tuple[str, int], tuple[float, int]]:
    delays: dict[tuple[str, int], tuple[float, int]] = {}
    for i, f in enumerate(faults):
        ms = f.get("detect_ms") or 0.0
        if not ms:
            continue
        for a, b in fault_links(f, fabric):
            lk = fabric.link_between(a, b)
            for name, port in ((lk.a, lk.a_port), (lk.b, lk.b_port)):
                if fabric.node(name).is_host:
                    continue
                seen = delays.setdefault((name, port), (ms, i))
                if seen[0] != ms:
                    raise bad(
                        f"faults.{i}.detect_ms",
                        ms,
                        f"{seen[0]:g}, as faults.{seen[1]} gives for {name} port {port}",
                        "the controller delays one port's events by one amount",
                    )
    return delays


def faults_post(faults: list[dict[str, Any]], fabric: Fabric, scale: Scale) -> None:
    """The timeline as a whole: the controller alternates down and up, starting up;
    one switch port has one detection delay (the controller is configured per port);
    a degraded rate can be shaped at ``scale``."""
    down = False
    for i, f in sorted(enumerate(faults), key=lambda p: p[1]["at_s"]):
        event = _event(f)
        where = f"faults.{i}.{event}"
        if event == "link_degrade":
            rate = scale.link_bps(f[event]["gbps"])
            if rate < MIN_RATE_BPS:
                least = MIN_RATE_BPS * scale.d / scale.bandwidth / 1e9
                raise bad(
                    f"{where}.gbps",
                    f[event]["gbps"],
                    f"at least {least:g} Gbit/s at scale {scale.bandwidth:g}"
                    + (f", time dilation {scale.d:g}" if scale.d != 1 else ""),
                    f"{rate / 1e6:.3f} Mbit/s emulated is below the {MIN_RATE_BPS / 1e6:g}"
                    " Mbit/s this emulation shapes faithfully",
                )
        if event == "controller_down" and down:
            raise bad(
                where,
                True,
                "a controller_down after the controller came up",
                "the controller is already down",
            )
        if event == "controller_up" and not down:
            raise bad(
                where, True, "a controller_up after a controller_down", "the controller is running"
            )
        if event in ("controller_down", "controller_up"):
            down = event == "controller_down"
    _port_delays(faults, fabric)

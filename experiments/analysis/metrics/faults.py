"""What each injected fault cost the control plane, timed from the fault itself.

Time zero is the fault injector's own timestamp, taken just before it took the link
down or up (``t_start_ns`` of ``events.json`` ``faults``; runs before it was recorded
fall back to ``t_ns``, when the injector had finished). From there: when the controller
heard of it (its first port status event on either end of the link), when it had sent
the last rule of the reroute and when every switch had acknowledged it (barrier). The
link is taken down with one ``ip link`` per end, so time zero is at most that command's
few milliseconds early: the figures are upper bounds. Detection is immediate here
(the veth's carrier), unlike a real switch's loss-of-signal or BFD timers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

PORT_EVENT = {"link_down": "port_down", "link_up": "port_up"}


def fault_timings(
    applied: Sequence[Mapping[str, Any]],
    controller: Sequence[Mapping[str, Any]],
    fabric: Any = None,
) -> list[dict[str, Any]]:
    """One row per applied fault: ``event, link, at_s, detected_ms, last_rule_sent_ms,
    installed_ms`` (ms from the fault; None where the controller logged nothing).
    ``fabric`` (a ``Fabric``) restricts port events to the link's two switch ports."""
    out = []
    events = sorted(controller, key=lambda e: e.get("t_ns", 0))
    for f in applied:
        if "link" not in f or f["event"] not in PORT_EVENT:
            continue  # controller and agent faults: no port event to time
        t0 = int(f.get("t_start_ns", f["t_ns"]))
        ends = _ends(f["link"], fabric)
        want = PORT_EVENT.get(f["event"])
        port = next((e for e in events if e.get("event") == want and e["t_ns"] >= t0
                     and _on(e, ends)), None)  # fmt: skip
        reroute = None
        if port is not None:
            reroute = next((e for e in events if e.get("event") == "reroute"
                            and e["t_ns"] >= port["t_ns"]), None)  # fmt: skip
        ms = partial(_ms_after, t0)
        out.append({
            "event": f["event"], "link": list(f["link"]), "at_s": f.get("at_s"),
            "detected_ms": ms(port and port["t_ns"]),
            "last_rule_sent_ms": ms(reroute and reroute.get("t_last_sent_ns")),
            "installed_ms": ms(reroute and reroute.get("t_installed_ns")),
            "clock": "t_start_ns" if "t_start_ns" in f else "t_ns",
        })  # fmt: skip
    return out


def _ms_after(t0: int, t: Any) -> float | None:
    return None if t is None else round((int(t) - t0) / 1e6, 3)


def _ends(link: Sequence[str], fabric: Any) -> set[tuple[str, int]] | None:
    if fabric is None:
        return None
    lk = fabric.link_between(link[0], link[1])
    return {(lk.a, lk.a_port), (lk.b, lk.b_port)}


def _on(event: Mapping[str, Any], ends: set[tuple[str, int]] | None) -> bool:
    return ends is None or (event.get("switch"), event.get("port")) in ends

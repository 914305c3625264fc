"""A spec's ``faults:`` timeline as the operations that carry it out (pure).

``link_down`` / ``link_up`` are one operation each; ``switch_down`` / ``switch_up``
take every link of the switch down or up at once, as a power loss would;
``link_flap`` is ``count`` cycles of ``period_ms``, down for the first half of each and
up for the second; ``link_degrade`` sets a link's rate; ``controller_down`` /
``controller_up`` kill and restart the controller; ``agent_kill`` stops one host's
agent. Each operation keeps the spec event it comes from (``fault``), so
``events.json`` and the fault timings say which fault it was part of.

The fault injector (``runtime.FaultInjector``) carries out every operation but
``agent_kill``, which the agents' coordinator carries out at its instant
(``agent_kills``): only the coordinator may talk to the agents while they run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from experiments.spec.config import Fault
from topologies import Fabric
from topologies.scale import Scale

CONTROLLER_EVENTS = ("controller_down", "controller_up")


@dataclass(frozen=True)
class FaultOp:
    """At ``at_s``, ``event`` (``link_down``, ``link_up``, ``link_degrade``,
    ``controller_down``, ``controller_up`` or ``agent_kill``) on ``link`` (with its
    new rate ``gbps``) or ``node``, as part of the spec's ``fault``."""

    at_s: float
    event: str
    fault: str
    link: tuple[str, str] | None = None
    gbps: float | None = None
    node: str | None = None

    @property
    def up(self) -> bool:
        return self.event == "link_up"


EVENTS = tuple(f.name for f in fields(Fault) if f.name not in ("at_s", "detect_ms"))


def _event(fault: Fault) -> tuple[str, Any]:
    """The fault's one event (what the spec gives besides ``at_s`` and ``detect_ms``)."""
    given = [(name, getattr(fault, name)) for name in EVENTS]
    return next(((k, v) for k, v in given if v is not None and v is not False), ("none", None))


def fault_ops(faults: Sequence[Fault], fabric: Fabric) -> list[FaultOp]:
    """Every operation of ``faults`` (the run's ``config.faults``), in time order (ties
    keep the spec's order)."""
    ops: list[FaultOp] = []
    for f in faults:
        at = float(f.at_s)
        event, value = _event(f)
        if event in ("link_down", "link_up"):
            ops.append(FaultOp(at, event, event, (value[0], value[1])))
        elif event in ("switch_down", "switch_up"):
            op = "link_up" if event == "switch_up" else "link_down"
            for lk in fabric.links_of(value):
                ops.append(FaultOp(at, op, event, (value, lk.other(value))))
        elif event == "link_flap":
            a, b = value.link
            half = value.period_ms / 2e3
            for c in range(int(value.count)):
                start = at + 2 * c * half
                ops.append(FaultOp(start, "link_down", event, (a, b)))
                ops.append(FaultOp(start + half, "link_up", event, (a, b)))
        elif event == "link_degrade":
            a, b = value.link
            ops.append(FaultOp(at, event, event, (a, b), gbps=float(value.gbps)))
        elif event in CONTROLLER_EVENTS:
            ops.append(FaultOp(at, event, event))
        elif event == "agent_kill":
            ops.append(FaultOp(at, event, event, node=value))
        else:
            raise ValueError(f"unknown fault {event!r}")
    return sorted(ops, key=lambda op: op.at_s)


def agent_kills(faults: Sequence[Fault]) -> list[tuple[float, str]]:
    """``(at_s, host)`` of every ``agent_kill``, in time order."""
    return sorted((float(f.at_s), f.agent_kill) for f in faults if f.agent_kill is not None)


def downed_spans(
    applied: Sequence[Mapping[str, Any]], fabric: Fabric
) -> dict[str, list[tuple[int, int | None]]]:
    """``switch -> [(t_ns, t_ns | None), ...]``: each stretch a link of the switch was
    down, from when the first ``link_down`` that took effect began to when the last of
    its links was back up (``None``: still down at the end), from ``events.json``'s
    ``faults`` rows (a switch or a flap goes down link by link; a switch whose links all
    came back and went down again has two stretches). The fidelity verdict counts what
    such a switch took in and did not send on in them as the fault's loss
    (``fidelity.fault_losses``)."""
    down: dict[str, set[tuple[str, ...]]] = {}
    spans: dict[str, list[tuple[int, int | None]]] = {}
    for row in sorted(applied, key=lambda r: r.get("t_start_ns", 0)):
        event = row.get("event")
        if event not in ("link_down", "link_up") or not row.get("ok", True):
            continue
        link = tuple(sorted(row["link"]))
        for node in (n for n in link if not fabric.node(n).is_host):
            mine = down.setdefault(node, set())
            if event == "link_down":
                if not mine:  # a new stretch
                    spans.setdefault(node, []).append((int(row["t_start_ns"]), None))
                mine.add(link)
            elif link in mine:
                mine.discard(link)
                if not mine:
                    spans[node][-1] = (spans[node][-1][0], int(row["t_ns"]))
    return spans


def rate_changes(
    applied: Sequence[Mapping[str, Any]], fabric: Fabric, scale: Scale
) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """``(node, port) -> [(t_ns, rate_bps), ...]``: the emulated rate each egress of a
    degraded link had from each ``link_degrade`` that took effect (``events.json``
    ``faults`` rows), for the fidelity verdict to judge each stretch by its own rate."""
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for row in applied:
        if row.get("event") != "link_degrade" or not row.get("ok", True):
            continue
        lk = fabric.link_between(*row["link"])
        rate = scale.emulated_bps(float(row["gbps"]))
        for end in ((lk.a, lk.a_port), (lk.b, lk.b_port)):
            out.setdefault(end, []).append((int(row["t_ns"]), rate))
    return out

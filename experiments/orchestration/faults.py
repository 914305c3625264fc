"""A spec's ``faults:`` timeline as the link operations that carry it out (pure).

``link_down`` / ``link_up`` are one operation each; ``switch_down`` / ``switch_up``
take every link of the switch down or up at once, as a power loss would;
``link_flap`` is ``count`` cycles of ``period_ms``, down for the first half of each and
up for the second. Each operation keeps the spec event it comes from (``fault``), so
``events.json`` and the fault timings say which fault it was part of.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topologies import Fabric


@dataclass(frozen=True)
class LinkOp:
    """At ``at_s``, take ``link`` down (``up`` False) or up, as part of ``fault``."""

    at_s: float
    link: tuple[str, str]
    up: bool
    fault: str

    @property
    def event(self) -> str:
        return "link_up" if self.up else "link_down"


def link_ops(faults: Sequence[Mapping[str, Any]], fabric: Fabric) -> list[LinkOp]:
    """Every operation of ``faults`` (resolved spec entries), in time order (ties keep
    the spec's order)."""
    ops: list[LinkOp] = []
    for f in faults:
        at = float(f["at_s"])
        (event, value), *_ = ((k, v) for k, v in f.items() if k != "at_s")
        if event in ("link_down", "link_up"):
            ops.append(LinkOp(at, (value[0], value[1]), event == "link_up", event))
        elif event in ("switch_down", "switch_up"):
            for lk in fabric.links_of(value):
                ops.append(LinkOp(at, (value, lk.other(value)), event == "switch_up", event))
        elif event == "link_flap":
            a, b = value["link"]
            half = value["period_ms"] / 2e3
            for c in range(int(value["count"])):
                start = at + 2 * c * half
                ops.append(LinkOp(start, (a, b), False, event))
                ops.append(LinkOp(start + half, (a, b), True, event))
        else:
            raise ValueError(f"unknown fault {event!r}")
    return sorted(ops, key=lambda op: op.at_s)

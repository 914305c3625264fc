"""QoS classes on every egress as data: strict-priority and weighted traffic
classes, each with its own bounded pfifo, chosen by u32 filters on DSCP (the
IP TOS byte, ``dscp << 2``, mask ``0xfc``). Nothing here runs a command.

Weighted classes only (every class has a ``rate_share``)::

    1:     root HTB, "default 1": unclassified traffic goes to class 1:1
    1:100  parent class, rate R, ceil R: the link
    1:1    the default class -> pfifo 10:   (same ids as without QoS)
    1:11, 1:12, ...  the other classes in spec order -> pfifo 11:, 12:, ...

A class with share s is assured s × R and may borrow up to R.

With strict-priority classes (a ``priority``, 0 served first) the same tree
serves them ahead of the weighted group, as a switch serves strict-priority
queues before its weighted ones. This kernel has no ``prio`` qdisc, so it is
HTB's own: every class is assured only ``FLOOR_SHARE`` × R and borrows the
rest of the link, and HTB lends in strict order of ``prio`` (the priority
classes by rank, then the weighted group); within the group, classes borrow
in proportion to ``rate_share`` (HTB quantum ∝ share). A priority class is
served whenever it has a packet, so it can starve the rest (to the floor):
that is what strict priority means on a real switch too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .fabric import FabricError
from .shaping import DEFAULT_MTU, MAX_BUFFER_PKTS, burst_bytes, frame_bytes, queue_frames

MAX_CLASSES = 8
LOWEST_PRIO = 7
MAX_QUANTUM = 60_000  # HTB warns above 200 000 bytes; weights beyond 40:1 saturate here
FLOOR_SHARE = 0.001  # what every class is assured once strict priorities exist
CLASS_KEYS = ("name", "dscp", "rate_share", "priority", "buffer_pkts")
PARENT = "1:100"


class QosError(FabricError):
    """A QoS class specification that cannot be honoured."""


@dataclass(frozen=True)
class TrafficClass:
    name: str
    dscp: int
    rate_share: float | None = None
    priority: int | None = None
    buffer_pkts: int | None = None


@dataclass(frozen=True)
class ClassPlan:
    """Validated classes; ``default`` takes unclassified traffic."""

    classes: tuple[TrafficClass, ...]
    default: str

    def by_name(self, name: str) -> TrafficClass:
        for c in self.classes:
            if c.name == name:
                return c
        raise QosError(f"no QoS class named {name!r}: allowed {', '.join(self.names())}")

    def names(self) -> list[str]:
        return [c.name for c in self.classes]

    def strict(self) -> list[TrafficClass]:
        """The strict-priority classes, served in this order."""
        return sorted((c for c in self.classes if c.priority is not None), key=lambda c: c.priority)

    def ids(self) -> dict[str, tuple[str, str]]:
        """Class name -> (HTB classid, pfifo handle)."""
        ids = {self.default: ("1:1", "10:")}
        others = [c for c in self.classes if c.name != self.default]
        for i, c in enumerate(others):
            ids[c.name] = (f"1:{0x11 + i:x}", f"{0x11 + i:x}:")
        return ids

    def htb_prio(self) -> dict[str, int]:
        """HTB ``prio`` per class: the priority classes by rank, then the weighted ones."""
        strict = self.strict()
        ranks = {c.name: rank for rank, c in enumerate(strict)}
        return {c.name: ranks.get(c.name, len(strict)) for c in self.classes}

    def commands(
        self, dev: str, rate_bps: int, buffer_pkts: int, mtu: int = DEFAULT_MTU
    ) -> list[list[str]]:
        """``tc`` argument lists (without the leading ``tc``) for one egress; buffers
        are in default-MTU frames and become their bytes' worth of ``mtu`` frames."""
        frame = frame_bytes(mtu)
        link_burst = str(burst_bytes(rate_bps, mtu))
        cmds = [
            ["qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
            [
                "class",
                "replace",
                "dev",
                dev,
                "parent",
                "1:",
                "classid",
                PARENT,
                "htb",
                "rate",
                f"{rate_bps}bit",
                "ceil",
                f"{rate_bps}bit",
                "burst",
                link_burst,
                "cburst",
                link_burst,
                "quantum",
                str(frame),
            ],
        ]
        ids, prio, strict = self.ids(), self.htb_prio(), bool(self.strict())
        shares = [c.rate_share for c in self.classes if c.rate_share is not None]
        least = min(shares, default=1.0)
        for c in sorted(self.classes, key=lambda c: ids[c.name][0] != "1:1"):
            classid, handle = ids[c.name]
            share = FLOOR_SHARE if strict else c.rate_share or FLOOR_SHARE
            rate = max(1, round(share * rate_bps))
            quantum = frame
            if strict and c.rate_share is not None:
                quantum = min(MAX_QUANTUM, round(frame * c.rate_share / least))
            cmds += [
                [
                    "class",
                    "replace",
                    "dev",
                    dev,
                    "parent",
                    PARENT,
                    "classid",
                    classid,
                    "htb",
                    "rate",
                    f"{rate}bit",
                    "ceil",
                    f"{rate_bps}bit",
                    "burst",
                    str(burst_bytes(rate, mtu)),
                    "cburst",
                    link_burst,
                    "quantum",
                    str(quantum),
                    "prio",
                    str(prio[c.name]),
                ],
                [
                    "qdisc",
                    "replace",
                    "dev",
                    dev,
                    "parent",
                    classid,
                    "handle",
                    handle,
                    "pfifo",
                    "limit",
                    str(queue_frames(c.buffer_pkts or buffer_pkts, mtu)),
                ],
            ]
        for c in self.classes:
            classid, _ = ids[c.name]
            cmds.append(
                [
                    "filter",
                    "replace",
                    "dev",
                    dev,
                    "parent",
                    "1:",
                    "protocol",
                    "ip",
                    "prio",
                    "1",
                    "handle",
                    f"800::{classid.split(':')[1]}",
                    "u32",
                    "match",
                    "ip",
                    "tos",
                    f"{c.dscp << 2:#04x}",
                    "0xfc",
                    "flowid",
                    classid,
                ]
            )
        return cmds


def class_plan(classes: Any, default_class: str | None = None) -> ClassPlan:
    """Check ``qos.classes``: the ``QosClass`` sections of the run's configuration (read
    by attribute), or, as the controller's JSON parameters hold them, a list of {name,
    dscp, rate_share or priority, buffer_pkts?}. The default class is ``default_class``
    or the last listed."""
    if not isinstance(classes, list | tuple) or not 1 <= len(classes) <= MAX_CLASSES:
        raise QosError(f"qos.classes must be a list of 1 to {MAX_CLASSES} classes, got {classes!r}")
    parsed = [_parse_class(i, c) for i, c in enumerate(classes)]
    for key in ("name", "dscp", "priority"):
        values = [getattr(c, key) for c in parsed if getattr(c, key) is not None]
        dup = next((v for v in values if values.count(v) > 1), None)
        if dup is not None:
            raise QosError(f"qos.classes: two classes have {key} {dup!r}")
    total = sum(c.rate_share or 0.0 for c in parsed)
    if total > 1 + 1e-9:
        raise QosError(f"qos.classes: rate_share values sum to {total:g}: must be at most 1")
    default = parsed[-1].name if default_class is None else default_class
    if default not in [c.name for c in parsed]:
        raise QosError(
            f"qos.default_class={default!r} is not a class: allowed "
            f"{', '.join(c.name for c in parsed)}"
        )
    return ClassPlan(tuple(parsed), default)


def _class_keys(spec: Any) -> dict[str, Any] | None:
    """A class's keys: a mapping's own, or a ``QosClass``'s fields (None: neither)."""
    if isinstance(spec, Mapping):
        return dict(spec)
    if all(hasattr(spec, key) for key in CLASS_KEYS):
        return {key: getattr(spec, key) for key in CLASS_KEYS}
    return None


def _parse_class(i: int, given: Any) -> TrafficClass:
    spec = _class_keys(given)
    if spec is None:
        raise QosError(f"qos.classes[{i}] must be a mapping, got {given!r}")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise QosError(f"qos.classes[{i}]: name={name!r} must be a non-empty string")
    where = f"qos class {name!r}"
    unknown = sorted(set(spec) - set(CLASS_KEYS))
    if unknown:
        raise QosError(f"{where}: unknown key {unknown[0]!r}: allowed {', '.join(CLASS_KEYS)}")
    dscp = spec.get("dscp")
    if not _is_int(dscp, 0, 63):
        raise QosError(f"{where}: dscp={dscp!r} must be an integer from 0 to 63")
    share, prio = spec.get("rate_share"), spec.get("priority")
    if (share is None) == (prio is None):
        which = "both a rate_share and" if prio is not None else "neither a rate_share nor"
        raise QosError(f"{where} has {which} a priority: give one (weighted or strict)")
    if share is not None:
        ok = isinstance(share, int | float) and not isinstance(share, bool)
        if not ok or not math.isfinite(share) or not 0 < share <= 1:
            raise QosError(f"{where}: rate_share={share!r} must be a fraction in (0, 1]")
    if prio is not None and not _is_int(prio, 0, LOWEST_PRIO):
        raise QosError(f"{where}: priority={prio!r} must be an integer from 0 to {LOWEST_PRIO}")
    buf = spec.get("buffer_pkts")
    if buf is not None and not _is_int(buf, 1, MAX_BUFFER_PKTS):
        raise QosError(f"{where}: buffer_pkts={buf!r} must be from 1 to {MAX_BUFFER_PKTS}")
    return TrafficClass(name, dscp, None if share is None else float(share), prio, buf)


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

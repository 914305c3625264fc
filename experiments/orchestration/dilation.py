"""The time dilation a run is emulated at, decided before anything is built (pure).

A spec's ``scale.time_dilation`` is a number or ``auto``. A number is kept as given and
the plan judged at it (over the envelope: refused, unless ``--force``). ``auto`` is the
smallest ``d`` of ``1, 2, 4, 8, …`` up to ``max_dilation`` (and ``max_dilation`` itself)
at which the run fits this machine, from ``min_dilation`` on (``--min-dilation``: so
runs on several fabrics can be compared at one ``d``, where the emulator's per-message
cost, which ``d`` divides, would otherwise differ between them):

- the plan's figures per wall second (switch-hop Mbit/s, message-hops/s) are the
  real-equivalent ones ÷ ``d`` (``envelope.figures(..., dilation=d)``), so each falls
  under its limit at a large enough ``d``; connections open at once do not fall, and no
  ``d`` fixes them;
- every link is shaped to real × ``scale.bandwidth`` ÷ ``d``: the fastest must be at most
  what one hop carries (``max_rate_bps``; a larger ``d`` brings it down), the slowest at
  least ``MIN_RATE_BPS`` (a larger ``d`` takes it below: the bound above which ``d``
  cannot go, whatever the cap). A ``link_degrade`` fault's rate counts as a link's.

A run at ``d`` lasts ``duration_s × d`` of wall time (``Dilation.wall_s``). When no
allowed ``d`` fits, ``Dilation.exceeded`` says why, with the ``d`` that would fit and
its wall time when a larger ``--max-dilation`` is the fix; the run is then judged at
the largest allowed ``d`` (what ``--force`` runs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from experiments.orchestration.demand import Demand
from experiments.orchestration.envelope import PER_WALL_SECOND, Envelope, exceeded, figures
from topologies import Fabric
from topologies.scale import DEFAULT_MAX_DILATION, MAX_TIME_DILATION, Scale
from topologies.shaping import MAX_RATE_BPS, MIN_RATE_BPS

_LARGEST_POWER = 2**30  # where the search for the d that would fit gives up
_PER_SECOND_JUDGED = tuple(n for n in PER_WALL_SECOND if n != "machine_load")


@dataclass(frozen=True)
class Dilation:
    """The time dilation chosen for one run, and what it costs."""

    d: float  # wall seconds per real-equivalent second
    auto: bool  # chosen by the planner (scale.time_dilation: auto)
    duration_s: float  # the run's real-equivalent duration
    max_dilation: float = DEFAULT_MAX_DILATION
    exceeded: tuple[str, ...] = ()  # why the plan does not fit at d (empty: it fits)
    needed: float | None = None  # auto, above the cap: the d at which it would fit
    min_dilation: float = 1.0  # auto: the smallest d it may choose

    @property
    def wall_s(self) -> float:
        """The wall seconds the run's traffic lasts (build and drain not counted)."""
        return self.duration_s * self.d

    @property
    def fits(self) -> bool:
        return not self.exceeded

    def describe(self) -> str:
        """One line for ``--dry-run`` and reports."""
        least = f"at least {self.min_dilation:g}, " if self.min_dilation > 1 else ""
        how = f" (auto, {least}at most {self.max_dilation:g})" if self.auto else ""
        return (
            f"time dilation {self.d:g}{how}: {self.duration_s:g} s of real-equivalent "
            f"traffic take {self.wall_s:g} s of wall time"
        )

    def record(self) -> dict[str, Any]:
        """What summary.json says of it."""
        return {
            "d": self.d,
            "auto": self.auto,
            "max_dilation": self.max_dilation,
            "min_dilation": self.min_dilation,
            "duration_s": self.duration_s,
            "wall_s": self.wall_s,
            "needed": self.needed,
        }


def check_dilation(value: float, key: str, high: float = MAX_TIME_DILATION) -> float:
    """``value`` as a bound on ``auto`` (``--max-dilation``, ``--min-dilation``): a number
    from 1 to ``high``; else ValueError naming ``key``."""
    if not math.isfinite(value) or not 1 <= value <= high:
        raise ValueError(f"{key} {value:g} is not allowed: must be a number from 1 to {high:g}")
    return float(value)


def ladder(max_dilation: float, min_dilation: float = 1.0) -> list[float]:
    """The dilations ``auto`` tries, smallest first: ``min_dilation``, then the powers
    of two above it up to ``max_dilation``, and ``max_dilation`` itself."""
    out, d = [float(min_dilation)], 1.0
    while d < max_dilation:
        if d > min_dilation:
            out.append(d)
        d *= 2
    return sorted(set(out) | {float(max_dilation)})


def shaped_rates(fabric: Fabric, faults: Iterable[Any] = ()) -> dict[str, float]:
    """Every real-equivalent rate (Gbit/s) the run shapes, by what shapes it: each link
    (``link a-b``) and each ``link_degrade`` fault (``faults.i.link_degrade``)."""
    rates = {f"link {lk.a}-{lk.b}": lk.real_gbps for lk in fabric.links}
    for i, fault in enumerate(faults):
        degrade = getattr(fault, "link_degrade", None)
        if degrade is not None:
            rates[f"faults.{i}.link_degrade ({'-'.join(degrade.link)})"] = degrade.gbps
    return rates


def choose_dilation(
    demand: Demand,
    env: Envelope,
    scale: Scale,
    rates_gbps: Mapping[str, float],
    duration_s: float,
    max_dilation: float = DEFAULT_MAX_DILATION,
    max_rate_bps: int = MAX_RATE_BPS,
    min_dilation: float = 1.0,
) -> Dilation:
    """The time dilation of a run whose plan asks ``demand`` of ``env``, at ``scale``
    (its ``time_dilation`` a number, kept, or ``auto`` from ``min_dilation`` up to
    ``max_dilation``), shaping ``rates_gbps`` (``shaped_rates``); see the module
    docstring."""
    cap = check_dilation(max_dilation, "--max-dilation")
    floor = check_dilation(min_dilation, "--min-dilation", cap)
    if not scale.auto:
        over = exceeded(demand, env, scale.d)
        return Dilation(scale.d, False, duration_s, cap, tuple(over))
    slowest = min(rates_gbps, key=rates_gbps.__getitem__) if rates_gbps else None
    fastest = max(rates_gbps.values(), default=0.0)

    def shapeable(d: float) -> bool:
        return slowest is None or scale.dilated(d).link_bps(rates_gbps[slowest]) >= MIN_RATE_BPS

    def carried(d: float) -> bool:  # every per-second figure, and the fastest link
        if scale.dilated(d).link_bps(fastest) > max_rate_bps:
            return False
        return all(f.ok for f in figures(demand, env, d) if f.name in _PER_SECOND_JUDGED)

    def too_slow(d: float) -> str:  # what d does to the slowest link
        assert slowest is not None
        rate = scale.dilated(d).link_bps(rates_gbps[slowest])
        return (
            f"{slowest} ({rates_gbps[slowest]:g} Gbit/s at scale {scale.bandwidth:g}) would "
            f"run at {rate / 1e6:.3f} Mbit/s, below the {MIN_RATE_BPS / 1e6:g} Mbit/s this "
            "emulation shapes faithfully"
        )

    allowed = [d for d in ladder(cap, floor) if shapeable(d)]  # rates only fall as d grows
    if not allowed and floor > 1 and shapeable(1.0):
        why = (
            f"time_dilation auto: at --min-dilation {floor:g}, {too_slow(floor)}: lower "
            "--min-dilation or raise scale.bandwidth"
        )
        return Dilation(floor, True, duration_s, cap, (why,), min_dilation=floor)
    if not allowed:  # too slow even undilated: the builder's refusal names the link
        return Dilation(floor, True, duration_s, cap, min_dilation=floor)
    d = next((d for d in allowed if carried(d)), None)
    if d is not None:  # what is left over, if anything, no dilation lowers (connections)
        over = tuple(exceeded(demand, env, d))
        return Dilation(d, True, duration_s, cap, over, min_dilation=floor)
    d = allowed[-1]  # what --force runs
    over = exceeded(demand, env, d)
    needed = _needed(carried)
    if needed is None:
        why = "time_dilation auto: no time dilation brings this plan into the envelope"
    elif not shapeable(needed):
        why = (
            f"time_dilation auto: the plan fits this machine only at time dilation "
            f"{needed:g}, where {too_slow(needed)}: raise scale.bandwidth or that rate, or "
            "lower the load"
        )
    else:
        why = (
            f"time_dilation auto: the plan fits this machine only at time dilation "
            f"{needed:g}, above --max-dilation {cap:g}; at {needed:g} its {duration_s:g} s "
            f"take {duration_s * needed:g} s of wall time: pass --max-dilation {needed:g} "
            "to run it so, or lower the load"
        )
    return Dilation(d, True, duration_s, cap, (why, *over), needed, floor)


def _needed(carried: Callable[[float], bool]) -> float | None:
    """The smallest power of two at which ``carried`` holds (None: none up to 2**30)."""
    d = 1.0
    while d <= _LARGEST_POWER:
        if carried(d):
            return d
        d *= 2
    return None

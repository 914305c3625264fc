"""Tiered KV storage (a serving workload's ``kv_tiers``): HBM, an optional host-local
CXL pool, an optional flash tier on the fabric's storage nodes, and what a decode
instance does when its HBM is full.

- **HBM**: ``hbm_gb`` per GPU is what each GPU gives the KV cache, so a decode instance
  of tp GPUs holds ``tp × hbm_gb`` of KV (:func:`hbm_tokens`); admission and eviction
  follow it.
- **CXL** (``cxl: {capacity_gb, gbps, latency_us}``): a memory pool per server,
  host-local: moving KV to or from it crosses no fabric link but takes
  ``latency + bytes × 8 / rate``, and a server's transfers queue one after another.
- **Flash** (``flash: {capacity_gb, latency_us}``, capacity per storage node): on the
  fabric's storage nodes (``fabric.storage_nodes``); KV moves to and from them as
  ``tier_fetch`` messages over the fabric, so offloads and fetches are real packets that
  compete with KV transfers. A fetch's messages leave the storage node ``latency`` after
  it is asked for. A GPU uses the storage node fewest switches away that has room (ties:
  the lowest-numbered).

**Eviction** (decode instance, :func:`choose_eviction`): the KV of an arrived request
must land in HBM. When it does not fit, the instance evicts members of its batch,
least recently used first (every member is read at every step, so recency is when its
KV was last brought into HBM), until it fits. Each victim goes to the *next tier* (the
first lower tier with room for its KV: CXL, then flash) or is dropped and later
*recomputed* (a prefill of prompt + generated tokens on its decode instance, which
stalls that instance's batch), whichever :func:`eviction_costs` estimates cheaper
(offload and fetch back vs the recompute; a tie keeps the KV). No tier with room:
recompute.

**Prefix blocks** (:class:`TierBlocks`): with a prefix cache, a block the pool evicts
from a prefill server's HBM moves to that server's CXL, else to flash (a ``tier_fetch``
write), and stays fetchable from there: a later prompt's prefix walk continues through
blocks held in its server's CXL or on flash, fetched before its prefill starts. A lower
tier that is full evicts its own least recently used block.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TIER_NAMES = ("cxl", "flash")
RECOMPUTE = "recompute"


@dataclass(frozen=True)
class CxlTier:
    """A host-local CXL memory pool of ``capacity_gb`` per server."""

    capacity_gb: float
    gbps: float
    latency_us: float

    def move_s(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` one way (no queueing)."""
        return self.latency_us * 1e-6 + nbytes * 8 / (self.gbps * 1e9)


@dataclass(frozen=True)
class FlashTier:
    """Flash on the fabric's storage nodes, ``capacity_gb`` each."""

    capacity_gb: float
    latency_us: float


@dataclass(frozen=True)
class KvTiers:
    """A serving workload's KV tiers: HBM per GPU and the optional lower tiers."""

    hbm_gb: float
    cxl: CxlTier | None = None
    flash: FlashTier | None = None

    @property
    def lower(self) -> tuple[str, ...]:
        """The lower tiers present, nearest first."""
        return tuple(name for name in TIER_NAMES if getattr(self, name) is not None)


def kv_tiers(section: Any) -> KvTiers | None:
    """The :class:`KvTiers` of a serving workload's ``kv_tiers`` (the configuration's
    ``KvTiers``: ``hbm_gb``, ``cxl`` and ``flash`` or None; None: no tiers)."""
    if section is None:
        return None
    cxl, flash = section.cxl, section.flash
    return KvTiers(
        hbm_gb=float(section.hbm_gb),
        cxl=CxlTier(float(cxl.capacity_gb), float(cxl.gbps), float(cxl.latency_us))
        if cxl is not None
        else None,
        flash=FlashTier(float(flash.capacity_gb), float(flash.latency_us))
        if flash is not None
        else None,
    )


def hbm_tokens(hbm_gb: float, tp: int, kv_bytes_per_token: int) -> int:
    """KV tokens an instance of ``tp`` GPUs holds with ``hbm_gb`` of KV per GPU."""
    return int(tp * hbm_gb * 1e9 // kv_bytes_per_token)


def eviction_costs(
    nbytes: float,
    recompute_s: float,
    tier: str | None,
    tier_gbps: float | None = None,
    latency_us: float = 0.0,
) -> dict[str, float]:
    """Estimated seconds each way out of HBM costs for a victim of ``nbytes`` of KV:
    ``recompute`` (``recompute_s``, its prefill of prompt + generated tokens) and, if a
    lower ``tier`` has room, that tier's round trip: offload now and fetch back later,
    each ``latency + bytes × 8 / rate`` at ``tier_gbps``."""
    costs = {RECOMPUTE: float(recompute_s)}
    if tier is not None:
        if not tier_gbps or tier_gbps <= 0:
            raise ValueError(f"tier {tier!r} needs a positive rate, got {tier_gbps!r}")
        costs[tier] = 2 * (latency_us * 1e-6 + nbytes * 8 / (tier_gbps * 1e9))
    return costs


def choose_eviction(costs: Mapping[str, float]) -> str:
    """The cheapest way out of HBM; on a tie the tier (it keeps the work done)."""
    return min(costs, key=lambda way: (costs[way], way == RECOMPUTE))


def lru_victims(members: Iterable[tuple[Hashable, int, int]], need: int, free: int) -> list:
    """Which members (``(member, loaded_ns, tokens)``) to evict, least recently loaded
    first, until ``need`` tokens fit beside ``free``; [] if they fit already, and every
    member if even that is not enough."""
    out = []
    for member, _, tokens in sorted(members, key=lambda m: m[1]):
        if free >= need:
            break
        out.append(member)
        free += tokens
    return out


class TierSpace:
    """Bytes held per place of one tier (a server's CXL, a storage node's flash)."""

    def __init__(self, places: Iterable[Hashable], capacity_bytes: float) -> None:
        self.capacity = float(capacity_bytes)
        self.used: dict[Hashable, float] = dict.fromkeys(places, 0.0)

    def room(self, place: Hashable, nbytes: float) -> bool:
        return self.used[place] + nbytes <= self.capacity

    def hold(self, place: Hashable, nbytes: float) -> None:
        if not self.room(place, nbytes):
            raise ValueError(f"{place}: {nbytes:.0f} bytes do not fit")
        self.used[place] += nbytes

    def free(self, place: Hashable, nbytes: float) -> None:
        self.used[place] = max(0.0, self.used[place] - nbytes)


class TierBlocks:
    """Prefix blocks evicted from HBM, per place of one lower tier, in LRU order; the
    bytes they take are the caller's :class:`TierSpace` business."""

    def __init__(self, places: Iterable[Hashable]) -> None:
        self.store: dict[Hashable, OrderedDict[int, None]] = {p: OrderedDict() for p in places}

    def holds(self, place: Hashable, block: int) -> bool:
        return block in self.store[place]

    def where(self, block: int) -> Hashable | None:
        """The first place (in order) holding ``block``."""
        return next((p for p, held in self.store.items() if block in held), None)

    def touch(self, place: Hashable, block: int) -> None:
        self.store[place].move_to_end(block)

    def add(self, place: Hashable, block: int) -> None:
        self.store[place][block] = None
        self.store[place].move_to_end(block)

    def pop_lru(self, place: Hashable) -> int | None:
        """Drop the place's least recently used block (None if it holds none)."""
        held = self.store[place]
        return held.popitem(last=False)[0] if held else None

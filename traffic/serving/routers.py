"""Request routers: choose a prefill and a decode instance for each arriving request.

A router sees only a :class:`RouterState`, built at the request's arrival from what a
real router knows then: its own bookkeeping of the work it assigned and which of it
finished (completions are reported to it), and the prefix-cache contents. Never a
future completion time. Loads are in 512-token KV blocks:

- a prefill instance's ``prefill_load`` is the blocks still to compute of the requests
  queued on it or in prefill (colocated: plus the KV blocks of its decoding requests);
- a decode instance's ``decode_load`` is the KV blocks of the requests assigned to it and
  not finished (waiting for their KV, waiting for room, or decoding).

Colocated serving has no decode pool (``decode_load == ()``): the decode instance is the
prefill instance.

Ties among equally good instances are broken at random by the router's ``rng`` (a
``random.Random`` derived from the run's seed, :func:`router_rng`), never by index: at
light load every instance is idle, and an index tie-break would send every request to
the first instances, which share a server (and its NVLink) by construction, so a
"blind" router would measure the tie-break instead of its placement. The same seed
gives the same picks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RouterState:
    """What the router knows when a request arrives."""

    request_blocks: int  # 512-token blocks of the new prompt
    prefill_load: tuple[int, ...]
    decode_load: tuple[int, ...] = ()
    cached_blocks: tuple[int, ...] = ()  # per prefill instance: prompt prefix held locally
    request_kv_bytes: int = 0
    tiers: tuple[tuple[int, ...], ...] = ()  # [prefill][decode]: 0 NVLink, 1 rail, 2 spine
    inflight_kv_bytes: tuple[tuple[int, ...], ...] = ()  # [prefill][decode], not yet arrived
    tier_budget_bytes: tuple[float, ...] = ()  # per tier: bytes it moves in a budget window

    @property
    def colocated(self) -> bool:
        return not self.decode_load

    def to_compute(self, p: int) -> int:
        """Prompt blocks prefill instance ``p`` must compute (not in its local cache)."""
        cached = self.cached_blocks[p] if self.cached_blocks else 0
        return max(self.request_blocks - cached, 0)


def router_rng(seed: int) -> random.Random:
    """The tie-breaking generator of a run with seed ``seed``: its own stream, so the
    arrivals drawn from the same seed do not shift with the number of ties."""
    return random.Random(f"kvfabric-router:{seed}")


def _argmin(costs: Sequence[float], rng: random.Random, among: Sequence[int] = ()) -> int:
    """The index (of ``among``, default all) with the lowest cost; ties at random."""
    candidates = list(among) if among else list(range(len(costs)))
    least = min(costs[i] for i in candidates)
    tied = [i for i in candidates if costs[i] == least]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


class Router:
    name = "router"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng if rng is not None else router_rng(0)

    def choose(self, state: RouterState) -> tuple[int, int]:
        """(prefill instance index, decode instance index)."""
        raise NotImplementedError

    def _decode(self, state: RouterState, p: int) -> int:
        return p if state.colocated else _argmin(state.decode_load, self.rng)


class RoundRobin(Router):
    """Instances in turn: each pool deals its instances like a deck, every instance once
    per round, reshuffled (by ``rng``) each round. A fixed order would pair prefill
    instance k with decode instance k every round, and so always the same tier."""

    name = "round_robin"

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng)
        self.decks: dict[str, list[int]] = {"prefill": [], "decode": []}

    def _deal(self, pool: str, size: int) -> int:
        deck = self.decks[pool]
        if not deck:
            deck += range(size)
            self.rng.shuffle(deck)
        return deck.pop()

    def choose(self, state: RouterState) -> tuple[int, int]:
        p = self._deal("prefill", len(state.prefill_load))
        return p, p if state.colocated else self._deal("decode", len(state.decode_load))


class LeastLoaded(Router):
    """Least outstanding work: lowest ``prefill_load``, lowest ``decode_load``."""

    name = "least_loaded"

    def choose(self, state: RouterState) -> tuple[int, int]:
        p = _argmin(state.prefill_load, self.rng)
        return p, self._decode(state, p)


class KvAffinity(Router):
    """NVIDIA Dynamo's KV router cost: ``weight`` × prompt blocks still to compute on the
    instance (not in its local cache) + its active blocks; lowest wins. Weight 0 is pure
    load balancing (exactly ``least_loaded``). The decode pool holds no prefix cache, so
    the decode instance is the least loaded one."""

    name = "kv_affinity"

    def __init__(self, weight: float = 1.0, rng: random.Random | None = None) -> None:
        super().__init__(rng)
        if weight < 0:
            raise ValueError(f"router_weight must be >= 0, got {weight}")
        self.weight = float(weight)

    def cost(self, state: RouterState, p: int) -> float:
        return self.weight * state.to_compute(p) + state.prefill_load[p]

    def choose(self, state: RouterState) -> tuple[int, int]:
        p = _argmin([self.cost(state, i) for i in range(len(state.prefill_load))], self.rng)
        return p, self._decode(state, p)


class TopologyAware(Router):
    """Least-loaded prefill instance, then the decode instance over the fastest tier
    (NVLink, then rail, then spine) whose budget is not used up: a tier is usable while
    the KV bytes the chosen prefill instance has in flight over it stay within
    ``tier_budget_bytes[tier]``. Within a tier the least loaded decode instance wins;
    when every tier is over budget, the least loaded decode instance overall."""

    name = "topology_aware"

    def choose(self, state: RouterState) -> tuple[int, int]:
        p = _argmin(state.prefill_load, self.rng)
        if state.colocated:
            return p, p
        tiers, inflight = state.tiers[p], state.inflight_kv_bytes[p]
        for tier in sorted(set(tiers)):
            members = [d for d, t in enumerate(tiers) if t == tier]
            used = sum(inflight[d] for d in members)
            budget = state.tier_budget_bytes[tier] if state.tier_budget_bytes else float("inf")
            if used <= budget:
                return p, _argmin(state.decode_load, self.rng, members)
        return p, _argmin(state.decode_load, self.rng)


ROUTERS = {
    "round_robin": RoundRobin,
    "least_loaded": LeastLoaded,
    "kv_affinity": KvAffinity,
    "topology_aware": TopologyAware,
}


def make_router(name: str, weight: float = 1.0, rng: random.Random | None = None) -> Router:
    """The router ``name``; ``rng`` breaks its ties (:func:`router_rng` of the run's seed)."""
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; allowed: {', '.join(ROUTERS)}")
    return KvAffinity(weight, rng) if name == "kv_affinity" else ROUTERS[name](rng)

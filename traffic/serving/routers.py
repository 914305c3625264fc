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
prefill instance. Ties go to the lowest instance index.
"""

from __future__ import annotations

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


def _argmin(costs: Sequence[float]) -> int:
    return min(range(len(costs)), key=lambda i: (costs[i], i))


class Router:
    name = "router"

    def choose(self, state: RouterState) -> tuple[int, int]:
        """(prefill instance index, decode instance index)."""
        raise NotImplementedError

    def _decode(self, state: RouterState, p: int) -> int:
        return p if state.colocated else _argmin(state.decode_load)


class RoundRobin(Router):
    """Instances in turn, each pool with its own counter."""

    name = "round_robin"

    def __init__(self) -> None:
        self.count = 0

    def choose(self, state: RouterState) -> tuple[int, int]:
        k, self.count = self.count, self.count + 1
        p = k % len(state.prefill_load)
        return p, p if state.colocated else k % len(state.decode_load)


class LeastLoaded(Router):
    """Least outstanding work: lowest ``prefill_load``, lowest ``decode_load``."""

    name = "least_loaded"

    def choose(self, state: RouterState) -> tuple[int, int]:
        p = _argmin(state.prefill_load)
        return p, self._decode(state, p)


class KvAffinity(Router):
    """NVIDIA Dynamo's KV router cost: ``weight`` × prompt blocks still to compute on the
    instance (not in its local cache) + its active blocks; lowest wins. Weight 0 is pure
    load balancing (exactly ``least_loaded``). The decode pool holds no prefix cache, so
    the decode instance is the least loaded one."""

    name = "kv_affinity"

    def __init__(self, weight: float = 1.0) -> None:
        if weight < 0:
            raise ValueError(f"router_weight must be >= 0, got {weight}")
        self.weight = float(weight)

    def cost(self, state: RouterState, p: int) -> float:
        return self.weight * state.to_compute(p) + state.prefill_load[p]

    def choose(self, state: RouterState) -> tuple[int, int]:
        p = _argmin([self.cost(state, i) for i in range(len(state.prefill_load))])
        return p, self._decode(state, p)


class TopologyAware(Router):
    """Least-loaded prefill instance, then the decode instance over the fastest tier
    (NVLink, then rail, then spine) whose budget is not used up: a tier is usable while
    the KV bytes the chosen prefill instance has in flight over it stay within
    ``tier_budget_bytes[tier]``. Within a tier the least loaded decode instance wins;
    when every tier is over budget, the least loaded decode instance overall."""

    name = "topology_aware"

    def choose(self, state: RouterState) -> tuple[int, int]:
        p = _argmin(state.prefill_load)
        if state.colocated:
            return p, p
        tiers, inflight = state.tiers[p], state.inflight_kv_bytes[p]
        for tier in sorted(set(tiers)):
            members = [d for d, t in enumerate(tiers) if t == tier]
            used = sum(inflight[d] for d in members)
            budget = state.tier_budget_bytes[tier] if state.tier_budget_bytes else float("inf")
            if used <= budget:
                return p, min(members, key=lambda d: (state.decode_load[d], d))
        return p, _argmin(state.decode_load)


ROUTERS = {
    "round_robin": RoundRobin,
    "least_loaded": LeastLoaded,
    "kv_affinity": KvAffinity,
    "topology_aware": TopologyAware,
}


def make_router(name: str, weight: float = 1.0) -> Router:
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; allowed: {', '.join(ROUTERS)}")
    return KvAffinity(weight) if name == "kv_affinity" else ROUTERS[name]()

"""Prefix-cache pool (Mooncake-style): KV blocks of 512 tokens kept on the prefill servers.

A prompt is a sequence of block hash ids (``traffic.traces``: equal ids are the same
reusable KV prefix). Each prefill server keeps up to ``capacity_blocks`` blocks (the
capacity is *per server*: Mooncake pools the DRAM of every prefill node), evicting
the least recently used block when full.

A lookup walks the prompt's blocks in order, as prefix caching must (block k's KV
depends on every token before it): a block held on the asking server is a *local*
hit, a block held only on another server is a *remote* hit fetched over the fabric
from its holder (the lowest-numbered server holding it), and the walk stops at the
first block held nowhere; that block and every later one are *misses* and are
computed. Hits refresh the block's LRU position on the server that supplies it.
After prefill the whole prompt is inserted on the prefill server.

With ``shared=False`` the servers do not pool: each is an isolated prefix cache (vLLM's
automatic prefix caching, one per instance group), a lookup sees only the asking
server's blocks and there are no remote hits.

:class:`IdealPrefixCache` is the yardstick: the hits an infinite pool would give on the
same arrivals (``ideal_hit_rate`` in the summary).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Lookup:
    """Result of one prompt lookup from ``server``."""

    server: int
    blocks: int  # blocks with hash ids in the prompt
    local: int  # prefix blocks held on ``server``
    remote: dict[int, int] = field(default_factory=dict)  # holder server → blocks fetched

    @property
    def remote_total(self) -> int:
        return sum(self.remote.values())

    @property
    def hits(self) -> int:
        return self.local + self.remote_total


class PrefixCachePool:
    """One LRU block store per prefill server; ``capacity_blocks`` per server. ``shared``:
    a block held on another server is a remote hit (the pool), else a miss."""

    def __init__(self, servers: Iterable[int], capacity_blocks: int, shared: bool = True) -> None:
        if isinstance(capacity_blocks, bool) or capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks!r}")
        self.capacity = int(capacity_blocks)
        self.shared = bool(shared)
        self.store: dict[int, OrderedDict[int, None]] = {s: OrderedDict() for s in servers}
        self.lookups_blocks = 0
        self.local_hits = 0
        self.remote_hits = 0
        self.evictions = 0
        self.inserted = 0
        self.bytes_fetched = 0
        # Called with (server, block) for every block evicted (kv_tiers: it moves down).
        self.on_evict: Callable[[int, int], None] | None = None

    def holds(self, server: int, block: int) -> bool:
        return block in self.store[server]

    def local_prefix(self, hash_ids: Sequence[int], server: int) -> int:
        """Prefix blocks of ``hash_ids`` held on ``server`` (no LRU update: a router's peek)."""
        held = self.store[server]
        n = 0
        for h in hash_ids:
            if h not in held:
                break
            n += 1
        return n

    def peek(self, hash_ids: Sequence[int], server: int) -> Lookup:
        """Where the prefix of ``hash_ids`` would come from, without touching LRU or stats."""
        local, remote = 0, {}
        for h in hash_ids:
            if h in self.store[server]:
                local += 1
                continue
            holders = sorted(self.store) if self.shared else ()
            holder = next((s for s in holders if h in self.store[s]), None)
            if holder is None:
                break
            remote[holder] = remote.get(holder, 0) + 1
        return Lookup(server, len(hash_ids), local, remote)

    def lookup(self, hash_ids: Sequence[int], server: int) -> Lookup:
        """Like ``peek``, and count it and refresh the hit blocks' LRU positions."""
        result = self.peek(hash_ids, server)
        for h in hash_ids[: result.hits]:
            supplier = (
                server
                if h in self.store[server]
                else next(s for s in sorted(self.store) if h in self.store[s])
            )
            self.store[supplier].move_to_end(h)
        self.lookups_blocks += result.blocks
        self.local_hits += result.local
        self.remote_hits += result.remote_total
        return result

    def insert(self, hash_ids: Sequence[int], server: int) -> None:
        """Hold every block of the prompt on ``server`` (most recent), evicting LRU blocks."""
        held = self.store[server]
        for h in hash_ids:
            if h in held:
                held.move_to_end(h)
                continue
            held[h] = None
            self.inserted += 1
            while len(held) > self.capacity:
                gone, _ = held.popitem(last=False)
                self.evictions += 1
                if self.on_evict is not None:
                    self.on_evict(server, gone)

    def stats(self) -> dict[str, float | int | None]:
        hits = self.local_hits + self.remote_hits
        n = self.lookups_blocks
        return {
            "enabled": True,
            "shared": self.shared,
            "capacity_blocks_per_server": self.capacity,
            "servers": sorted(self.store),
            "lookup_blocks": n,
            "hit_blocks": hits,
            "local_hit_blocks": self.local_hits,
            "remote_hit_blocks": self.remote_hits,
            "hit_rate": hits / n if n else None,
            "local_hit_rate": self.local_hits / n if n else None,
            "remote_hit_rate": self.remote_hits / n if n else None,
            "evictions": self.evictions,
            "inserted_blocks": self.inserted,
            "bytes_fetched": self.bytes_fetched,
            "held_blocks": {s: len(b) for s, b in sorted(self.store.items())},
        }


class IdealPrefixCache:
    """The cache an ideal hit rate is measured against: unbounded, one pool for every
    server, holding each block from the arrival of the first request whose prompt has
    it (before that request's prefill ends). So it is an upper bound on what any pool
    could hit on the same arrivals, counted by the same prefix walk as
    :class:`PrefixCachePool`."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def arrive(self, hash_ids: Sequence[int]) -> int:
        """The prefix blocks of ``hash_ids`` an earlier arrival held; then hold them all."""
        hits = 0
        for h in hash_ids:
            if h not in self.seen:
                break
            hits += 1
        self.seen.update(hash_ids)
        return hits


def ideal_hit_blocks(prompts: Iterable[Sequence[int]]) -> list[int]:
    """The prefix blocks of each prompt (block hash ids, in arrival order) that an
    infinite cache would hold when it arrives (:class:`IdealPrefixCache`)."""
    cache = IdealPrefixCache()
    return [cache.arrive(p) for p in prompts]

"""The serving driver's tiered-KV behaviour (``tiers`` states the policy): evicting
decode members to CXL or flash or for recompute, bringing them back, demoting prefix
blocks and fetching them from the lower tiers. A mixin of
:class:`~traffic.serving.driver.ServingDriver`: it uses the driver's ``_send``,
``_timer`` and ``_kick`` and keeps its own state in ``self.tier_*``.

Timers it handles (``on_timer`` hands them over): ``tier_out`` (a CXL offload done),
``tier_back`` (a CXL fetch back done), ``recompute_end``, ``tier_prefix`` (prefix blocks
read from CXL). Messages: ``tier_fetch`` (to or from a storage node), each owned by a
:class:`TierJob`.

Accounting per request: ``evicted`` (times), ``recomputed_tokens``, bytes fetched from
and offloaded to each tier (a prefix block demoted when a request's prompt is inserted
counts as that request's offload), ``tier_stall_ms`` (time out of the batch after an
eviction, until it decodes again), ``tier_hit_blocks`` (prefix blocks read from a lower
tier).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import compute
from ..traces import BLOCK_TOKENS
from .instances import server_of
from .requests import Request
from .tiers import (
    RECOMPUTE,
    KvTiers,
    TierBlocks,
    TierSpace,
    choose_eviction,
    eviction_costs,
    lru_victims,
)

TIER_TIMERS = ("tier_out", "tier_back", "recompute_end", "tier_prefix")


@dataclass(eq=False)
class TierJob:
    """One move between HBM and a lower tier: ``purpose`` is ``out`` or ``back`` (a decode
    member's KV), ``prefix`` (blocks for a prefill) or ``demote`` (a block written down)."""

    purpose: str
    request: Request | None
    engine: object
    tier: str
    place: object
    nbytes: float
    flows: set[int] = field(default_factory=set)
    block: int | None = None  # demote: the block written down


class TieredDecode:
    """Mixin: the ``kv_tiers`` part of the serving driver."""

    kv_tiers: KvTiers | None = None
    tier_inserting: Request | None = None  # whose prompt the prefix pool is inserting
    tier_now = 0

    def _tiers_init(self, tiers: KvTiers, fabric) -> None:
        self.kv_tiers = tiers
        self.tier_bpt = self.model.kv_bytes_per_token(self.kv_dtype)
        self.tier_block_bytes = BLOCK_TOKENS * self.tier_bpt
        hosts = {h for e in self.prefill + self.decode for h in e.inst.hosts}
        self.tier_server = {h: server_of(fabric.node(h)) for h in sorted(hosts)}
        servers = sorted(set(self.tier_server.values()))
        self.tier_space: dict[str, TierSpace] = {}
        self.tier_blocks: dict[str, TierBlocks] = {}
        self.tier_cxl_free: dict[int, int] = dict.fromkeys(servers, 0)
        self.storage: list[str] = []
        if tiers.cxl:
            self.tier_space["cxl"] = TierSpace(servers, tiers.cxl.capacity_gb * 1e9)
            self.tier_blocks["cxl"] = TierBlocks(servers)
        if tiers.flash:
            self.storage = [n.name for n in fabric.storage_nodes]
            self.tier_space["flash"] = TierSpace(self.storage, tiers.flash.capacity_gb * 1e9)
            self.tier_blocks["flash"] = TierBlocks(self.storage)
            self.hosts = sorted(set(self.hosts) | set(self.storage))
            hops = {
                (h, s): len(fabric.shortest_paths(h, s)[0])
                for h in self.tier_server
                for s in self.storage
            }
            self.tier_nearest = {
                h: sorted(self.storage, key=lambda s, h=h: (hops[(h, s)], fabric.node(s).number))
                for h in self.tier_server
            }
            self.tier_path_gbps = {
                (h, s): self._path_gbps(fabric, h, s)
                for h in self.tier_server
                for s in self.storage
            }
            self.tier_storage_gbps = {s: fabric.links_of(s)[0].real_gbps for s in self.storage}
        self.tier_stand_in = 0
        if self.cache is not None and self.kv_tiers.lower:
            self.cache.on_evict = self._demote_block

    @staticmethod
    def _path_gbps(fabric, host: str, storage: str) -> float:
        """The slowest link on the first fewest-hop path from ``host`` to ``storage``."""
        path = fabric.shortest_paths(host, storage)[0]
        hops = zip(path, path[1:], strict=False)
        return min(fabric.link_between(a, b).real_gbps for a, b in hops)

    def flash_gbps(self, hosts: tuple[str, ...], storage: str) -> float:
        """The rate an instance's shards reach ``storage`` at together: each rank over its
        own path, all of them through the storage node's one link."""
        ranks = sum(self.tier_path_gbps[(h, storage)] for h in hosts)
        return min(ranks, self.tier_storage_gbps[storage])

    # ---- where KV can go ------------------------------------------------------------

    def _next_tier(self, host: str, nbytes: float) -> tuple[str, object] | None:
        """The first lower tier with room for ``nbytes`` near ``host``: (tier, place)."""
        for tier in self.kv_tiers.lower:
            places = [self.tier_server[host]] if tier == "cxl" else self.tier_nearest[host]
            for place in places:
                if self.tier_space[tier].room(place, nbytes):
                    return tier, place
        return None

    def _tier_rate_gbps(self, tier: str, hosts: tuple[str, ...], place) -> float:
        return self.kv_tiers.cxl.gbps if tier == "cxl" else self.flash_gbps(hosts, place)

    def _latency_ns(self, tier: str) -> int:
        return round(getattr(self.kv_tiers, tier).latency_us * 1e3)

    def _cxl_done(self, server: int, now: int, nbytes: float) -> int:
        """When a CXL move of ``nbytes`` asked for at ``now`` ends (a server's moves queue)."""
        start = max(now, self.tier_cxl_free[server])
        end = start + round(self.kv_tiers.cxl.move_s(nbytes) * 1e9)
        self.tier_cxl_free[server] = end
        return end

    def _shards(self, hosts: tuple[str, ...], tokens: int) -> list[tuple[str, int]]:
        """Each rank's share of ``tokens`` tokens of KV (its KV heads, every layer)."""
        heads = self.model.kv_heads // len(hosts)
        return [(h, self._head_bytes(tokens, heads) * self.model.layers) for h in hosts]

    def _flash_move(
        self, job: TierJob, hosts: tuple[str, ...], tokens: int, t_ns: int, to_storage: bool
    ) -> None:
        for host, size in self._shards(hosts, tokens):
            src, dst = (host, job.place) if to_storage else (job.place, host)
            rid = job.request.rid if job.request is not None else -1
            fid = self._send("tier_fetch", src, dst, size, t_ns, job, request_id=rid)
            job.flows.add(fid)
            if job.request is not None:
                job.request.network_bytes += size

    # ---- decode: admission, eviction, resumption --------------------------------------

    def _tier_admissible(self, e, r: Request, now: int) -> bool:
        """May the waiting head ``r`` join ``e``'s batch now? Evicts to make room."""
        if r.reserved:
            return e.offloading == 0
        if e.evicted:  # evicted members come back first
            return False
        if e.reserved + r.need_tokens > self.capacity and e.offloading == 0:
            self._evict_for(e, r, now)
        if e.reserved + r.need_tokens <= self.capacity:
            e.reserved += r.need_tokens
            r.reserved = True
            return e.offloading == 0
        return False

    def _evict_for(self, e, r: Request, now: int) -> None:
        members = [(m, m.loaded_ns, m.need_tokens) for m in e.active]
        for v in lru_victims(members, r.need_tokens, self.capacity - e.reserved):
            self._evict(e, v, now)

    def _evict(self, e, v: Request, now: int) -> None:
        e.active.remove(v)
        e.reserved -= v.need_tokens
        v.reserved = False
        v.evicted += 1
        v.evicted_ns = now
        host = v.decode.hosts[0]
        nbytes = v.context_tokens * self.tier_bpt
        recompute_s = compute.prefill_time_s(
            self.model, self.gpu, v.context_tokens, e.inst.tp, self.efficiency
        )
        nxt = self._next_tier(host, nbytes)
        tier, place = nxt if nxt else (None, None)
        rate = self._tier_rate_gbps(tier, v.decode.hosts, place) if tier else None
        lat = getattr(self.kv_tiers, tier).latency_us if tier else 0.0
        way = choose_eviction(eviction_costs(nbytes, recompute_s, tier, rate, lat))
        v.tier_held = None if way == RECOMPUTE else (way, place, nbytes, v.context_tokens)
        v.stage = f"evicted ({way})"
        e.evicted.append(v)
        if way == RECOMPUTE:
            return
        self.tier_space[way].hold(place, nbytes)
        v.tier_offload[way] = v.tier_offload.get(way, 0) + nbytes
        e.offloading += 1
        v.offload_pending = True
        job = TierJob("out", v, e, way, place, nbytes)
        if way == "cxl":
            self._timer(self._cxl_done(place, now, nbytes), "tier_out", job)
        else:
            self._flash_move(job, v.decode.hosts, v.context_tokens, now, to_storage=True)

    def _tier_resume(self, e, now: int) -> bool:
        """Bring evicted members back while they fit; True if a recompute took ``e``."""
        while e.evicted and not e.evicted[0].offload_pending:
            v = e.evicted[0]
            if e.reserved + v.need_tokens > self.capacity:
                return False
            e.evicted.popleft()
            e.reserved += v.need_tokens
            v.reserved = True
            if v.tier_held is None:
                v.recomputed_tokens += v.context_tokens
                v.stage = "recomputing its KV"
                e.recomputing = v
                dur = compute.prefill_time_s(
                    self.model, self.gpu, v.context_tokens, e.inst.tp, self.efficiency
                )
                self._timer(now + round(dur * 1e9), "recompute_end", (e, v))
                return True
            tier, place, nbytes, tokens = v.tier_held
            v.stage = f"fetching its KV from {tier}"
            job = TierJob("back", v, e, tier, place, nbytes)
            if tier == "cxl":
                self._timer(self._cxl_done(place, now, nbytes), "tier_back", job)
            else:
                self._flash_move(
                    job, v.decode.hosts, tokens, now + self._latency_ns(tier), to_storage=False
                )
        return False

    def _rejoin(self, e, v: Request, now: int) -> None:
        v.tier_stall_ns += now - v.evicted_ns
        v.stage = "waiting for decode room"
        e.waiting.appendleft(v)
        self._kick(e, now)

    # ---- prefix blocks ------------------------------------------------------------------

    def _demote_block(self, server: int, block: int) -> None:
        """A block the prefix pool evicted from ``server``'s HBM moves down a tier."""
        host = next(e.inst.hosts for e in self.prefill if e.inst.server == server)
        for tier in self.kv_tiers.lower:
            places = [server] if tier == "cxl" else self.tier_nearest[host[0]]
            space, held = self.tier_space[tier], self.tier_blocks[tier]
            for place in places:
                while not space.room(place, self.tier_block_bytes) and held.pop_lru(place):
                    space.free(place, self.tier_block_bytes)
                if not space.room(place, self.tier_block_bytes):
                    continue
                space.hold(place, self.tier_block_bytes)
                held.add(place, block)
                r = self.tier_inserting
                if r is not None:
                    r.tier_offload[tier] = r.tier_offload.get(tier, 0) + self.tier_block_bytes
                if tier == "flash":
                    job = TierJob(
                        "demote", r, None, tier, place, self.tier_block_bytes, block=block
                    )
                    self._flash_move(job, host, BLOCK_TOKENS, self.tier_now, to_storage=True)
                return

    def _tier_lookup(self, r: Request, p, hits: int, now: int) -> int:
        """Continue ``r``'s prefix walk past its ``hits`` HBM blocks through its server's
        CXL and flash; start their fetches; return the blocks found there."""
        server = p.inst.server
        found: dict[tuple[str, object], int] = {}
        for h in r.hash_ids[hits:]:
            where = None
            if "cxl" in self.tier_blocks and self.tier_blocks["cxl"].holds(server, h):
                where = ("cxl", server)
            elif "flash" in self.tier_blocks:
                node = self.tier_blocks["flash"].where(h)
                where = ("flash", node) if node is not None else None
            if where is None:
                break
            self.tier_blocks[where[0]].touch(where[1], h)
            found[where] = found.get(where, 0) + 1
        for (tier, place), n in sorted(found.items(), key=str):
            nbytes = n * self.tier_block_bytes
            r.tier_fetch[tier] = r.tier_fetch.get(tier, 0) + nbytes
            job = TierJob("prefix", r, p, tier, place, nbytes)
            if tier == "cxl":
                self.tier_stand_in -= 1  # a negative id: the CXL timer's stand-in in fetch_flows
                job.flows.add(self.tier_stand_in)
                r.fetch_flows.add(self.tier_stand_in)
                self._timer(self._cxl_done(place, now, nbytes), "tier_prefix", job)
            else:
                self._flash_move(
                    job,
                    p.inst.hosts,
                    n * BLOCK_TOKENS,
                    now + self._latency_ns(tier),
                    to_storage=False,
                )
                r.fetch_flows |= job.flows
        r.tier_hit_blocks = sum(found.values())
        return r.tier_hit_blocks

    # ---- events -------------------------------------------------------------------------

    def _tier_done(self, job: TierJob, now: int) -> None:
        """Every part of ``job`` has arrived (its messages, or its CXL timer)."""
        r, e = job.request, job.engine
        if job.purpose == "out":
            if r.offload_pending:  # else settled meanwhile: _tier_release counted it
                r.offload_pending = False
                e.offloading -= 1
            self._kick(e, now)
        elif job.purpose == "back":
            if r.tier_held is None:  # settled meanwhile: _tier_release freed its space
                return
            self.tier_space[job.tier].free(job.place, job.nbytes)
            r.tier_fetch[job.tier] = r.tier_fetch.get(job.tier, 0) + job.nbytes
            r.tier_held = None
            if not r.settled:
                self._rejoin(e, r, now)
        elif job.purpose == "prefix":
            r.fetch_flows -= job.flows
            if not r.fetch_flows and not r.settled:
                self._kick(e, now)

    def _tier_timer(self, kind: str, obj, now: int) -> None:
        if kind == "recompute_end":
            e, v = obj
            e.recomputing = None
            if not v.settled:
                self._rejoin(e, v, now)
            else:
                self._kick(e, now)
            return
        self._tier_done(obj, now)

    def _tier_received(self, job: TierJob, flow_id: int, now: int) -> None:
        job.flows.discard(flow_id)
        if job.request is not None and job.purpose == "prefix":
            job.request.fetch_flows.discard(flow_id)
        if not job.flows:
            self._tier_done(job, now)

    def _tier_failed(self, job: TierJob, why: str, now: int) -> None:
        for fid in job.flows:
            self._owner.pop(fid, None)
        job.flows.clear()
        if job.purpose == "demote":  # the block never landed
            if self.tier_blocks[job.tier].store[job.place].pop(job.block, 0) is None:
                self.tier_space[job.tier].free(job.place, job.nbytes)
            return
        e = job.engine
        self._fail(job.request, why, now)
        if e is not None:
            self._kick(e, now)

    def _tier_release(self, r: Request) -> None:
        """``r`` is settled: give back what it holds in a lower tier."""
        e = self._engine_of_decode(r)
        if e is not None and r in e.evicted:
            e.evicted.remove(r)
        if r.offload_pending and e is not None:
            r.offload_pending = False
            e.offloading -= 1
        if r.tier_held is not None:
            tier, place, nbytes, _ = r.tier_held
            self.tier_space[tier].free(place, nbytes)
            r.tier_held = None

    def tier_stats(self) -> dict:
        """What the lower tiers hold at the end (bytes per place)."""
        return {
            tier: {str(p): u for p, u in space.used.items()}
            for tier, space in self.tier_space.items()
        }

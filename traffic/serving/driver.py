"""The disaggregated-serving driver: requests, router, prefix cache, prefill, KV transfer,
continuous-batching decode. Pure and event-driven (``traffic.driver.Driver``): every
instant is an argument, network times come back through ``on_received``.

Semantics (instants are absolute ns; ``t0`` is the run start):

- **Arrival**: request k arrives at ``t0 + arrival_ms[k]`` (a timer). A request whose
  prompt + output tokens exceed an instance's KV capacity can never be served and is
  recorded unserved at once. Otherwise the router chooses a prefill and a decode instance
  from a :class:`~traffic.serving.routers.RouterState` of the driver's own bookkeeping
  (queued/active work in KV blocks, what it assigned and what completed, cache contents),
  never from future completion times.
- **Sessions** (``traffic.serving.sessions``): a later turn of an agentic session has no
  arrival instant of its own; it arrives ``after_ns`` (the tool call) after its previous
  turn's last token, a timer set then — a closed loop, the same under the simulator and
  the live fleet. When a turn is unserved, the session's later turns never arrive: they
  are recorded unserved, with the instant the session was given up as ``arrival_ns``.
- **Prefix cache** (``traffic.serving.cache``): looked up at arrival from the chosen
  prefill instance's home server. Local hits are free; remote hits are fetched at once as
  ``cache_fetch`` messages from the holder server's first prefill instance's ranks to the
  chosen instance's ranks (KV head shards, ``shard_overlap``), 512 tokens × KV bytes per
  token per block. ``cached_tokens`` = hit blocks × 512, capped at prompt − 1 (at least
  one token is computed to produce logits). After prefill, the prompt's blocks are
  inserted on the prefill instance's home server. The cache state at arrival decides the
  hits (a block evicted while the request queues is not re-checked).
- **Prefill**: FIFO per instance, one request at a time; the queue head starts when the
  instance is free and its cache fetches have all been received. Its time is
  ``compute.prefill_time_s`` of the uncached tokens at the instance's tp.
- **KV transfer** (disaggregated): the whole prompt's KV (``kv_dtype``) from prefill
  ranks to decode ranks per ``shard_overlap``: ``kv_transfer`` (monolithic, one message
  per rank pair sent at prefill end) or ``kv_layer`` (layer_pipelined, one per layer per
  rank pair, layer l sent at prefill start + (l+1)/L × prefill time, each layer's
  messages made by a timer at that instant, so a long prompt is not one burst of
  work for the coordinator). The KV has arrived when all its messages were
  received; ``kv_transfer_ms`` = first message's send instant → last message's
  receive instant.
- **Decode**: continuous batching per instance. A request joins the batch at the next step
  start once its KV has arrived and the instance has room: each member reserves prompt +
  output tokens of KV (no preemption without ``kv_tiers``), admission is FIFO. While the
  batch is not empty, steps run back to back. A step is ``compute.decode_step_time_s`` of
  the batch's context tokens, then (tp > 1) a ring all-reduce modelled as one
  ``collective`` message per rank to the next rank of ``compute.allreduce_bytes_per_rank``
  bytes, sent at compute end; the step ends when the last of them is received (tp == 1: at
  compute end, a timer). Every member gets one token at step end; TTFT is arrival → first
  token *from the decode instance*; a request finishes after ``output_tokens`` tokens.
- **Colocated**: the prefill instances also decode; no KV messages. An instance runs
  either a prefill or a decode step, never both: when it is free it starts the queued
  prefill if it can (fetches in, KV room reserved at prefill start), else a step — so a
  prefill stalls the decode steps of its instance (vLLM's prefill-first scheduling).
- **Failures**: a failed cache fetch or KV message makes its request unserved (reason
  recorded); a failed collective ends its step without tokens and makes every request
  of that batch unserved. ``finish(now, why)`` records every open request as unserved
  with the stage it was in.
- **Network bytes per request**: its KV-transfer and cache-fetch bytes plus an equal
  share of every step's collective bytes.
- **Marks**: every message carries the DSCP of its kind (``marks.message_dscp``: one
  mark, or one per kind).
- **Ideal cache**: every routed arrival also walks a ``cache.IdealPrefixCache``
  (unbounded, never evicts), for the ideal hit rate the summary compares against.
- **Tiered KV** (``kv_tiers``, ``traffic.serving.tiers``; ``offload`` does it): a decode
  instance holds ``tp × hbm_gb`` of KV; an arrived request whose KV does not fit evicts
  members (LRU) to CXL or flash or for recompute instead of waiting, evicted members
  come back before new ones join, and prefix blocks evicted from HBM stay fetchable
  from the lower tiers.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from topologies import Fabric

from .. import compute, presets
from ..driver import Message
from ..traces import BLOCK_TOKENS
from ..workloads.kv_transfer import MODES as TRANSFERS
from ..workloads.kv_transfer import shard_overlap
from .cache import IdealPrefixCache, PrefixCachePool
from .instances import Instance, ServingError, TierMap
from .marks import message_dscp
from .offload import TIER_TIMERS, TieredDecode
from .requests import Request, requests_frame, tokens_frame
from .routers import Router, RouterState
from .sessions import chain_turns
from .tiers import KvTiers, hbm_tokens

SERVING_MODES = ("disaggregated", "colocated")  # KV crosses the fabric, or stays put
# topology_aware: a tier stays preferred while a prefill instance's KV in flight over it
# is at most this long at the tier's rate (spec key ``topology_budget_ms``).
DEFAULT_TOPOLOGY_BUDGET_MS = 50.0
# layer_pipelined: a layer's KV messages follow from the prefill's start alone, so they are
# made this long before their instant; their senders' agents then hold them, and a late
# coordinator wake-up (a 2-core VM's non-preemptible kernel work delays it by 3-20 ms)
# cannot make them late. Only a request settled within this window still sends a layer.
KV_LAYER_AHEAD_NS = 20_000_000


def blocks(tokens: int) -> int:
    return math.ceil(tokens / BLOCK_TOKENS)


@dataclass(eq=False)
class _Engine:
    """One instance's run-time state (prefill side, decode side, or both when colocated)."""

    inst: Instance
    queue: deque[Request] = field(default_factory=deque)
    prefilling: Request | None = None
    waiting: deque[Request] = field(default_factory=deque)  # KV here, not in the batch yet
    active: list[Request] = field(default_factory=list)
    assigned: list[Request] = field(default_factory=list)  # decode side, not settled
    reserved: int = 0
    step: int = 0
    batch: list[Request] | None = None
    step_flows: set[int] = field(default_factory=set)
    evicted: deque[Request] = field(default_factory=deque)  # kv_tiers: out of HBM
    offloading: int = 0  # kv_tiers: evictions whose KV is still on its way down
    recomputing: Request | None = None  # kv_tiers: its KV is being recomputed

    @property
    def busy(self) -> bool:
        return self.prefilling is not None or self.batch is not None or bool(self.recomputing)


class ServingDriver(TieredDecode):
    """A ``traffic.driver.Driver`` for one serving workload (see the module docstring)."""

    def __init__(
        self,
        *,
        fabric: Fabric,
        model: str | presets.Model,
        gpu: str | presets.GPU,
        prefill: Sequence[Instance],
        decode: Sequence[Instance],
        router: Router,
        arrivals: pd.DataFrame,
        mode: str = "disaggregated",
        transfer: str = "monolithic",
        kv_dtype: str = "fp16",
        cache: PrefixCachePool | None = None,
        tenant: str = "default",
        dscp: int | Mapping[str, int] = 0,
        first_flow_id: int = 0,
        efficiency: float = compute.DEFAULT_EFFICIENCY,
        kv_capacity_tokens: int | None = None,
        topology_budget_ms: float = DEFAULT_TOPOLOGY_BUDGET_MS,
        kv_tiers: KvTiers | None = None,
    ) -> None:
        if mode not in SERVING_MODES:
            raise ServingError(f"mode={mode!r}; allowed: {', '.join(SERVING_MODES)}")
        if transfer not in TRANSFERS:
            raise ServingError(f"transfer={transfer!r}; allowed: {', '.join(TRANSFERS)}")
        if not prefill or (mode == "disaggregated" and not decode):
            raise ServingError(f"{mode} serving needs prefill and decode instances")
        self.model, self.gpu = presets.model(model), presets.gpu(gpu)
        self.mode, self.transfer, self.kv_dtype = mode, transfer, kv_dtype
        self.colocated = mode == "colocated"
        self.router, self.cache, self.tenant = router, cache, tenant
        self.dscp = message_dscp(dscp)  # flow kind → its mark
        self.ideal_cache = IdealPrefixCache()
        self.efficiency = efficiency
        self.prefill = [_Engine(i) for i in prefill]
        self.decode = self.prefill if self.colocated else [_Engine(i) for i in decode]
        tp = self.decode[0].inst.tp
        if kv_tiers is not None and kv_capacity_tokens is None:
            bpt = self.model.kv_bytes_per_token(kv_dtype)
            kv_capacity_tokens = hbm_tokens(kv_tiers.hbm_gb, tp, bpt)
        if kv_capacity_tokens is None:
            kv_capacity_tokens = compute.kv_capacity_tokens(
                self.model, self.gpu, tp, kv_dtype=kv_dtype
            )
            if kv_capacity_tokens < 1:
                raise ServingError(
                    f"{self.model.name} weights ({self.model.params_b:g} B parameters) do not"
                    f" fit in {tp} × {self.gpu.name} HBM: no room for KV; raise tp"
                )
        self.capacity = int(kv_capacity_tokens)
        self.first_flow_id = self._next_id = first_flow_id
        self.hosts = sorted({h for e in self.prefill + self.decode for h in e.inst.hosts})
        self.tenants = [tenant]
        self._owner: dict[int, tuple[str, object]] = {}
        self._timers: list[tuple[int, int, str, object]] = []
        self._seq = 0
        self._messages: list[Message] = []
        self.requests = [
            Request(
                rid=k,
                tenant=tenant,
                arrival_ns=0,
                input_tokens=int(row.input_tokens),
                output_tokens=int(row.output_tokens),
                hash_ids=list(row.hash_ids) if isinstance(row.hash_ids, list) else [],
            )
            for k, row in enumerate(arrivals.itertuples(index=False))
        ]
        self._offsets = chain_turns(self.requests, arrivals)  # None: a later session turn
        self._arrival_offsets = sorted(o for o in self._offsets if o is not None)
        self._topology(fabric, topology_budget_ms / 1e3)
        if kv_tiers is not None:
            self._tiers_init(kv_tiers, fabric)
        self.t0_ns: int | None = None

    def _topology(self, fabric: Fabric, window_s: float) -> None:
        """Tiers between instance pairs and each tier's KV budget (topology_aware)."""
        self.tiers: tuple[tuple[int, ...], ...] = ()
        self.tier_budget: tuple[float, ...] = ()
        if self.colocated:
            return
        tiermap = TierMap(fabric)
        tiers, gbps = [], {}
        for p in self.prefill:
            row = []
            for d in self.decode:
                ov = self._overlap(p.inst, d.inst)
                t = tiermap.instance_tier(p.inst, d.inst, ov)
                row.append(t)
                rate = tiermap.instance_gbps(p.inst, d.inst, ov)
                gbps[t] = min(gbps.get(t, math.inf), rate)
            tiers.append(tuple(row))
        self.tiers = tuple(tiers)
        ranks = self.prefill[0].inst.tp
        self.tier_budget = tuple(
            gbps.get(t, math.inf) * 1e9 / 8 * ranks * window_s for t in range(3)
        )

    # ---- helpers ------------------------------------------------------------------------

    def _overlap(self, src: Instance, dst: Instance):
        return shard_overlap(self.model.kv_heads, src.tp, dst.tp)

    def number_flows_from(self, first: int) -> None:
        """Number this driver's flows from ``first`` (after a schedule's): what building it
        with ``first_flow_id=first`` gives. Only before it has sent anything: a flow id
        already handed out cannot be taken back."""
        if self._next_id != self.first_flow_id:
            raise ServingError("the driver has already numbered flows: renumber it before it runs")
        self.first_flow_id = self._next_id = first

    def _head_bytes(self, tokens: int, heads: int) -> int:
        """KV bytes of ``tokens`` tokens × ``heads`` heads for one layer."""
        elem = presets.dtype_bytes(self.kv_dtype)
        return tokens * heads * self.model.head_dim * 2 * elem

    def _send(self, kind: str, src: str, dst: str, nbytes: int, t_ns: int, owner, **kw) -> int:
        fid = self._next_id
        self._next_id += 1
        self._owner[fid] = (kind, owner)
        self._messages.append(
            Message(
                flow_id=fid,
                kind=kind,
                src=src,
                dst=dst,
                bytes=int(nbytes),
                t_ns=int(t_ns),
                tenant=self.tenant,
                dscp=self.dscp[kind],
                **kw,
            )
        )
        return fid

    def _timer(self, t_ns: int, kind: str, obj: object) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (int(t_ns), self._seq, kind, obj))

    def _flush(self) -> list[Message]:
        out, self._messages = self._messages, []
        return out

    def _fail(self, r: Request, why: str, now: int) -> None:
        if r.settled:
            return
        r.error = why
        later = r.next_turn
        while later is not None and not later.settled:  # the session's loop is broken
            later.arrival_ns = now
            later.error = f"unserved: never arrived, turn {r.turn} of its session was not served"
            later = later.next_turn
        for fid in r.fetch_flows | r.kv_flows:
            self._owner.pop(fid, None)
        r.fetch_flows.clear()
        r.kv_flows.clear()
        self._release(r)

    def _release(self, r: Request) -> None:
        e = self._engine_of_decode(r)
        if e is None:
            return
        if r.reserved:
            e.reserved -= r.need_tokens
            r.reserved = False
        for lst in (e.active, e.assigned):
            if r in lst:
                lst.remove(r)
        if self.kv_tiers is not None:
            self._tier_release(r)
        if r in e.waiting:
            e.waiting.remove(r)
        p = self._engine_of_prefill(r)
        if p is not None and r in p.queue:
            p.queue.remove(r)

    def _engine_of_prefill(self, r: Request) -> _Engine | None:
        return self.prefill[r.prefill.index] if r.prefill else None

    def _engine_of_decode(self, r: Request) -> _Engine | None:
        return self.decode[r.decode.index] if r.decode else None

    # ---- Driver interface ---------------------------------------------------------------

    def start(self, t0_ns: int) -> list[Message]:
        self.t0_ns = t0_ns
        for r, off in zip(self.requests, self._offsets, strict=True):
            if off is not None:
                r.arrival_ns = t0_ns + off
                self._timer(r.arrival_ns, "arrive", r)
        return self._flush()

    def next_timer_ns(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    def on_timer(self, now_ns: int) -> list[Message]:
        while self._timers and self._timers[0][0] <= now_ns:
            t, _, kind, obj = heapq.heappop(self._timers)
            if kind == "arrive":
                self._arrive(obj, t)
            elif kind == "prefill_end":
                self._prefill_end(obj, t)
            elif kind == "kv_layer":
                self._send_layer(*obj)
            elif kind in TIER_TIMERS:
                self._tier_timer(kind, obj, t)
            else:
                self._step_end(obj, t)
        return self._flush()

    def on_received(self, flow_id: int, t_end_ns: int) -> list[Message]:
        owner = self._owner.pop(flow_id, None)
        if owner is None:
            return []
        kind, obj = owner
        if kind == "cache_fetch":
            obj.fetch_flows.discard(flow_id)
            if not obj.fetch_flows:
                self._kick(self.prefill[obj.prefill.index], t_end_ns)
        elif kind == "tier_fetch":
            self._tier_received(obj, flow_id, t_end_ns)
        elif kind in ("kv_transfer", "kv_layer"):
            obj.kv_flows.discard(flow_id)
            obj.kv_received(flow_id, t_end_ns)
            if not obj.kv_flows and not obj.kv_layers_left:
                obj.kv_arrived, obj.kv_last_recv_ns = True, t_end_ns
                obj.stage = "waiting for decode room"
                e = self.decode[obj.decode.index]
                e.waiting.append(obj)
                self._kick(e, t_end_ns)
        else:  # collective of a step: obj is the engine
            obj.step_flows.discard(flow_id)
            if not obj.step_flows:
                self._step_end(obj, t_end_ns)
        return self._flush()

    def on_failed(self, flow_id: int, error: str, now_ns: int) -> list[Message]:
        owner = self._owner.pop(flow_id, None)
        if owner is None:
            return []
        kind, obj = owner
        why = f"{kind} message {flow_id} failed: {error}"
        if kind == "tier_fetch":
            self._tier_failed(obj, why, now_ns)
        elif kind == "collective":
            for fid in obj.step_flows:
                self._owner.pop(fid, None)
            obj.step_flows.clear()
            for r in list(obj.batch or []):
                self._fail(r, why, now_ns)
            self._end_batch(obj)
            self._kick(obj, now_ns)
        else:
            e = self._engine_of_prefill(obj)
            self._fail(obj, why, now_ns)
            if e is not None:
                self._kick(e, now_ns)
        return self._flush()

    def finished(self) -> bool:
        return all(r.settled for r in self.requests) and not self._owner

    def finish(self, now_ns: int, why: str) -> None:
        for r in self.requests:
            if not r.settled:
                if r.arrival_ns < 0:  # a session turn still waiting for its predecessor
                    r.arrival_ns = now_ns
                self._fail(r, f"unserved: {why} at {now_ns} ns while {r.stage}", now_ns)
        self._owner.clear()
        self._timers.clear()
        for e in self.prefill + self.decode:
            e.batch, e.prefilling, e.recomputing = None, None, None

    # ---- events -------------------------------------------------------------------------

    def _arrive(self, r: Request, now: int) -> None:
        if r.need_tokens > self.capacity:
            why = (
                f"unserved: needs {r.need_tokens} KV tokens (prompt + output), an instance"
                f" holds at most {self.capacity}"
            )
            self._fail(r, why, now)
            return
        p_idx, d_idx = self.router.choose(self._router_state(r))
        p, d = self.prefill[p_idx], self.decode[d_idx]
        r.prefill, r.decode = p.inst, d.inst
        r.kv_bytes = self.model.kv_bytes_per_token(self.kv_dtype) * r.input_tokens
        d.assigned.append(r)
        r.ideal_hit_blocks = self.ideal_cache.arrive(r.hash_ids)
        if self.cache is not None and r.hash_ids:
            self._lookup(r, p, now)
        r.stage = "queued for prefill"
        p.queue.append(r)
        self._kick(p, now)

    def _lookup(self, r: Request, p: _Engine, now: int) -> None:
        found = self.cache.lookup(r.hash_ids, p.inst.server)
        r.local_hit_blocks, r.remote_hit_blocks = found.local, found.remote_total
        hits = found.hits
        if self.kv_tiers is not None and self.kv_tiers.lower:
            hits += self._tier_lookup(r, p, found.hits, now)
        r.cached_tokens = min(hits * BLOCK_TOKENS, r.input_tokens - 1)
        for server, n in sorted(found.remote.items()):
            holder = next(e.inst for e in self.prefill if e.inst.server == server)
            ov = self._overlap(holder, p.inst)
            for i in range(holder.tp):
                for j in range(p.inst.tp):
                    if not ov[i, j]:
                        continue
                    size = self._head_bytes(n * BLOCK_TOKENS, int(ov[i, j])) * self.model.layers
                    fid = self._send(
                        "cache_fetch",
                        holder.hosts[i],
                        p.inst.hosts[j],
                        size,
                        now,
                        r,
                        request_id=r.rid,
                    )
                    r.fetch_flows.add(fid)
                    r.network_bytes += size
                    self.cache.bytes_fetched += size

    def _router_state(self, r: Request) -> RouterState:
        def decode_blocks(e: _Engine) -> int:
            return sum(blocks(x.context_tokens) for x in e.assigned)

        prefill_load = []
        for e in self.prefill:
            todo = list(e.queue) + ([e.prefilling] if e.prefilling else [])
            load = sum(blocks(x.uncached_tokens) for x in todo)
            if self.colocated:
                load += sum(blocks(x.context_tokens) for x in e.assigned if x not in todo)
            prefill_load.append(load)
        cached = tuple(
            self.cache.local_prefix(r.hash_ids, e.inst.server) if self.cache else 0
            for e in self.prefill
        )
        state = dict(
            request_blocks=blocks(r.input_tokens),
            prefill_load=tuple(prefill_load),
            cached_blocks=cached,
            request_kv_bytes=self.model.kv_bytes_per_token(self.kv_dtype) * r.input_tokens,
        )
        if not self.colocated:
            inflight = [[0] * len(self.decode) for _ in self.prefill]
            for e in self.decode:
                for x in e.assigned:
                    if not x.kv_arrived:
                        inflight[x.prefill.index][x.decode.index] += x.kv_bytes
            state |= dict(
                decode_load=tuple(decode_blocks(e) for e in self.decode),
                tiers=self.tiers,
                inflight_kv_bytes=tuple(tuple(row) for row in inflight),
                tier_budget_bytes=self.tier_budget,
            )
        return RouterState(**state)

    def _kick(self, e: _Engine, now: int) -> None:
        """Start the next prefill or decode step on a free instance."""
        if e.busy:
            return
        if e.queue and not e.queue[0].fetch_flows:
            head = e.queue[0]
            if not self.colocated or e.reserved + head.need_tokens <= self.capacity:
                self._start_prefill(e, head, now)
                return
        if self.kv_tiers is not None and self._tier_resume(e, now):
            return
        while e.waiting and self._admissible(e, e.waiting[0], now):
            r = e.waiting.popleft()
            if not r.reserved:
                e.reserved += r.need_tokens
                r.reserved = True
            r.stage, r.loaded_ns = "decoding", now
            e.active.append(r)
        if e.active:
            self._start_step(e, now)

    def _admissible(self, e: _Engine, r: Request, now: int) -> bool:
        """May the waiting head ``r`` join ``e``'s batch (its KV room reserved)?"""
        if self.kv_tiers is not None:
            return self._tier_admissible(e, r, now)
        return r.reserved or e.reserved + r.need_tokens <= self.capacity

    def _start_prefill(self, e: _Engine, r: Request, now: int) -> None:
        e.queue.popleft()
        e.prefilling = r
        r.stage = "in prefill"
        if self.colocated:
            e.reserved += r.need_tokens
            r.reserved = True
        dur = round(
            compute.prefill_time_s(
                self.model, self.gpu, max(r.uncached_tokens, 1), e.inst.tp, self.efficiency
            )
            * 1e9
        )
        end = now + dur
        self._timer(end, "prefill_end", e)
        if not self.colocated:
            self._send_kv(r, e.inst, now, dur)

    def _send_kv(self, r: Request, src: Instance, start: int, dur: int) -> None:
        if self.transfer != "layer_pipelined":
            self._send_layer(r, src, None, start + dur)
            return
        layers = self.model.layers
        r.kv_layers_left = layers
        for layer in range(layers):
            t = start + round(dur * (layer + 1) / layers)
            self._timer(max(start, t - KV_LAYER_AHEAD_NS), "kv_layer", (r, src, layer, t))

    def _send_layer(self, r: Request, src: Instance, layer: int | None, t: int) -> None:
        """The KV of one layer (``None``: all layers, monolithic) from ``src``'s ranks to
        the request's decode ranks, sent at ``t``."""
        if layer is not None:
            r.kv_layers_left -= 1
        if r.settled:
            return
        dst = r.decode
        ov = self._overlap(src, dst)
        kind = "kv_transfer" if layer is None else "kv_layer"
        lay = -1 if layer is None else layer
        for i in range(src.tp):
            for j in range(dst.tp):
                if not ov[i, j]:
                    continue
                size = self._head_bytes(r.input_tokens, int(ov[i, j]))
                size *= self.model.layers if layer is None else 1
                fid = self._send(
                    kind,
                    src.hosts[i],
                    dst.hosts[j],
                    size,
                    t,
                    r,
                    request_id=r.rid,
                    layer=lay,
                    chunk=lay,
                )
                r.kv_flows.add(fid)
                r.kv_sent_ns[fid] = t
                r.network_bytes += size
        if r.kv_first_send_ns is None or t < r.kv_first_send_ns:
            r.kv_first_send_ns = t

    def _prefill_end(self, e: _Engine, now: int) -> None:
        r = e.prefilling
        e.prefilling = None
        if r is None:
            return
        r.prefill_end_ns = now
        if self.cache is not None and r.hash_ids:
            self.tier_inserting, self.tier_now = r, now  # blocks it pushes out are its offload
            self.cache.insert(r.hash_ids, e.inst.server)
            self.tier_inserting = None
        if not r.settled:
            if self.colocated:
                r.kv_arrived = False
                r.stage = "waiting for decode room"
                e.waiting.append(r)
            else:
                r.stage = "KV in transfer"
        self._kick(e, now)

    def _start_step(self, e: _Engine, now: int) -> None:
        e.batch = list(e.active)
        context = sum(r.context_tokens for r in e.batch)
        dur = compute.decode_step_time_s(
            self.model,
            self.gpu,
            context,
            e.inst.tp,
            kv_dtype=self.kv_dtype,
            efficiency=self.efficiency,
            batch=len(e.batch),
        )
        end = now + round(dur * 1e9)
        tp = e.inst.tp
        if tp == 1:
            self._timer(end, "step_end", e)
            return
        size = compute.allreduce_bytes_per_rank(self.model, len(e.batch), tp)
        for rank in range(tp):
            fid = self._send(
                "collective",
                e.inst.hosts[rank],
                e.inst.hosts[(rank + 1) % tp],
                size,
                end,
                e,
                step=e.step,
                chunk=rank,
            )
            e.step_flows.add(fid)
        for r in e.batch:
            r.network_bytes += size * tp / len(e.batch)

    def _step_end(self, e: _Engine, now: int) -> None:
        for r in e.batch or []:
            if r.settled:
                continue
            r.tokens.append(now)
            if len(r.tokens) >= r.output_tokens:
                r.done, r.stage = True, "done"
                self._release(r)
                if r.next_turn is not None:  # closed loop: the tool runs, then the next turn
                    r.next_turn.arrival_ns = now + r.next_turn.after_ns
                    self._timer(r.next_turn.arrival_ns, "arrive", r.next_turn)
        self._end_batch(e)
        self._kick(e, now)

    def _end_batch(self, e: _Engine) -> None:
        e.batch = None
        e.step += 1

    # ---- results ------------------------------------------------------------------------

    def requests_table(self) -> pd.DataFrame:
        return requests_frame(self.requests)

    def tokens_table(self) -> pd.DataFrame:
        return tokens_frame(self.requests)

    def arrived(self, now_ns: int) -> int:
        """How many requests have arrived by ``now_ns`` as planned (0 before the start):
        first turns by their offsets from t0; a session's later turns, which arrive only
        once their predecessor is served, are not counted. Read from another thread
        while the run goes on (``kvfabric run --live``): one binary search."""
        if self.t0_ns is None:
            return 0
        return bisect.bisect_right(self._arrival_offsets, now_ns - self.t0_ns)

    def settled_tables(self, seen: set[int]) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """The requests and tokens tables of the requests settled (served or failed) whose
        ids are not in ``seen``, which is updated; ``None`` if there are none. Called from
        another thread while the run goes on: a settled request changes no more, and the
        list of requests is fixed when the driver is made."""
        new = [r for r in self.requests if r.rid not in seen and r.settled]
        if not new:
            return None
        seen.update(r.rid for r in new)
        return requests_frame(new), tokens_frame(new)

    def cache_stats(self) -> dict:
        """The prefix pool's statistics (events.json) and, with ``kv_tiers``, the bytes
        each lower tier still holds at the end, per place."""
        stats = {"enabled": False} if self.cache is None else self.cache.stats()
        if self.kv_tiers is not None:
            stats["kv_tiers_held_bytes"] = self.tier_stats()
        return stats

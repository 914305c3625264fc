"""One served request's record and the requests/tokens tables built from the records.

Columns beyond the results contract's that the summary's numbers come from:

- ``ideal_cached_tokens``: the prompt tokens an infinite prefix cache would have held at
  the request's arrival (``cache.IdealPrefixCache``, capped like ``cached_tokens`` at
  prompt − 1); ``ideal_hit_rate`` is their sum ÷ prompt tokens.
- ``kv_busy_ms``: how long some of the request's KV was on the way: the union of its KV
  messages' [send, receive] intervals (gaps while a pipelined prefill computes the next
  layer are not counted). ``kv_exposed_ms``: the part of that after prefill ended, which
  TTFT waits for. ``kv_hidden_fraction`` = 1 − exposed ÷ busy (monolithic: 0).
  NaN without a transfer that arrived.
- ``evicted``, ``recomputed_tokens``, ``tier_fetch_bytes_{cxl,flash}``,
  ``tier_offload_bytes_{cxl,flash}``, ``tier_stall_ms``, ``tier_hit_blocks``: what tiered
  KV storage did to the request (``offload``); 0 without ``kv_tiers``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..traces import BLOCK_TOKENS
from .instances import Instance

REQUEST_COLUMNS = [
    "request_id",
    "tenant",
    "arrival_ns",
    "prefill_host",
    "decode_host",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "kv_bytes",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "kv_transfer_ms",
    # extras
    "prefill_instance",
    "decode_instance",
    "served",
    "error",
    "local_hit_blocks",
    "remote_hit_blocks",
    "network_bytes",
    "first_token_ns",
    "tokens_emitted",
    "ideal_cached_tokens",
    "prefill_end_ns",
    "kv_busy_ms",
    "kv_exposed_ms",
    "kv_hidden_fraction",
    "session_id",
    "turn",
    # kv_tiers (``offload``)
    "evicted",
    "recomputed_tokens",
    "tier_fetch_bytes_cxl",
    "tier_fetch_bytes_flash",
    "tier_offload_bytes_cxl",
    "tier_offload_bytes_flash",
    "tier_stall_ms",
    "tier_hit_blocks",
]
TIER_COLUMNS = REQUEST_COLUMNS[REQUEST_COLUMNS.index("evicted") :]
KV_TIME_COLUMNS = ("kv_busy_ms", "kv_exposed_ms", "kv_hidden_fraction")
TOKEN_COLUMNS = ["request_id", "token_index", "t_ns", "itl_ms"]


@dataclass(eq=False)
class Request:
    rid: int
    tenant: str
    arrival_ns: int
    input_tokens: int
    output_tokens: int
    hash_ids: list[int]
    stage: str = "waiting to arrive"
    prefill: Instance | None = None
    decode: Instance | None = None
    cached_tokens: int = 0
    local_hit_blocks: int = 0
    remote_hit_blocks: int = 0
    ideal_hit_blocks: int = 0
    kv_bytes: int = 0
    network_bytes: float = 0.0
    fetch_flows: set[int] = field(default_factory=set)
    kv_flows: set[int] = field(default_factory=set)
    kv_layers_left: int = 0  # layer_pipelined: layers whose messages are not sent yet
    kv_first_send_ns: int | None = None
    kv_last_recv_ns: int | None = None
    kv_arrived: bool = False
    kv_sent_ns: dict[int, int] = field(default_factory=dict)  # KV flow id → send instant
    kv_spans: list[tuple[int, int]] = field(default_factory=list)  # received: (sent, received)
    prefill_end_ns: int | None = None
    reserved: bool = False
    tokens: list[int] = field(default_factory=list)
    done: bool = False
    error: str | None = None
    session: int = -1  # agentic sessions (``sessions``): -1 for an open-loop request
    turn: int = 0
    after_ns: int = 0  # a later turn arrives this long after its predecessor's last token
    next_turn: Request | None = field(default=None, repr=False)
    # kv_tiers (``offload``)
    loaded_ns: int = 0  # when its KV last entered its decode instance's HBM
    evicted: int = 0
    evicted_ns: int = 0
    tier_held: tuple | None = None  # (tier, place, bytes, tokens) while held below HBM
    offload_pending: bool = False
    recomputed_tokens: int = 0
    tier_fetch: dict[str, float] = field(default_factory=dict)
    tier_offload: dict[str, float] = field(default_factory=dict)
    tier_stall_ns: int = 0
    tier_hit_blocks: int = 0

    @property
    def settled(self) -> bool:
        return self.done or self.error is not None

    @property
    def context_tokens(self) -> int:
        return self.input_tokens + len(self.tokens)

    @property
    def need_tokens(self) -> int:
        """KV tokens the request holds at its longest: prompt + every output token."""
        return self.input_tokens + self.output_tokens

    @property
    def uncached_tokens(self) -> int:
        return self.input_tokens - self.cached_tokens

    def kv_received(self, flow_id: int, t_end_ns: int) -> None:
        """One of the request's KV messages arrived in full at ``t_end_ns``."""
        sent = self.kv_sent_ns.pop(flow_id, None)
        if sent is not None:
            self.kv_spans.append((sent, t_end_ns))

    def row(self) -> dict:
        ms = 1e-6
        served = self.done and self.error is None
        first = self.tokens[0] if self.tokens else None
        ttft = (first - self.arrival_ns) * ms if served and first is not None else math.nan
        e2e = (self.tokens[-1] - self.arrival_ns) * ms if served else math.nan
        n = self.output_tokens
        tpot = (e2e - ttft) / (n - 1) if served and n > 1 else math.nan
        kv = (
            (self.kv_last_recv_ns - self.kv_first_send_ns) * ms
            if self.kv_arrived and self.kv_first_send_ns is not None
            else math.nan
        )
        busy = exposed = math.nan
        if self.kv_arrived and self.kv_spans and self.prefill_end_ns is not None:
            busy_ns, exposed_ns = busy_after(self.kv_spans, self.prefill_end_ns)
            busy, exposed = busy_ns * ms, exposed_ns * ms
        ideal = min(self.ideal_hit_blocks * BLOCK_TOKENS, max(self.input_tokens - 1, 0))
        return {
            "request_id": self.rid,
            "tenant": self.tenant,
            "arrival_ns": self.arrival_ns,
            "prefill_host": self.prefill.hosts[0] if self.prefill else None,
            "decode_host": self.decode.hosts[0] if self.decode else None,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "kv_bytes": self.kv_bytes,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "e2e_ms": e2e,
            "kv_transfer_ms": kv,
            "prefill_instance": self.prefill.name if self.prefill else None,
            "decode_instance": self.decode.name if self.decode else None,
            "served": served,
            "error": self.error,
            "local_hit_blocks": self.local_hit_blocks,
            "remote_hit_blocks": self.remote_hit_blocks,
            "network_bytes": int(round(self.network_bytes)),
            "first_token_ns": first if first is not None else -1,
            "tokens_emitted": len(self.tokens),
            "ideal_cached_tokens": ideal,
            "prefill_end_ns": self.prefill_end_ns if self.prefill_end_ns is not None else -1,
            "kv_busy_ms": busy,
            "kv_exposed_ms": exposed,
            "kv_hidden_fraction": 1 - exposed / busy if busy > 0 else math.nan,
            "session_id": self.session,
            "turn": self.turn,
            "evicted": self.evicted,
            "recomputed_tokens": self.recomputed_tokens,
            "tier_fetch_bytes_cxl": int(self.tier_fetch.get("cxl", 0)),
            "tier_fetch_bytes_flash": int(self.tier_fetch.get("flash", 0)),
            "tier_offload_bytes_cxl": int(self.tier_offload.get("cxl", 0)),
            "tier_offload_bytes_flash": int(self.tier_offload.get("flash", 0)),
            "tier_stall_ms": self.tier_stall_ns * ms,
            "tier_hit_blocks": self.tier_hit_blocks,
        }


def busy_after(spans: list[tuple[int, int]], after_ns: int) -> tuple[int, int]:
    """The length of the union of ``spans`` ([start, end] instants), and the part of that
    union after ``after_ns``."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    busy = sum(end - start for start, end in merged)
    late = sum(max(0, end - max(start, after_ns)) for start, end in merged)
    return busy, late


def requests_frame(requests: list[Request]) -> pd.DataFrame:
    frame = pd.DataFrame([r.row() for r in requests], columns=REQUEST_COLUMNS)
    for col in ("ttft_ms", "tpot_ms", "e2e_ms", "kv_transfer_ms", *KV_TIME_COLUMNS):
        frame[col] = frame[col].astype(float)
    for col in ("request_id", "arrival_ns", "input_tokens", "output_tokens", "cached_tokens"):
        frame[col] = frame[col].astype("int64")
    frame["served"] = frame["served"].astype(bool)
    return frame


def tokens_frame(requests: list[Request]) -> pd.DataFrame:
    rid, idx, t = [], [], []
    for r in requests:
        rid += [r.rid] * len(r.tokens)
        idx += range(len(r.tokens))
        t += r.tokens
    t_arr = np.asarray(t, dtype=np.int64)
    itl = np.full(len(t_arr), np.nan)
    if len(t_arr):
        gaps = np.diff(t_arr) / 1e6
        later = np.asarray(idx[1:]) > 0
        itl[1:][later] = gaps[later]
    return pd.DataFrame(
        {
            "request_id": np.asarray(rid, dtype=np.int64),
            "token_index": np.asarray(idx, dtype=np.int64),
            "t_ns": t_arr,
            "itl_ms": itl,
        },
        columns=TOKEN_COLUMNS,
    )

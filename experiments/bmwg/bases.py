"""The reference fabric and workload entries the procedures' sweeps are written in.

Each builder returns a plain mapping of the spec language (``experiments/specs/KEYS.md``),
so a procedure's base spec is YAML any engineer can read with ``kvfabric bmwg show``
and run with ``kvfabric run``. The reference fabric is a two-tier spine-leaf whose
every GPU is a server (``h0`` … ``hN``), so serving pools and host lists read alike.

Message sizes follow the draft in real-equivalent bytes; the scale multiplies them, so
a payload under ``1448 / scale.bandwidth`` real bytes is one emulated packet (its
latency still counts, its throughput does not).
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from experiments.bmwg.model import Budget
from traffic.presets import MODELS

SLO_TTFT_MS, SLO_ITL_MS = 500.0, 50.0  # the draft's Appendix B values (6.2, 11.1 use them)
KV_MODEL = "llama-3.1-8b"  # CFG-A of Table 9: L 32, H_kv 8, D 128 (128 KiB/token at fp16)
MB = 1 << 20
GB = 1 << 30
MESSAGE_SIZES = (64 << 10, 256 << 10, MB, 4 * MB, 16 * MB, 64 * MB, 256 * MB, GB)


def hosts(n: int, first: int = 0) -> list[str]:
    """``n`` hosts of the spine-leaf fabric from ``h<first>``."""
    return [f"h{i}" for i in range(first, first + n)]


def spine_leaf(leaves: int = 2, hosts_per_leaf: int = 4, **params: Any) -> dict[str, Any]:
    """The reference fabric: 100 Gbit/s hosts, 400 Gbit/s uplinks, two spines."""
    fabric = {"kind": "spine_leaf", "spines": 2, "leaves": leaves, "hosts_per_leaf": hosts_per_leaf}
    return fabric | {"host_gbps": 100, "uplink_gbps": 400, "buffer_pkts": 64} | params


def base(workloads: list[dict[str, Any]], fabric: dict[str, Any] | None = None, **top: Any) -> str:
    """A procedure's base spec as YAML text (its name and duration are set per run)."""
    spec = {
        "name": "bmwg",
        "seed": 1,
        "duration_s": 10,
        "scale": {"bandwidth": 1.0e-4, "time_dilation": "auto"},  # a plan fits by slowing time
        "fabric": fabric or spine_leaf(),
        "controller": {"policy": "ecmp"},
        "workloads": workloads,
    } | top
    return yaml.safe_dump(spec, sort_keys=False)


def message(sender: str, receiver: str, size: int, rounds: int, **extra: Any) -> dict[str, Any]:
    """Back-to-back KV messages of ``size`` real bytes, one outstanding (a barrier per
    round): the draft's one-sided PUT stream, as TCP messages with completion on arrival."""
    entry = {"kind": "incast", "senders": [sender], "receiver": receiver}
    return entry | {"sru_bytes": int(size), "rounds": int(rounds), "tenant": "kv"} | extra


def streams(n: int, sender: str, receiver: str, size: int, rounds: int) -> list[dict[str, Any]]:
    """``n`` parallel message streams between one pair, each on its own persistent TCP
    connection (``lane``), opened before the traffic and kept: the draft's QPs."""
    return [message(sender, receiver, size, rounds, lane=i) for i in range(n)]


def background(load: float, **extra: Any) -> dict[str, Any]:
    """Web-search background flows at ``load`` of every host link."""
    return {"kind": "background", "load": float(load), "tenant": "background"} | extra


# per run: the agents' schedule and rows stay small enough to hold; 8.4 s of 1 MB
# messages at 100 Gbit/s (they run at line rate on persistent connections)
MAX_MESSAGES = 100_000


def rounds_for(size: int, trial_s: float, parallel: int = 1, gbps: float = 100.0) -> int:
    """Rounds of ``parallel`` × ``size`` bytes that fill ``trial_s`` at ``gbps`` (at
    most ``MAX_MESSAGES`` messages in all: small messages then stop early)."""
    per_round_s = parallel * size * 8 / (gbps * 1e9)
    return max(1, min(MAX_MESSAGES // parallel, int(trial_s / per_round_s)))


def stream_rounds(
    size: int, budget: Budget, parallel: int = 1, gbps: float = 100.0
) -> tuple[int, float | None]:
    """Rounds that fill the trial at ``gbps`` (the warm-up and the drain are the slack
    for a slower stream), and the warm-up their point needs: ``None`` (the profile's)
    unless ``MAX_MESSAGES`` ends them sooner, then the profile's share of their span at
    ``gbps`` (their shortest), so the measured part still holds the last of them."""
    rounds = rounds_for(size, budget.trial_s, parallel, gbps)
    if rounds < MAX_MESSAGES // parallel:
        return rounds, None
    span_s = rounds * parallel * size * 8 / (gbps * 1e9)
    return rounds, round(budget.warmup_s * min(1.0, span_s / budget.duration_s), 3)


def serving(
    prefill: list[int],
    decode: list[int] | None,
    rate_per_s: float,
    input_tokens: Any = 1024,
    output_tokens: Any = 128,
    **extra: Any,
) -> dict[str, Any]:
    """A disaggregated serving workload of CFG-A on the given servers (one GPU each)."""
    entry: dict[str, Any] = {
        "kind": "serving",
        "tenant": "serving",
        "model": KV_MODEL,
        "gpu": "h100",
        "mode": "disaggregated" if decode else "colocated",
        "prefill": {"servers": prefill, "tp": 1},
        "decode": {"servers": decode, "tp": 1} if decode else None,
        "router": "least_loaded",
        "transfer": "monolithic",
        "arrivals": {
            "synthetic": {
                "rate_per_s": float(rate_per_s),
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
            }
        },
        "slo": {"ttft_ms": SLO_TTFT_MS, "tpot_ms": SLO_ITL_MS},
    }
    return entry | extra


def alltoall(
    group: list[str], hidden_size: int, top_k: int, batch: int, **extra: Any
) -> dict[str, Any]:
    """MoE dispatch + combine over ``group`` (EP = its size): per pair
    ``batch × top_k × hidden_size × 2 / EP`` bytes, T_dispatch of the draft."""
    entry = {"kind": "moe_alltoall", "tenant": "ep", "group": group, "model": None}
    entry |= {"hidden_size": hidden_size, "top_k": top_k, "tokens_per_step": batch}
    return entry | {"steps": 50, "step_interval_ms": 20.0} | extra


def kv_stream(
    prefill: list[str],
    decode: list[str],
    load: float,
    seconds: float,
    tokens: int = 4096,
    gbps: float = 100.0,
    **extra: Any,
) -> dict[str, Any]:
    """KV transfers of ``tokens``-token prompts (CFG-A: 512 MB at 4096) arriving at the
    Poisson rate that offers ``load`` of one ``gbps`` host link, for ``seconds``."""
    kv_bytes = MODELS[KV_MODEL].kv_bytes_per_token("fp16") * tokens
    rate = load * gbps * 1e9 / 8 / kv_bytes
    n = max(1, min(2000, math.ceil(rate * seconds)))
    entry = {"kind": "kv_transfer", "tenant": "kv", "model": KV_MODEL}
    entry |= {"prefill_hosts": prefill, "decode_hosts": decode, "prefill_tp": 1, "decode_tp": 1}
    return entry | {"tokens": [tokens] * n, "rate_rps": round(rate, 3)} | extra


def size_label(size: int) -> str:
    for unit, div in (("GB", GB), ("MB", MB), ("KB", 1 << 10)):
        if size >= div:
            return f"{size // div}{unit}"
    return f"{size}B"

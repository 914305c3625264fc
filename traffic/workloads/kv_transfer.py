"""KV-cache transfer from prefill GPUs to decode GPUs (disaggregated serving).

After prefill, the prompt's KV cache (``Model.kv_bytes_per_token`` × tokens)
moves to the decode instance. With tensor parallelism the cache is sharded by
KV head: prefill rank i of p holds heads [i·H/p, (i+1)·H/p), decode rank j of d
holds [j·H/d, (j+1)·H/d), and rank i sends rank j exactly the heads both own
(as in vLLM/Mooncake-style disaggregated KV transfer). Rank pairs that share
no head exchange nothing. Summed over all messages the bytes are exactly the
KV cache.

- ``monolithic``: one ``kv_transfer`` message per rank pair, sent when the
  whole prefill has finished.
- ``layer_pipelined``: one ``kv_layer`` message per rank pair and layer, each
  sent when that layer's prefill compute finishes (the prefill time split
  evenly across layers), so the transfer overlaps the compute.

Prefill time is ``traffic.compute.prefill_time_s`` (profiled or roofline). Each
prefill instance serves its requests first come, first served.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .. import compute
from ..presets import Model, PresetError, dtype_bytes
from ..presets import gpu as lookup_gpu
from .schedule import (
    WorkloadError,
    build_schedule,
    check_hosts,
    check_positive,
    ms_to_ns,
    resolve_model,
    rng_from,
)

MODES = ("monolithic", "layer_pipelined")


def shard_overlap(kv_heads: int, prefill_tp: int, decode_tp: int) -> np.ndarray:
    """Heads shared by prefill rank i and decode rank j, as a (p, d) matrix."""
    for name, tp in (("prefill_tp", prefill_tp), ("decode_tp", decode_tp)):
        check_positive(name, tp, integer=True)
        if kv_heads % tp:
            raise WorkloadError(f"{name}={tp} does not divide the model's {kv_heads} KV heads")
    p_lo = np.arange(prefill_tp)[:, None] * (kv_heads // prefill_tp)
    d_lo = np.arange(decode_tp)[None, :] * (kv_heads // decode_tp)
    lo = np.maximum(p_lo, d_lo)
    hi = np.minimum(p_lo + kv_heads // prefill_tp, d_lo + kv_heads // decode_tp)
    return np.maximum(hi - lo, 0)


def _instances(name: str, host_list: Sequence[str], tp: int | None) -> tuple[list, int]:
    host_list = list(host_list)
    if not host_list:
        raise WorkloadError(f"{name} is empty; give the GPUs of at least one instance")
    tp = len(host_list) if tp is None else tp
    check_positive(f"{name} tp", tp, integer=True)
    if len(host_list) % tp:
        raise WorkloadError(f"{name} has {len(host_list)} hosts, not a multiple of tp={tp}")
    return [host_list[i : i + tp] for i in range(0, len(host_list), tp)], tp


def kv_transfer(
    prefill_hosts: Sequence[str],
    decode_hosts: Sequence[str],
    model: str | Model,
    tokens: int | Sequence[int],
    *,
    mode: str = "monolithic",
    dtype: str = "fp16",
    prefill_tp: int | None = None,
    decode_tp: int | None = None,
    gpu: str = "h100",
    efficiency: float = compute.DEFAULT_EFFICIENCY,
    rate_rps: float | None = None,
    hosts: Sequence[str] | None = None,
    seed: int | np.random.Generator = 0,
    start_ms: float = 0.0,
    tenant: str = "default",
    dscp: int = 0,
    first_flow_id: int = 0,
    first_request_id: int = 0,
) -> pd.DataFrame:
    """The KV transfers of one request per entry of ``tokens``.

    - ``prefill_hosts`` / ``decode_hosts``: GPUs of the prefill and decode
      instances, ``*_tp`` consecutive hosts per instance (rank order). The two
      lists must not share a host. Request k uses prefill instance
      k mod (#prefill instances) and decode instance k mod (#decode instances).
    - ``model``: model preset name (``traffic.presets.MODELS``).
    - ``tokens``: prompt tokens per request (an int is one request).
    - ``mode``: ``monolithic`` (default) or ``layer_pipelined``.
    - ``dtype``: KV-cache element type, ``fp16`` (default) or ``int8`` (also
      ``bf16``, ``fp8``, ``fp32``).
    - ``prefill_tp`` / ``decode_tp``: tensor-parallel degree; default: the
      whole host list is one instance. Must divide the model's KV heads.
    - ``gpu``: GPU preset for the prefill time (default ``h100``).
    - ``efficiency``: fraction of peak of the analytic compute terms (default 0.5).
    - ``rate_rps``: Poisson request arrivals at this mean rate (seeded);
      default ``None``: all requests arrive at the start and queue.
    - ``hosts``: the fabric's hosts, to reject unknown names (optional).
    - ``seed``: seed or ``numpy.random.Generator`` (arrivals only).
    - ``start_ms``: arrival time of the first request (rate_rps None) or of
      the arrival process's origin.
    - ``tenant``, ``dscp``, ``first_flow_id``; ``first_request_id`` numbers
      the requests.
    """
    rng = rng_from(seed)
    m = resolve_model(model)
    if mode not in MODES:
        raise WorkloadError(f"mode={mode!r}; allowed: {', '.join(MODES)}")
    try:
        elem = dtype_bytes(dtype)
        lookup_gpu(gpu)
    except PresetError as exc:
        raise WorkloadError(str(exc)) from None
    token_list = [tokens] if isinstance(tokens, (int, np.integer)) else list(tokens)
    if not token_list:
        raise WorkloadError("tokens is empty; give at least one request's prompt length")
    for t in token_list:
        check_positive("tokens", t, integer=True)
    if rate_rps is not None:
        check_positive("rate_rps", rate_rps)
    if not 0 < efficiency <= 1:
        raise WorkloadError(f"efficiency={efficiency}; allowed: (0, 1]")
    if start_ms < 0:
        raise WorkloadError(f"start_ms must be >= 0, got {start_ms}")
    check_hosts("prefill_hosts", list(prefill_hosts), hosts)
    check_hosts("decode_hosts", list(decode_hosts), hosts)
    shared = sorted(set(prefill_hosts) & set(decode_hosts))
    if shared:
        raise WorkloadError(
            f"hosts {shared} are both prefill and decode; a sender equals a receiver"
        )
    prefill, p = _instances("prefill_hosts", prefill_hosts, prefill_tp)
    decode, d = _instances("decode_hosts", decode_hosts, decode_tp)
    overlap = shard_overlap(m.kv_heads, p, d)
    pairs = [(i, j, int(overlap[i, j])) for i in range(p) for j in range(d) if overlap[i, j]]
    head_token_layer = m.head_dim * 2 * elem  # K and V of one head, one token, one layer

    arrivals = np.zeros(len(token_list))
    if rate_rps is not None:
        arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, size=len(token_list)))
    free_at = [0.0] * len(prefill)
    cols: dict[str, list] = {k: [] for k in ("src", "dst", "bytes", "t", "req", "layer", "chunk")}
    for k, n_tokens in enumerate(token_list):
        pi, di = k % len(prefill), k % len(decode)
        begin = max(arrivals[k], free_at[pi])
        duration = compute.prefill_time_s(m, gpu, n_tokens, tp=p, efficiency=efficiency)
        free_at[pi] = begin + duration
        layers = [None] if mode == "monolithic" else range(m.layers)
        for layer in layers:
            done = begin + duration * (1 if layer is None else (layer + 1) / m.layers)
            for i, j, heads in pairs:
                per_layer = n_tokens * heads * head_token_layer
                cols["src"].append(prefill[pi][i])
                cols["dst"].append(decode[di][j])
                cols["bytes"].append(per_layer * (m.layers if layer is None else 1))
                cols["t"].append(ms_to_ns(start_ms) + int(round(done * 1e9)))
                cols["req"].append(first_request_id + k)
                cols["layer"].append(-1 if layer is None else layer)
                cols["chunk"].append(-1 if layer is None else layer)
    n = len(cols["src"])
    return build_schedule(
        {
            "kind": ["kv_transfer" if mode == "monolithic" else "kv_layer"] * n,
            "tenant": [tenant] * n,
            "src": cols["src"],
            "dst": cols["dst"],
            "bytes": cols["bytes"],
            "t_sched_ns": cols["t"],
            "request_id": cols["req"],
            "layer": cols["layer"],
            "chunk": cols["chunk"],
            "dscp": [dscp] * n,
        },
        first_flow_id,
    )

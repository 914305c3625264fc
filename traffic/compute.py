"""Roofline compute times: the modelled half of "compute is modelled, the network is real".

Prefill is compute-bound: a forward pass costs about 2 × parameters FLOPs per
token (Kaplan et al., "Scaling Laws for Neural Language Models", 2020, §2.1);
the attention term quadratic in the prompt length is ignored, which
underestimates very long prompts. A decode step is memory-bound: every step
reads the weights once plus the batch's KV cache. ``efficiency`` is the
fraction of the roofline peak actually achieved (model FLOPs / bandwidth
utilisation); 0.5 is typical of well-tuned serving stacks and is a parameter,
not a fact.
"""

from __future__ import annotations

from . import presets
from .presets import GPU, Model, PresetError, dtype_bytes

DEFAULT_EFFICIENCY = 0.5


def _check(tp: int, efficiency: float) -> None:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise PresetError(f"tp must be a positive integer, got {tp!r}")
    if not 0 < efficiency <= 1:
        raise PresetError(f"efficiency must be in (0, 1], got {efficiency!r}")


def prefill_time_s(
    model: str | Model,
    gpu: str | GPU,
    tokens: int,
    tp: int = 1,
    efficiency: float = DEFAULT_EFFICIENCY,
) -> float:
    """Seconds to prefill ``tokens`` prompt tokens on ``tp`` GPUs in tensor parallel.

    2 × compute parameters × tokens FLOPs / (tp × peak TFLOP/s × efficiency).
    """
    _check(tp, efficiency)
    m, g = presets.model(model), presets.gpu(gpu)
    flops = 2.0 * m.compute_params_b * 1e9 * tokens
    return flops / (tp * g.tflops * 1e12 * efficiency)


def decode_step_time_s(
    model: str | Model,
    gpu: str | GPU,
    context_tokens: int,
    tp: int = 1,
    weight_dtype: str = "fp16",
    kv_dtype: str = "fp16",
    efficiency: float = DEFAULT_EFFICIENCY,
) -> float:
    """Seconds for one decode step of a batch holding ``context_tokens`` in total.

    (weight bytes + KV bytes of the batch) / (tp × HBM bandwidth × efficiency).
    """
    _check(tp, efficiency)
    m, g = presets.model(model), presets.gpu(gpu)
    weight_bytes = m.params_b * 1e9 * dtype_bytes(weight_dtype)
    kv_bytes = m.kv_bytes_per_token(kv_dtype) * context_tokens
    return (weight_bytes + kv_bytes) / (tp * g.hbm_gbps * 1e9 * efficiency)


DEFAULT_MEMORY_FRACTION = 0.9


def kv_capacity_tokens(
    model: str | Model,
    gpu: str | GPU,
    tp: int = 1,
    weight_dtype: str = "fp16",
    kv_dtype: str = "fp16",
    memory_fraction: float = DEFAULT_MEMORY_FRACTION,
) -> int:
    """KV-cache tokens an instance of ``tp`` GPUs can hold, 0 if the weights do not fit.

    (tp × HBM bytes × ``memory_fraction`` − weight bytes) / KV bytes per token.
    ``memory_fraction`` is the share of HBM a serving engine claims (vLLM's
    ``gpu_memory_utilization``, default 0.9); activations and the rest are ignored.
    """
    _check(tp, 1.0)
    if not 0 < memory_fraction <= 1:
        raise PresetError(f"memory_fraction must be in (0, 1], got {memory_fraction!r}")
    m, g = presets.model(model), presets.gpu(gpu)
    free = tp * g.hbm_gb * 1e9 * memory_fraction - m.params_b * 1e9 * dtype_bytes(weight_dtype)
    return max(int(free // m.kv_bytes_per_token(kv_dtype)), 0)


def allreduce_bytes_per_rank(model: str | Model, batch: int, tp: int, dtype: str = "fp16") -> int:
    """Bytes each rank sends in one decode step's tensor-parallel all-reduces (ring).

    A step all-reduces the batch's activations (batch × hidden size × dtype bytes) twice
    per layer (after attention and after the MLP); a ring all-reduce of S bytes sends
    2(tp − 1)/tp × S from every rank. 0 when tp == 1.
    """
    _check(tp, 1.0)
    m = presets.model(model)
    step_bytes = batch * m.hidden_size * dtype_bytes(dtype) * 2 * m.layers
    return round(2 * (tp - 1) / tp * step_bytes)

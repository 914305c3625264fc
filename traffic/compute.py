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

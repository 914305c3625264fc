"""Compute times: the modelled half of "compute is modelled, the network is real".

Two models; :func:`model_source` names the one a (model, GPU[, tp]) gets, and every
public function here uses it:

- **profiled** (a profile for the model, or for one of identical layer shapes, on
  that GPU at that tp exists in ``traffic/data/vidur_profiles.json``, see
  ``traffic.profiles`` and :func:`profiled_as`): a step is *linear* + *attention* +
  *collective*.

  - linear: the measured linear-operator sum at the step's token count (prompt
    tokens for a prefill, batch size for a decode step), interpolated linearly
    between the profiled token counts and, beyond the last, scaled in proportion to
    the tokens. It already reads the weights, so weights are not added again.
  - attention, prefill: the FLOPs of causal attention over the prompt,
    4 × attention heads × head dim × layers × n(n + 1)/2 (QKᵀ and PV over the
    n(n + 1)/2 query-key pairs), at ``efficiency`` × the GPU's peak over tp GPUs.
  - attention, decode: the batch's KV cache read once, KV bytes per token ×
    context tokens, at ``efficiency`` × the HBM bandwidth over tp GPUs.
  - collective, prefill only: 2 all-reduces per layer of tokens × hidden × 2 bytes,
    each latency + bytes / rate from the profiled in-node all-reduce of that GPU and
    tp. The emulation does not send prefill's collectives, so they are compute
    time; a decode step's all-reduce *is* sent as packets by the serving driver, so
    it is not added here.

  ``efficiency`` applies to the analytic terms only; the source's attention
  profiles were not available to fit it, so it stays a stated parameter.
- **roofline** (anything else, e.g. Llama-3-8B on H100, any H200, tp 16, fp8 weights):
  prefill is compute-bound, 2 × parameters FLOPs per token (Kaplan et al.,
  "Scaling Laws for Neural Language Models", 2020, §2.1) with the quadratic
  attention term ignored; a decode step is memory-bound, the weights once plus the
  batch's KV cache. ``efficiency`` is the fraction of the peak achieved (0.5 is
  typical of well-tuned serving stacks and is a parameter, not a fact).

Both ignore chunked prefill, prefix-cached context a prefill attends to, and what
else shares the batch.
"""

from __future__ import annotations

import bisect
import json
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import presets
from .presets import GPU, Model, PresetError, dtype_bytes

DEFAULT_EFFICIENCY = 0.5
PROFILE_TABLE = Path(__file__).resolve().parent / "data" / "vidur_profiles.json"
PROFILED_DTYPES = ("fp16", "bf16")  # the dtype the profiles ran at


@dataclass(frozen=True)
class LinearProfile:
    """Measured linear-operator time (seconds) of one (model, GPU, tp) by token count."""

    tokens: tuple[int, ...]
    seconds: tuple[float, ...]

    def at(self, tokens: int) -> float:
        """Linear interpolation between profiled counts; proportional beyond the last."""
        if tokens >= self.tokens[-1]:
            return self.seconds[-1] * tokens / self.tokens[-1]
        if tokens <= self.tokens[0]:
            return self.seconds[0]
        i = bisect.bisect_left(self.tokens, tokens)
        n0, n1 = self.tokens[i - 1], self.tokens[i]
        t0, t1 = self.seconds[i - 1], self.seconds[i]
        return t0 + (t1 - t0) * (tokens - n0) / (n1 - n0)


@dataclass(frozen=True)
class StepTime:
    """One step's seconds by part, and the model that produced them."""

    linear_s: float
    attention_s: float
    collective_s: float
    compute_model: str  # "profiled" | "roofline"
    profiled_as: str | None = None  # the model whose profile gave the linear part

    @property
    def total_s(self) -> float:
        return self.linear_s + self.attention_s + self.collective_s


@cache
def _table() -> dict:
    return json.loads(PROFILE_TABLE.read_text())


@cache
def linear_profile(model: str, gpu: str, tp: int) -> LinearProfile | None:
    """The profiled linear-operator times of a (model, GPU, tp), ``None`` if not profiled."""
    for s in _table()["linear"]:
        if (s["model"], s["gpu"], s["tp"]) == (model, gpu, tp):
            return LinearProfile(tuple(s["tokens"]), tuple(ms / 1e3 for ms in s["ms"]))
    return None


@cache
def _allreduce_fit(gpu: str, tp: int) -> tuple[float, float] | None:
    for f in _table()["allreduce"]:
        if (f["gpu"], f["tp"]) == (gpu, tp):
            return f["latency_us"] * 1e-6, f["gbytes_per_s"] * 1e9
    return None


def layer_shape(m: Model) -> tuple:
    """What a linear-operator profile depends on: layers and every projection's width."""
    return (
        m.layers,
        m.attention_heads,
        m.kv_heads,
        m.head_dim,
        m.hidden_size,
        m.intermediate_size,
        m.is_moe,
    )


def profiled_as(model: str | Model, gpu: str | GPU, tp: int | None = None) -> str | None:
    """The profiled model whose linear operators ``model`` uses on ``gpu`` (at ``tp``, or
    at some tp when ``None``): its own, else one of identical layer shapes (Llama-3-70B
    uses Llama-2-70B's H100 profile; the two agree within a few % where both exist);
    ``None`` when no profile applies."""
    return _profiled_as(presets.model(model), presets.gpu(gpu).name, tp)


@cache  # on every serving step's path
def _profiled_as(m: Model, g: str, tp: int | None) -> str | None:
    profiled = {(s["model"], s["tp"]) for s in _table()["linear"] if s["gpu"] == g}
    if tp is not None and tp > 1 and _allreduce_fit(g, tp) is None:
        return None
    candidates = [m.name] + sorted(
        name
        for name, _ in profiled
        if name != m.name and layer_shape(presets.model(name)) == layer_shape(m)
    )
    for name in candidates:
        if any(n == name and (tp is None or t == tp) for n, t in profiled):
            return name
    return None


def model_source(model: str | Model, gpu: str | GPU, tp: int | None = None) -> str:
    """``"profiled"`` if step times of ``model`` on ``gpu`` (at ``tp``, or at any tp when
    ``None``) come from measured profiles (:func:`profiled_as`), else ``"roofline"``."""
    return "roofline" if profiled_as(model, gpu, tp) is None else "profiled"


def profile_source() -> dict[str, str]:
    """Where the profile table came from: source URL, commit and licence."""
    t = _table()
    return {"source": t["source"], "commit": t["commit"], "licence": t["licence"]}


def provenance(model: str | Model, gpu: str | GPU, tps: Iterable[int]) -> dict:
    """What a run's ``env.json`` and report should say about its compute times, for
    instances of the given tensor-parallel degrees: ``compute_model`` is ``"profiled"``
    only if every tp is (one roofline instance makes the run's numbers partly
    roofline), ``by_tp`` the model of each, ``profiled_as`` the profile each borrowed
    from (``None`` for roofline), ``profile`` the table's source, commit and licence
    (``None`` if nothing is profiled)."""
    by_tp = {tp: model_source(model, gpu, tp) for tp in sorted(set(tps))}
    values = set(by_tp.values())
    return {
        "compute_model": "profiled" if values == {"profiled"} else "roofline",
        "by_tp": by_tp,
        "profiled_as": {tp: profiled_as(model, gpu, tp) for tp in by_tp},
        "profile": profile_source() if "profiled" in values else None,
    }


def _profiled(m: Model, g: GPU, tp: int, weight_dtype: str = "fp16") -> bool:
    return weight_dtype.lower() in PROFILED_DTYPES and model_source(m, g, tp) == "profiled"


def causal_attention_flops(model: str | Model, tokens: int) -> float:
    """FLOPs of causal self-attention (QKᵀ and PV) over a prompt of ``tokens``, all layers."""
    m = presets.model(model)
    heads = m.attention_heads if m.attention_heads is not None else m.hidden_size // m.head_dim
    return 4.0 * heads * m.head_dim * m.layers * tokens * (tokens + 1) / 2


def _check(tp: int, efficiency: float) -> None:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise PresetError(f"tp must be a positive integer, got {tp!r}")
    if not 0 < efficiency <= 1:
        raise PresetError(f"efficiency must be in (0, 1], got {efficiency!r}")


def _check_tokens(name: str, value: float, minimum: int) -> None:
    # numbers.Real: token counts often arrive as numpy integers from a pandas table
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= minimum:
        raise PresetError(f"{name} must be a number >= {minimum}, got {value!r}")


def prefill_step(
    model: str | Model,
    gpu: str | GPU,
    tokens: int,
    tp: int = 1,
    efficiency: float = DEFAULT_EFFICIENCY,
    *,
    roofline: bool = False,
) -> StepTime:
    """A prefill of ``tokens`` prompt tokens on ``tp`` GPUs, by part (module docstring);
    ``roofline`` forces the roofline even where a profile exists."""
    _check(tp, efficiency)
    _check_tokens("tokens", tokens, 1)
    m, g = presets.model(model), presets.gpu(gpu)
    peak = tp * g.tflops * 1e12 * efficiency
    if roofline or not _profiled(m, g, tp):
        return StepTime(2.0 * m.compute_params_b * 1e9 * tokens / peak, 0.0, 0.0, "roofline")
    source = profiled_as(m, g, tp)
    linear = linear_profile(source, g.name, tp).at(tokens)
    attention = causal_attention_flops(m, tokens) / peak
    collective = 0.0
    if tp > 1:
        latency, rate = _allreduce_fit(g.name, tp)
        collective = 2 * m.layers * (latency + tokens * m.hidden_size * 2 / rate)
    return StepTime(linear, attention, collective, "profiled", source)


def prefill_time_s(
    model: str | Model,
    gpu: str | GPU,
    tokens: int,
    tp: int = 1,
    efficiency: float = DEFAULT_EFFICIENCY,
) -> float:
    """Seconds to prefill ``tokens`` prompt tokens on ``tp`` GPUs in tensor parallel.

    Profiled: linear + causal attention + prefill's TP all-reduces; roofline:
    2 × compute parameters × tokens FLOPs / (tp × peak TFLOP/s × efficiency).
    """
    return prefill_step(model, gpu, tokens, tp, efficiency).total_s


def decode_step(
    model: str | Model,
    gpu: str | GPU,
    context_tokens: int,
    tp: int = 1,
    weight_dtype: str = "fp16",
    kv_dtype: str = "fp16",
    efficiency: float = DEFAULT_EFFICIENCY,
    batch: int = 1,
    *,
    roofline: bool = False,
) -> StepTime:
    """One decode step of ``batch`` sequences holding ``context_tokens`` in total, by part;
    ``roofline`` forces the roofline even where a profile exists.

    The all-reduce is not in it (the serving driver sends it as packets).
    """
    _check(tp, efficiency)
    _check_tokens("context_tokens", context_tokens, 0)
    _check_tokens("batch", batch, 1)
    m, g = presets.model(model), presets.gpu(gpu)
    bandwidth = tp * g.hbm_gbps * 1e9 * efficiency
    kv_read = m.kv_bytes_per_token(kv_dtype) * context_tokens / bandwidth
    if roofline or not _profiled(m, g, tp, weight_dtype):
        weights = m.params_b * 1e9 * dtype_bytes(weight_dtype) / bandwidth
        return StepTime(weights, kv_read, 0.0, "roofline")
    source = profiled_as(m, g, tp)
    linear = linear_profile(source, g.name, tp).at(batch)
    return StepTime(linear, kv_read, 0.0, "profiled", source)


def decode_step_time_s(
    model: str | Model,
    gpu: str | GPU,
    context_tokens: int,
    tp: int = 1,
    weight_dtype: str = "fp16",
    kv_dtype: str = "fp16",
    efficiency: float = DEFAULT_EFFICIENCY,
    batch: int = 1,
) -> float:
    """Seconds for one decode step of ``batch`` sequences holding ``context_tokens`` in total.

    Profiled: linear operators at ``batch`` tokens + the KV read; roofline:
    (weight bytes + KV bytes of the batch) / (tp × HBM bandwidth × efficiency), which
    does not depend on ``batch``.
    """
    return decode_step(
        model, gpu, context_tokens, tp, weight_dtype, kv_dtype, efficiency, batch
    ).total_s


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

"""Model and GPU presets: the numbers that turn tokens into bytes and seconds.

Every workload that moves a KV cache or an activation derives its bytes from a
``Model`` and every compute wait from a ``GPU``, so these are the only place the
numbers live. Sources (architecture from each model's published ``config.json``
on Hugging Face; GPU figures from NVIDIA's datasheets, dense, i.e. without
structured sparsity):

- Llama 3 8B / 70B / 405B: Meta, "The Llama 3 Herd of Models" (2024), Table 3,
  and ``meta-llama/Meta-Llama-3-*`` config.json (grouped-query attention with
  8 KV heads of dimension 128; 8,192 tokens of context). Llama 3.1 8B / 70B
  (``meta-llama/Llama-3.1-*``) have the same shapes and 131,072 tokens of context, as
  405B (released only as 3.1) does: the agentic presets need that context.
- Qwen2.5 14B 1M (``Qwen/Qwen2.5-14B-Instruct-1M`` config.json): 1,010,000 tokens
  of context, for a long-document call of hundreds of pages.
- Llama 2 7B / 70B, Code Llama 34B (``meta-llama/Llama-2-*-hf``,
  ``codellama/CodeLlama-34b-Instruct-hf``), Qwen 72B (``Qwen/Qwen-72B``),
  InternLM 20B (``internlm/internlm-20b``) and Phi-2 (``microsoft/phi-2``):
  each config.json; these are the models Vidur's published operator profiles
  (``traffic/data/README.md``) were measured at, and the profile table's
  generator refuses a profile whose heads, hidden or MLP size differ from the
  preset's.
- Mixtral 8x7B: Jiang et al., "Mixtral of Experts" (2024), and
  ``mistralai/Mixtral-8x7B-v0.1`` config.json (8 experts, top-2 routing,
  46.7 B parameters of which 12.9 B are active per token).
- A100 SXM4 80 GB: NVIDIA A100 datasheet (312 TFLOP/s dense FP16/BF16 tensor,
  2,039 GB/s HBM2e).
- H100 SXM5 80 GB: NVIDIA H100 datasheet (989 TFLOP/s dense FP16/BF16 tensor,
  3.35 TB/s HBM3).
- H200 SXM 141 GB: NVIDIA H200 datasheet (same compute as H100 SXM,
  4.8 TB/s HBM3e).
"""

from __future__ import annotations

from dataclasses import dataclass


class PresetError(ValueError):
    """An unknown model, GPU or dtype name, or a value a preset cannot use."""


# Bytes per stored element. int8/fp8 are the quantised KV-cache formats.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype``; a ``PresetError`` lists the known ones."""
    try:
        return DTYPE_BYTES[dtype.lower()]
    except (KeyError, AttributeError):
        raise PresetError(
            f"unknown dtype {dtype!r}; known dtypes: {', '.join(DTYPE_BYTES)}"
        ) from None


@dataclass(frozen=True)
class Model:
    """A transformer's shape, enough to size its KV cache and its activations.

    ``params_b`` is the total parameter count in billions; ``intermediate_size`` is
    the MLP's inner width (per expert for a mixture of experts); for a mixture of
    experts ``active_params_b`` is what one token actually multiplies through
    (it sets the compute), ``experts``/``top_k`` set the all-to-all fan-out.
    ``max_context_tokens`` is its config's ``max_position_embeddings``: a session whose
    context outgrows it is refused.
    """

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    params_b: float
    attention_heads: int | None = None
    experts: int | None = None
    top_k: int | None = None
    active_params_b: float | None = None
    intermediate_size: int | None = None
    max_context_tokens: int | None = None  # the longest prompt + output it was released for

    @property
    def is_moe(self) -> bool:
        return self.experts is not None

    @property
    def compute_params_b(self) -> float:
        """Parameters a token passes through: active ones for MoE, all otherwise."""
        return self.active_params_b if self.active_params_b is not None else self.params_b

    def kv_bytes_per_token(self, dtype: str = "fp16") -> int:
        """K and V for every layer and KV head: layers × kv_heads × head_dim × 2 × bytes."""
        return self.layers * self.kv_heads * self.head_dim * 2 * dtype_bytes(dtype)


@dataclass(frozen=True)
class GPU:
    """A GPU's roofline: dense fp16/bf16 tensor TFLOP/s, HBM bandwidth and size."""

    name: str
    tflops: float
    hbm_gbps: float  # GB/s (10^9 bytes per second), as datasheets quote it
    hbm_gb: float


MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model(
            "llama-3-8b",
            32,
            8,
            128,
            4096,
            8.03,
            attention_heads=32,
            intermediate_size=14336,
            max_context_tokens=8192,
        ),
        Model(
            "llama-3-70b",
            80,
            8,
            128,
            8192,
            70.6,
            attention_heads=64,
            intermediate_size=28672,
            max_context_tokens=8192,
        ),
        Model(
            "llama-3-405b",
            126,
            8,
            128,
            16384,
            405.0,
            attention_heads=128,
            intermediate_size=53248,
            max_context_tokens=131072,
        ),
        Model(
            "llama-3.1-8b",
            32,
            8,
            128,
            4096,
            8.03,
            attention_heads=32,
            intermediate_size=14336,
            max_context_tokens=131072,
        ),
        Model(
            "llama-3.1-70b",
            80,
            8,
            128,
            8192,
            70.6,
            attention_heads=64,
            intermediate_size=28672,
            max_context_tokens=131072,
        ),
        Model(
            "mixtral-8x7b",
            32,
            8,
            128,
            4096,
            46.7,
            attention_heads=32,
            experts=8,
            top_k=2,
            active_params_b=12.9,
            intermediate_size=14336,
            max_context_tokens=32768,
        ),
        Model(
            "llama-2-7b",
            32,
            32,
            128,
            4096,
            6.74,
            attention_heads=32,
            intermediate_size=11008,
            max_context_tokens=4096,
        ),
        Model(
            "llama-2-70b",
            80,
            8,
            128,
            8192,
            69.0,
            attention_heads=64,
            intermediate_size=28672,
            max_context_tokens=4096,
        ),
        Model(
            "codellama-34b",
            48,
            8,
            128,
            8192,
            33.7,
            attention_heads=64,
            intermediate_size=22016,
            max_context_tokens=16384,
        ),
        Model(
            "qwen-72b",
            80,
            64,
            128,
            8192,
            72.3,
            attention_heads=64,
            intermediate_size=24576,
            max_context_tokens=32768,
        ),
        Model(
            "qwen2.5-14b-1m",
            48,
            8,
            128,
            5120,
            14.7,
            attention_heads=40,
            intermediate_size=13824,
            max_context_tokens=1010000,
        ),
        Model(
            "internlm-20b",
            60,
            40,
            128,
            5120,
            20.1,
            attention_heads=40,
            intermediate_size=13824,
            max_context_tokens=16384,
        ),
        Model(
            "phi-2",
            32,
            32,
            80,
            2560,
            2.78,
            attention_heads=32,
            intermediate_size=10240,
            max_context_tokens=2048,
        ),
    )
}

GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU("a100", tflops=312.0, hbm_gbps=2039.0, hbm_gb=80.0),
        GPU("h100", tflops=989.0, hbm_gbps=3350.0, hbm_gb=80.0),
        GPU("h200", tflops=989.0, hbm_gbps=4800.0, hbm_gb=141.0),
    )
}


def model(name: str | Model) -> Model:
    """The model preset called ``name`` (case-insensitive); a ``Model`` passes through."""
    if isinstance(name, Model):
        return name
    found = MODELS.get(str(name).lower())
    if found is None:
        raise PresetError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    return found


def gpu(name: str | GPU) -> GPU:
    """The GPU preset called ``name`` (case-insensitive); a ``GPU`` passes through."""
    if isinstance(name, GPU):
        return name
    found = GPUS.get(str(name).lower())
    if found is None:
        raise PresetError(f"unknown GPU {name!r}; known GPUs: {', '.join(GPUS)}")
    return found


_lookup_model = model  # kv_calc's parameter is called ``model``, as users say it


def kv_calc(model: str | Model, tokens: int, dtype: str = "fp16", link_gbps: float = 400.0) -> dict:
    """KV-cache size of ``tokens`` tokens and its wire time on a ``link_gbps`` link.

    ``link_gbps`` is the real (unscaled) link rate in Gbit/s; the time is pure
    serialisation, no protocol overhead, so it is a lower bound.
    """
    m = _lookup_model(model)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        raise PresetError(f"tokens must be a positive integer, got {tokens!r}")
    if not link_gbps > 0:
        raise PresetError(f"link_gbps must be positive, got {link_gbps!r}")
    per_token = m.kv_bytes_per_token(dtype)
    total = per_token * tokens
    return {
        "model": m.name,
        "dtype": dtype.lower(),
        "tokens": tokens,
        "per_token_bytes": per_token,
        "total_bytes": total,
        "link_gbps": float(link_gbps),
        "transfer_s": total * 8 / (link_gbps * 1e9),
    }


def format_kv_calc(result: dict) -> str:
    """A small plain-text table of a ``kv_calc`` result, for the CLI."""
    total = result["total_bytes"]
    rows = [
        ("model", result["model"]),
        ("dtype", result["dtype"]),
        ("tokens", f"{result['tokens']:,}"),
        ("KV bytes per token", f"{result['per_token_bytes']:,}"),
        ("KV bytes total", f"{total:,} ({total / 1e9:.3f} GB)"),
        (f"transfer at {result['link_gbps']:g} Gbit/s", f"{result['transfer_s'] * 1e3:.3f} ms"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

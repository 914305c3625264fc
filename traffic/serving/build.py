"""A :class:`ServingDriver` from the ``serving`` workload of a run's configuration (a
``ServingWorkload`` of ``experiments.spec.config``, read by attribute: ``traffic`` does not
import ``experiments``). Every field is present, its default filled in by the spec's one
declaration of it (``experiments.spec.serving``), and the spec's rules (a decode pool in
disaggregated mode, pools that share no GPU, a tp that fits) were checked there, so none
is restated here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from topologies import Fabric

from .. import presets
from ..traces import read_trace, synthetic_arrivals
from .cache import PrefixCachePool
from .driver import ServingDriver
from .instances import ServingError, check_disjoint, make_instances
from .marks import MESSAGE_KINDS
from .routers import make_router, router_rng
from .sessions import SessionError, session_arrivals
from .tiers import KvTiers, hbm_tokens, kv_tiers


class PoolSection(Protocol):
    """A ``Pool`` of the configuration: a prefill or decode pool."""

    servers: tuple[int, ...]
    gpus: tuple[int, ...] | Mapping[int, tuple[int, ...]]
    tp: int


class ServingSection(Protocol):
    """What :func:`build_serving` reads of a ``ServingWorkload`` of the configuration."""

    kind: str
    model: str
    gpu: str
    mode: str
    prefill: PoolSection
    decode: PoolSection | None
    router: str
    router_weight: float
    topology_budget_ms: float
    transfer: str
    kv_dtype: str
    prefix_cache: Any  # PrefixCache: enabled, capacity_blocks, shared
    kv_tiers: Any  # KvTiers | None: hbm_gb, cxl, flash
    arrivals: Any  # TraceArrivals | SyntheticArrivals | SessionsArrivals
    tenant: str
    dscp: Any  # int, or ServingDscp: a mark per message kind


def _given(section: Any) -> dict[str, Any]:
    """A section's fields as keyword arguments, those left unset (None) out."""
    return {k: v for k, v in vars(section).items() if v is not None}


def read_arrivals(
    arrivals: Any,
    seed: int,
    base_dir: Path | None,
    model: presets.Model | None = None,
) -> pd.DataFrame:
    """The arrivals table of a ``TraceArrivals`` (``trace``, ``format``, ...), a
    ``SyntheticArrivals`` (``synthetic``) or a ``SessionsArrivals`` (``sessions``) of the
    configuration; sessions are held to ``model``'s context limit."""
    if getattr(arrivals, "synthetic", None) is not None:
        return synthetic_arrivals(np.random.default_rng(seed), **_given(arrivals.synthetic))
    if getattr(arrivals, "sessions", None) is not None:
        opts = _given(arrivals.sessions)
        if model is not None:
            opts |= {"max_context_tokens": model.max_context_tokens, "model": model.name}
        try:
            return session_arrivals(np.random.default_rng(seed), **opts)
        except SessionError as exc:
            raise ServingError(f"arrivals.sessions.{exc.key}: {exc}") from None
    path = Path(arrivals.trace).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    options = {
        k: getattr(arrivals, k)
        for k in ("limit", "speedup", "start_s", "window_s", "token_scale")
        if getattr(arrivals, k) is not None
    }
    return read_trace(path, arrivals.format, **options)


def message_marks(dscp: Any) -> int | dict[str, int]:
    """A workload's ``dscp``: one mark, or a ``ServingDscp`` as {message kind: mark}."""
    if isinstance(dscp, int | Mapping):
        return dscp
    return {kind: getattr(dscp, kind) for kind in MESSAGE_KINDS}


def build_serving(
    workload: ServingSection,
    fabric: Fabric,
    seed: int,
    first_flow_id: int = 0,
    base_dir: Path | None = None,
    **overrides: Any,
) -> ServingDriver:
    """The driver of ``workload`` (a ``ServingWorkload`` of the run's configuration) on
    ``fabric``.

    ``overrides`` go to :class:`ServingDriver` (``efficiency``, ``kv_capacity_tokens``,
    ``topology_budget_ms``). What the spec cannot know until the fabric and the arrivals
    are at hand (unknown model, servers or GPUs the fabric lacks, a GPU in both pools, a
    tp that does not divide the KV heads or would split an instance across servers, a
    missing or malformed trace, KV tiers too small for the largest request) raises a
    ``ValueError`` subclass that says what is wrong.
    """
    if getattr(workload, "kind", None) != "serving":
        raise ServingError(f"workload kind {getattr(workload, 'kind', None)!r} is not serving")
    return _build(workload, fabric, seed, first_flow_id, base_dir, overrides)


def _build(
    workload: ServingSection,
    fabric: Fabric,
    seed: int,
    first_flow_id: int,
    base_dir: Path | None,
    overrides: dict[str, Any],
) -> ServingDriver:
    model = presets.model(workload.model)
    gpu = presets.gpu(workload.gpu)
    presets.dtype_bytes(workload.kv_dtype)
    mode = workload.mode
    pre = workload.prefill
    prefill = make_instances(fabric, "prefill", pre.servers, pre.tp, model.kv_heads, pre.gpus)
    decode = []
    if mode == "disaggregated":
        dec = workload.decode
        assert dec is not None, "disaggregated serving needs decode (the spec requires it)"
        decode = make_instances(fabric, "decode", dec.servers, dec.tp, model.kv_heads, dec.gpus)
        check_disjoint(prefill, decode)
    cache = None
    pc = workload.prefix_cache
    if pc.enabled:
        servers = sorted({i.server for i in prefill})
        cache = PrefixCachePool(servers, pc.capacity_blocks, pc.shared)
    arrivals = read_arrivals(workload.arrivals, seed, base_dir, model)
    tiers = kv_tiers(workload.kv_tiers)
    if tiers is not None:
        tp = (decode or prefill)[0].tp
        check_tiers(tiers, fabric, arrivals, model.kv_bytes_per_token(workload.kv_dtype), tp)
    return ServingDriver(
        fabric=fabric,
        model=model,
        gpu=gpu,
        prefill=prefill,
        decode=decode,
        router=make_router(workload.router, workload.router_weight, router_rng(seed)),
        arrivals=arrivals,
        mode=mode,
        transfer=workload.transfer,
        kv_dtype=workload.kv_dtype,
        cache=cache,
        tenant=workload.tenant,
        dscp=message_marks(workload.dscp),
        first_flow_id=first_flow_id,
        kv_tiers=tiers,
        **({"topology_budget_ms": workload.topology_budget_ms} | overrides),
    )


def check_tiers(
    tiers: KvTiers, fabric: Fabric, arrivals: pd.DataFrame, kv_bytes_per_token: int, tp: int
) -> None:
    """Refuse tiers that cannot hold one request's KV (prompt + output tokens, the most
    any request of ``arrivals`` needs) and a flash tier on a fabric without storage nodes,
    naming the ``kv_tiers`` key."""
    need = int((arrivals["input_tokens"] + arrivals["output_tokens"]).max()) if len(arrivals) else 0
    need_gb = need * kv_bytes_per_token / 1e9
    held = hbm_tokens(tiers.hbm_gb, tp, kv_bytes_per_token)
    if need > held:
        raise ServingError(
            f"kv_tiers.hbm_gb={tiers.hbm_gb:g} holds {held} KV tokens per instance of {tp}"
            f" GPUs, smaller than one request's KV: the largest needs {need} tokens"
            f" ({need_gb:.3g} GB); allowed: at least {need_gb / tp:.3g} GB per GPU"
        )
    for name in tiers.lower:
        capacity = getattr(tiers, name).capacity_gb
        if capacity < need_gb:
            raise ServingError(
                f"kv_tiers.{name}.capacity_gb={capacity:g} is smaller than one request's KV"
                f" ({need_gb:.3g} GB for {need} tokens); allowed: at least {need_gb:.3g}"
            )
    if tiers.flash is not None and not fabric.storage_nodes:
        raise ServingError(
            "kv_tiers.flash needs storage nodes on the fabric, and this"
            f" {fabric.kind} fabric has none: set fabric.storage_nodes (and storage_attach)"
        )

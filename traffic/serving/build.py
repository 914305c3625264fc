"""A :class:`ServingDriver` from a resolved ``serving`` workload: every key present,
its defaults filled in by the spec's one declaration of them (``experiments.spec.serving``),
so none is restated here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from topologies import Fabric

from .. import presets
from ..traces import read_trace, synthetic_arrivals
from .cache import PrefixCachePool
from .driver import ServingDriver
from .instances import ServingError, check_disjoint, make_instances
from .routers import make_router
from .sessions import SessionError, session_arrivals
from .tiers import KvTiers, hbm_tokens, kv_tiers


def read_arrivals(
    arrivals: dict[str, Any],
    seed: int,
    base_dir: Path | None,
    model: presets.Model | None = None,
) -> pd.DataFrame:
    """The arrivals table of ``{trace, format, ...}``, ``{synthetic: {...}}`` or
    ``{sessions: {...}}``; sessions are held to ``model``'s context limit."""
    if "synthetic" in arrivals:
        opts = {k: v for k, v in arrivals["synthetic"].items() if v is not None}
        return synthetic_arrivals(np.random.default_rng(seed), **opts)
    if "sessions" in arrivals:
        opts = {k: v for k, v in arrivals["sessions"].items() if v is not None}
        if model is not None:
            opts |= {"max_context_tokens": model.max_context_tokens, "model": model.name}
        try:
            return session_arrivals(np.random.default_rng(seed), **opts)
        except SessionError as exc:
            raise ServingError(f"arrivals.sessions.{exc.key}: {exc}") from None
    if "trace" not in arrivals or "format" not in arrivals:
        raise ServingError(
            "arrivals needs {trace, format, ...}, {synthetic: {...}} or {sessions: {...}}"
        )
    path = Path(arrivals["trace"]).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    options = {
        k: arrivals[k]
        for k in ("limit", "speedup", "start_s", "window_s", "token_scale")
        if arrivals.get(k) is not None
    }
    return read_trace(path, arrivals["format"], **options)


def build_serving(
    workload: dict[str, Any],
    fabric: Fabric,
    seed: int,
    first_flow_id: int = 0,
    base_dir: Path | None = None,
    **overrides: Any,
) -> ServingDriver:
    """The driver of one resolved ``serving`` workload on ``fabric``.

    ``overrides`` go to :class:`ServingDriver` (``efficiency``, ``kv_capacity_tokens``,
    ``topology_budget_ms``). A pool's ``gpus`` may be absent (every GPU of its servers).
    Bad input (unknown model, servers or GPUs the fabric lacks, a GPU in both pools, a
    tp that does not divide the KV heads or would split an instance across servers, a
    missing or malformed trace) raises a ``ValueError`` subclass that says what is wrong.
    """
    if workload.get("kind") != "serving":
        raise ServingError(f"workload kind {workload.get('kind')!r} is not serving")
    try:
        return _build(workload, fabric, seed, first_flow_id, base_dir, overrides)
    except KeyError as exc:
        raise ServingError(f"serving workload lacks {exc.args[0]!r} (not resolved?)") from None


def _build(workload: dict[str, Any], fabric: Fabric, seed: int, first_flow_id: int,
           base_dir: Path | None, overrides: dict[str, Any]) -> ServingDriver:  # fmt: skip
    model = presets.model(workload["model"])
    gpu = presets.gpu(workload["gpu"])
    presets.dtype_bytes(workload["kv_dtype"])
    mode = workload["mode"]
    pre = workload["prefill"]
    prefill = make_instances(
        fabric, "prefill", pre["servers"], pre["tp"], model.kv_heads, pre.get("gpus")
    )
    decode = []
    if mode == "disaggregated":
        dec = workload["decode"]
        if not dec:
            raise ServingError("disaggregated serving needs decode: {servers, tp}")
        decode = make_instances(
            fabric, "decode", dec["servers"], dec["tp"], model.kv_heads, dec.get("gpus")
        )
        check_disjoint(prefill, decode)
    cache = None
    if workload["prefix_cache"]["enabled"]:
        servers = sorted({i.server for i in prefill})
        pc = workload["prefix_cache"]
        cache = PrefixCachePool(servers, pc["capacity_blocks"], pc.get("shared", True))
    arrivals = read_arrivals(workload["arrivals"], seed, base_dir, model)
    tiers = kv_tiers(workload.get("kv_tiers"))
    if tiers is not None:
        tp = (decode or prefill)[0].tp
        check_tiers(tiers, fabric, arrivals, model.kv_bytes_per_token(workload["kv_dtype"]), tp)
    return ServingDriver(
        fabric=fabric,
        model=model,
        gpu=gpu,
        prefill=prefill,
        decode=decode,
        router=make_router(workload["router"], workload["router_weight"]),
        arrivals=arrivals,
        mode=mode,
        transfer=workload["transfer"],
        kv_dtype=workload["kv_dtype"],
        cache=cache,
        tenant=workload["tenant"],
        dscp=workload["dscp"],
        first_flow_id=first_flow_id,
        kv_tiers=tiers,
        **({"topology_budget_ms": workload["topology_budget_ms"]} | overrides),
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

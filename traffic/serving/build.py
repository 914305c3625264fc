"""A :class:`ServingDriver` from a resolved ``serving`` workload spec (experiments.spec.serving)."""

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


def read_arrivals(arrivals: dict[str, Any], seed: int, base_dir: Path | None) -> pd.DataFrame:
    """The arrivals table of ``{trace, format, ...}`` or ``{synthetic: {...}}``."""
    if "synthetic" in arrivals:
        opts = {k: v for k, v in arrivals["synthetic"].items() if v is not None}
        return synthetic_arrivals(np.random.default_rng(seed), **opts)
    if "trace" not in arrivals or "format" not in arrivals:
        raise ServingError("arrivals needs {trace, format, ...} or {synthetic: {...}}")
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
    ``budget_window_s``). Bad input (unknown model, servers the fabric lacks, overlapping
    instances, a tp that does not divide the KV heads, a missing or malformed trace)
    raises a ``ValueError`` subclass that says what is wrong.
    """
    if workload.get("kind") != "serving":
        raise ServingError(f"workload kind {workload.get('kind')!r} is not serving")
    try:
        model = presets.model(workload["model"])
        gpu = presets.gpu(workload.get("gpu", "h100"))
        presets.dtype_bytes(workload.get("kv_dtype", "fp16"))
    except KeyError as exc:
        raise ServingError(f"serving workload lacks {exc.args[0]!r}") from None
    mode = workload.get("mode", "disaggregated")
    pre = workload["prefill"]
    prefill = make_instances(fabric, "prefill", pre["servers"], pre["tp"], model.kv_heads)
    decode = []
    if mode == "disaggregated":
        dec = workload.get("decode")
        if not dec:
            raise ServingError("disaggregated serving needs decode: {servers, tp}")
        decode = make_instances(fabric, "decode", dec["servers"], dec["tp"], model.kv_heads)
        check_disjoint(prefill, decode)
    cache_spec = workload.get("prefix_cache") or {}
    cache = None
    if cache_spec.get("enabled"):
        servers = sorted({i.server for i in prefill})
        cache = PrefixCachePool(servers, cache_spec.get("capacity_blocks", 4096))
    arrivals = read_arrivals(workload["arrivals"], seed, base_dir)
    return ServingDriver(
        fabric=fabric,
        model=model,
        gpu=gpu,
        prefill=prefill,
        decode=decode,
        router=make_router(
            workload.get("router", "round_robin"), workload.get("router_weight", 1.0)
        ),
        arrivals=arrivals,
        mode=mode,
        transfer=workload.get("transfer", "monolithic"),
        kv_dtype=workload.get("kv_dtype", "fp16"),
        cache=cache,
        tenant=workload.get("tenant", "default"),
        dscp=workload.get("dscp", 0),
        first_flow_id=first_flow_id,
        **overrides,
    )

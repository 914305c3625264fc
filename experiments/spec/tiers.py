"""A serving workload's ``kv_tiers``: the HBM each GPU gives the KV cache, an optional
host-local CXL pool per server and an optional flash tier on the fabric's storage nodes
(``traffic.serving.tiers`` says what the driver does with them).

Checked here: shapes and ranges, that HBM for KV and the weights' share fit the GPU, and
that a flash tier has storage nodes to live on. That every tier holds one request's KV
depends on the arrivals, so ``kvfabric run --dry-run`` checks it (``build_serving``).
"""

from __future__ import annotations

from typing import Any

from experiments.spec.schema import Ctx, Field, bad, join, number, optional, section
from traffic.presets import GPUS, MODELS

CXL = section(
    {
        "capacity_gb": Field(number(gt=0), doc="the CXL pool of each server, GB"),
        "gbps": Field(
            number(gt=0), 512.0, "its bandwidth per server, Gbit/s (a server's moves queue)"
        ),
        "latency_us": Field(number(ge=0), 1.0, "added to every move to or from it, µs"),
    }
)

FLASH = section(
    {
        "capacity_gb": Field(number(gt=0), doc="the flash of each storage node, GB"),
        "latency_us": Field(
            number(ge=0), 100.0, "from asking a storage node for KV to its first byte, µs"
        ),
    }
)

KV_TIERS = section(
    {
        "hbm_gb": Field(
            number(gt=0),
            doc="the HBM each GPU gives the KV cache, GB: decode admission and eviction follow it",
        ),
        "cxl": Field(optional(CXL), None, "a host-local CXL tier (no fabric link, costs time)"),
        "flash": Field(
            optional(FLASH), None, "a flash tier on fabric.storage_nodes (tier_fetch messages)"
        ),
    }
)


def check_kv_tiers(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    """HBM for KV plus each GPU's share of the weights fits the GPU; flash needs storage
    nodes on the fabric. ``out`` is the checked serving workload."""
    tiers = out.get("kv_tiers")
    if not tiers:
        return
    model, gpu = MODELS[out["model"]], GPUS[out["gpu"]]
    pool = out["decode"] if out["mode"] == "disaggregated" else out["prefill"]
    weights_gb = model.params_b * 2 / pool["tp"]  # fp16 weights, split over the tp GPUs
    room = gpu.hbm_gb - weights_gb
    if tiers["hbm_gb"] > room:
        raise bad(
            join(path, "kv_tiers.hbm_gb"),
            tiers["hbm_gb"],
            f"at most {room:.3g} GB: {gpu.name}'s {gpu.hbm_gb:g} GB less its"
            f" {weights_gb:.3g} GB share of {model.name}'s weights at tp {pool['tp']}",
        )
    if tiers["flash"] is not None and ctx.fabric is not None and not ctx.fabric.storage_nodes:
        raise bad(
            join(path, "kv_tiers.flash"),
            tiers["flash"],
            "a fabric with storage nodes (fabric.storage_nodes >= 1), or no flash tier",
            f"this {ctx.fabric.kind} fabric has no storage nodes",
        )

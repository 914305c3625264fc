"""Run configurations for the tests that summarise, estimate or report hand-made tables:
a spec written as a dict, validated (every default filled in) and typed."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from experiments.spec.config import RunConfig
from experiments.spec.load import SPECS_DIR, load_spec


def config_of_spec(spec: dict[str, Any]) -> RunConfig:
    """The configuration of ``spec`` (a spec as written: sections may be partial)."""
    return load_spec(yaml.safe_dump(spec, sort_keys=False)).config


def spine_leaf_config(**keys: Any) -> RunConfig:
    """A spine-leaf run of 10 s at scale 1e-4 without workloads, ``keys`` laid over it."""
    spec = {
        "name": "t",
        "duration_s": 10.0,
        "scale": {"bandwidth": 1e-4},
        "fabric": {"kind": "spine_leaf", "buffer_pkts": 64},
    }
    return config_of_spec(spec | keys)


def serving_config(duration_s: float = 10.0, *, cache: bool = False, **changes: Any) -> RunConfig:
    """serving-basic's configuration for ``duration_s``, its one serving workload
    monolithic, without KV tiers, its prefix cache on or off (``cache``), with ``changes``
    (``dataclasses.replace`` of the workload)."""
    config = load_spec(SPECS_DIR / "serving-basic.yaml").config
    w = config.workloads[0]
    prefix_cache = dataclasses.replace(w.prefix_cache, enabled=cache)
    w = dataclasses.replace(
        w, transfer="monolithic", kv_tiers=None, prefix_cache=prefix_cache, **changes
    )
    return dataclasses.replace(
        config, duration_s=float(duration_s), workloads=(w,), scale=config.scale.dilated(1)
    )

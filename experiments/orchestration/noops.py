"""What a spec asks for that would do nothing, or not what it says (pure).

A run that sends nothing, a cache-aware router with no cache to be aware of, and an
expert-parallel group on GPUs that already serve a model are all valid specs: the run
goes ahead, but ``kvfabric run`` (and ``--dry-run``) says so, naming the key, instead
of measuring something the user did not mean.
"""

from __future__ import annotations

from experiments.spec.config import MoeAlltoallWorkload, RunConfig, ServingWorkload
from topologies import Fabric
from traffic.presets import model as model_preset
from traffic.serving.instances import make_instances


def noop_warnings(config: RunConfig, fabric: Fabric) -> list[str]:
    """One line per silent no-op of ``config`` on ``fabric``, each naming its key."""
    out = []
    if not config.workloads:
        out.append(
            f"workloads: empty: the run sends no traffic for its {config.duration_s:g} s "
            "(only faults and the controller act); add a workload (kvfabric spec keys "
            "workloads)"
        )
    serving = {}  # host -> "workloads.i (role)"
    for i, w in enumerate(config.workloads):
        if not isinstance(w, ServingWorkload):
            continue
        if w.router == "kv_affinity" and not w.prefix_cache.enabled:
            out.append(
                f"workloads.{i}.router: kv_affinity with workloads.{i}.prefix_cache.enabled "
                "false: no instance holds a prefix, so every prompt costs the same "
                "everywhere and it routes exactly as least_loaded"
            )
        serving |= _serving_hosts(i, w, fabric)
    for i, w in enumerate(config.workloads):
        if not isinstance(w, MoeAlltoallWorkload):
            continue
        shared = [h for h in w.group if h in serving]
        if shared:
            whom = ", ".join(f"{h} ({serving[h]})" for h in shared)
            out.append(
                f"workloads.{i}.group: {whom} also serve a model: the run shares their "
                "links, but nothing models the GPU time the two would share"
            )
    return out


def _serving_hosts(i: int, w: ServingWorkload, fabric: Fabric) -> dict[str, str]:
    """Host -> ``workloads.i prefill|decode`` of a serving workload's instances ({} when
    its pools do not fit the fabric: building the run says why)."""
    try:
        heads = model_preset(w.model).kv_heads
        pools = [("prefill", w.prefill)] + ([("decode", w.decode)] if w.decode else [])
        return {
            h: f"workloads.{i} {role}"
            for role, pool in pools
            for inst in make_instances(fabric, role, pool.servers, pool.tp, heads, pool.gpus)
            for h in inst.hosts
        }
    except (ValueError, KeyError):
        return {}

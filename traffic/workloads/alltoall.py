"""Mixture-of-experts all-to-all: a tenant's expert-parallel group, step after step.

Each of the G members holds ``tokens_per_step`` tokens; every token goes to its
``top_k`` experts, spread over the members (expert parallelism). A step is

1. dispatch: member i sends member j the hidden states of the tokens routed to
   j's experts: with uniform routing
   ``tokens_per_step × top_k / G × hidden_size × bytes per element``
   (integer bytes, rounded down; the share i routes to itself stays local);
2. combine: after its experts ran, j returns the results to i, the same bytes
   as i sent j.

All members start a step's dispatch at the same instant (step s at
``start_ms + s × step_interval_ms``): the synchronised burst. Member j's
combine messages form the dependency: they are released when every dispatch
message *to* j has arrived (one completion group per step and receiver, see
``schedule``), and wait ``expert_compute_us`` more for the expert compute.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..presets import PresetError, dtype_bytes
from .schedule import (
    WorkloadError,
    build_schedule,
    check_hosts,
    check_positive,
    ms_to_ns,
    resolve_model,
    rng_from,
)

ROUTINGS = ("uniform", "random")


def _token_counts(routing: str, rng: np.random.Generator, g: int, assignments: int) -> np.ndarray:
    """(G, G) matrix: token-expert assignments member i sends member j in one step."""
    if routing == "uniform":
        return np.full((g, g), assignments / g)
    # Each of a member's assignments lands on a uniformly random member.
    return rng.multinomial(assignments, np.full(g, 1.0 / g), size=g).astype(float)


def moe_alltoall(
    group: Sequence[str],
    tenant: str,
    steps: int,
    tokens_per_step: int,
    *,
    model: str | None = "mixtral-8x7b",
    hidden_size: int | None = None,
    top_k: int | None = None,
    dtype: str = "bf16",
    step_interval_ms: float = 10.0,
    expert_compute_us: float = 0.0,
    routing: str = "uniform",
    hosts: Sequence[str] | None = None,
    seed: int | np.random.Generator = 0,
    start_ms: float = 0.0,
    dscp: int = 0,
    first_flow_id: int = 0,
) -> pd.DataFrame:
    """``steps`` × 2 × G × (G - 1) rows of kind ``alltoall`` (fewer if a share is 0 bytes).

    - ``group``: the G >= 2 hosts of the expert-parallel group.
    - ``tenant``: the tenant the group belongs to.
    - ``steps``: number of dispatch + combine steps.
    - ``tokens_per_step``: tokens each member routes per step.
    - ``model``: an MoE preset for ``hidden_size`` and ``top_k`` (default
      ``mixtral-8x7b``); ``hidden_size``/``top_k`` override it, and with both
      given ``model`` may be ``None``.
    - ``hidden_size`` / ``top_k``: the token's hidden size and experts per token,
      overriding the preset's.
    - ``dtype``: activation element type (default ``bf16``; ``fp8`` halves).
    - ``step_interval_ms``: time between step starts (default 10 ms). A step
      that takes longer overlaps the next, as a real training/inference loop
      with a fixed cadence would queue.
    - ``expert_compute_us``: expert compute between dispatch arrival and
      combine (default 0).
    - ``routing``: ``uniform`` (default; the formula above, deterministic) or
      ``random`` (each token-expert assignment picks a member at random,
      seeded: load imbalance between members).
    - ``hosts``: the fabric's hosts, to reject unknown names (optional).
    - ``seed``, ``start_ms``, ``dscp``, ``first_flow_id``: as elsewhere.
    """
    rng = rng_from(seed)
    members = list(group)
    if len(members) < 2:
        raise WorkloadError(f"group needs at least 2 hosts for an all-to-all, got {members}")
    check_hosts("group", members, hosts)
    check_positive("steps", steps, integer=True)
    check_positive("tokens_per_step", tokens_per_step, integer=True)
    check_positive("step_interval_ms", step_interval_ms)
    if expert_compute_us < 0 or start_ms < 0:
        raise WorkloadError(
            f"expert_compute_us and start_ms must be >= 0, got {expert_compute_us}, {start_ms}"
        )
    if routing not in ROUTINGS:
        raise WorkloadError(f"routing={routing!r}; allowed: {', '.join(ROUTINGS)}")
    if hidden_size is None or top_k is None:
        if model is None:
            raise WorkloadError("give model, or both hidden_size and top_k")
        m = resolve_model(model)
        if not m.is_moe:
            raise WorkloadError(
                f"model {m.name!r} has no experts; use an MoE preset or pass hidden_size and top_k"
            )
        hidden_size = m.hidden_size if hidden_size is None else hidden_size
        top_k = m.top_k if top_k is None else top_k
    check_positive("hidden_size", hidden_size, integer=True)
    check_positive("top_k", top_k, integer=True)
    try:
        elem = dtype_bytes(dtype)
    except PresetError as exc:
        raise WorkloadError(str(exc)) from None

    g = len(members)
    cols: dict[str, list] = {k: [] for k in ("src", "dst", "bytes", "t", "step", "bar", "after")}

    def add(src: int, dst: int, size: int, t_ns: int, step: int, bar: int, after: int) -> None:
        for key, value in zip(
            cols, (members[src], members[dst], size, t_ns, step, bar, after), strict=True
        ):
            cols[key].append(value)

    for step in range(steps):
        counts = _token_counts(routing, rng, g, tokens_per_step * top_k)
        sizes = np.floor(counts * hidden_size * elem).astype(np.int64)
        release = ms_to_ns(start_ms + step * step_interval_ms)
        group_of: dict[int, int] = {}  # receiver -> row index of its first dispatch
        for i in range(g):
            for j in range(g):
                if i != j and sizes[i, j] > 0:
                    row = len(cols["src"])
                    group_of.setdefault(j, row)
                    add(i, j, int(sizes[i, j]), release, step, group_of[j], -1)
        for j in range(g):
            for i in range(g):
                if i != j and sizes[i, j] > 0:
                    add(j, i, int(sizes[i, j]), int(expert_compute_us * 1e3), step, -1, group_of[j])
    n = len(cols["src"])
    return build_schedule(
        {
            "kind": ["alltoall"] * n,
            "tenant": [tenant] * n,
            "src": cols["src"],
            "dst": cols["dst"],
            "bytes": cols["bytes"],
            "t_sched_ns": cols["t"],
            "step": cols["step"],
            "dscp": [dscp] * n,
            "barrier": cols["bar"],
            "after": cols["after"],
        },
        first_flow_id,
    )

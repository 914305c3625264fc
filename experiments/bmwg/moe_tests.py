"""Category 3 of the draft: MoE expert parallelism (7.1–7.4), all-to-all over TCP.

Payloads follow the draft's formula, T_dispatch = B × k × H_model × P_bytes / N per
pair (``moe_alltoall``), not its Table 7 values (which leave out the ÷ N and use
B = 512 for M2–M4). EP sizes and batches are -00's (-02 dropped them).
"""

from __future__ import annotations

from itertools import product

from experiments.bmwg import stand_ins as si
from experiments.bmwg.bases import alltoall, base, hosts, kv_stream, spine_leaf
from experiments.bmwg.model import (
    DEFAULT_BUDGETS,
    PROFILES,
    Axis,
    Budget,
    Point,
    Procedure,
    Substitute,
    Sweep,
    axis,
    budgets,
    joint,
)

CATEGORY = "MoE expert parallelism"
FINE = {"bandwidth": 1.0e-3, "time_dilation": "auto"}  # dispatches of tens of KB real
ROWS = {"M1": (4096, 2), "M2": (7168, 4), "M3": (7168, 2), "M4": (7168, 8)}
INTERVAL_MS = 100.0
STEPS = {"quick": 100, "standard": 350, "draft": 700}  # (warm-up + trial) ÷ step interval


def _budgets(draft_fixed: dict[str, object] | None = None) -> dict[str, Budget]:
    trial = {"quick": 8.0, "standard": 30.0, "draft": 60.0}
    reps = {"quick": 2, "standard": 5, "draft": 20}
    warm = {"quick": 2.0, "standard": 5.0, "draft": 10.0}
    out = {}
    for p in PROFILES:
        fixed = {"workloads.0.steps": STEPS[p]} | ((draft_fixed or {}) if p == "draft" else {})
        out[p] = Budget(reps[p], trial[p], warm[p], fixed)
    return budgets(*(out[p] for p in PROFILES))


def _ep_group(n: int) -> dict[str, object]:
    """EP group of ``n`` hosts on the smallest spine-leaf of 8-host leaves that holds it."""
    if n <= 8:
        return {"workloads.0.group": hosts(n)}
    return {"fabric": spine_leaf(leaves=n // 8, hosts_per_leaf=8), "workloads.0.group": hosts(n)}


def _row(name: str) -> dict[str, object]:
    hidden, k = ROWS[name]
    return {"workloads.0.hidden_size": hidden, "workloads.0.top_k": k}


A2A = base([alltoall(hosts(8), *ROWS["M3"], 128, step_interval_ms=INTERVAL_MS)], scale=FINE)
EP_SIZE = joint("EP group size", _ep_group, (4, 8), (2, 4, 8), (8, 16, 32), lambda n: f"EP{n}")

DISPATCH_THROUGHPUT = Procedure(
    "7.1",
    "AllToAll dispatch throughput",
    CATEGORY,
    "substitute",
    ("EP_alltoall_bandwidth", "EP_alltoall_latency", "BusBW", "GPU_idle_time"),
    Sweep(
        A2A,
        (
            joint("Table 7 row", _row, ("M1", "M3"), tuple(ROWS), tuple(ROWS)),
            EP_SIZE,
            axis(
                "batch size B",
                "workloads.0.tokens_per_step",
                (128,),
                (8, 128, 512),
                (1, 8, 32, 128, 512),
            ),
        ),
        budgets=_budgets(),
        quick_gives_up="rows M2/M4, EP above 8, every batch but 128, 18 of 20 repetitions; "
        "the draft profile stops at EP 32 (-00's 64 and 96 need more hosts than one machine)",
    ),
    (si.EP_RDMA,),
    notes="GPU idle time = step time minus expert compute (expert_compute_us = 0: the whole "
    "step). Sub-millisecond dispatch times are below the emulator's timing noise.",
)

NORMAL, LOW_LATENCY = (128, 256, 512), (1, 4, 8, 16)


LL_INTERVAL_MS = 20.0  # Low-Latency: once per layer per token, more often


def _mode(mode: str, batch: int, profile: str) -> Point:
    slow = mode == "normal"
    interval = INTERVAL_MS if slow else LL_INTERVAL_MS
    steps = STEPS[profile] if slow else int(STEPS[profile] * INTERVAL_MS / LL_INTERVAL_MS)
    keys = {"workloads.0.tokens_per_step": batch, "workloads.0.step_interval_ms": interval}
    return Point(f"{mode}-B{batch}", keys | {"workloads.0.steps": steps})


MODE_POINTS = {
    "quick": (("normal", 128), ("low_latency", 8)),
    "standard": (*product(("normal",), NORMAL), ("low_latency", 1), ("low_latency", 16)),
    "draft": (*product(("normal",), NORMAL), *product(("low_latency",), LOW_LATENCY)),
}
MODES = Axis(
    "dispatch mode (Normal B 128–512, Low-Latency B 1–16)",
    {p: tuple(_mode(m, b, p) for m, b in MODE_POINTS[p]) for p in PROFILES},
)

DISPATCH_MODES = Procedure(
    "7.2",
    "Routing mode and dispatch mode comparison",
    CATEGORY,
    "substitute",
    ("EP_alltoall_latency", "EP_alltoall_bandwidth", "Link_utilization"),
    Sweep(
        A2A,
        (
            axis(
                "routing mode",
                "workloads.0.routing",
                ("uniform", "random"),
                ("uniform", "random"),
                ("uniform", "random"),
            ),
            MODES,
            joint("EP group size", _ep_group, (8,), (4, 8), (8, 16, 32), lambda n: f"EP{n}"),
        ),
        budgets=_budgets(),
        quick_gives_up="one Normal and one Low-Latency batch, EP 8 only, 18 of 20 repetitions",
    ),
    (
        si.EP_RDMA,
        Substitute(
            "expert-choice, token-drop and aux-loss routing modes",
            "routing: random (seeded uneven spread: imbalance and uneven message sizes) "
            "against uniform top-k; token drop and aux-loss have no spec key",
        ),
        Substitute(
            "Low-Latency dispatch: padded PUTs, GPU-initiated (GIN), graph capture",
            "small batches at a 20 ms step interval; no padding, SEND/RECV vs PUT or GIN",
        ),
    ),
)


def _wide(gpus: int) -> object:
    def make(servers: int) -> dict[str, object]:
        group = [f"gpu{s}_{g}" for s in range(servers) for g in range(gpus)]
        return {"fabric.servers": max(servers, 2), "workloads.0.group": group}

    return make


RAIL = {"kind": "rail_optimized", "servers": 4, "gpus_per_server": 4, "spines": 2}
RAIL |= {"rail_gbps": 400, "spine_gbps": 400, "nvlink_gbps": 3600, "buffer_pkts": 64}
WIDE = Axis(
    "EP size (one server, then 2, 4, … servers)",
    {
        p: tuple(Point(f"EP{n * gpus}", _wide(gpus)(n)) for n in ns)
        for p, gpus, ns in (
            ("quick", 4, (1, 2, 4)),
            ("standard", 4, (1, 2, 4)),
            ("draft", 8, (1, 2, 4, 6)),
        )
    },
)

WIDE_EP = Procedure(
    "7.3",
    "Wide expert parallelism scaling",
    CATEGORY,
    "substitute",
    ("EP_alltoall_latency", "EP_alltoall_bandwidth", "EP_scaling_efficiency"),
    Sweep(
        base(
            [alltoall(hosts(4), *ROWS["M3"], 128, step_interval_ms=INTERVAL_MS)],
            fabric=RAIL,
            scale=FINE,
        ),
        (WIDE,),
        budgets=_budgets({"fabric.gpus_per_server": 8}),
        quick_gives_up="4-GPU servers (EP 4–16 instead of 8–96) and 18 of 20 repetitions; "
        "the draft profile stops at EP 48 (6 servers of 8)",
    ),
    (
        si.EP_RDMA,
        Substitute("the intra-node interconnect", "the NVLink switch of each server (nvlink_gbps)"),
    ),
    notes="Row M3, batch 128. Efficiency (EP8 latency ÷ EPN latency) × N/8 may exceed 1; "
    "reported as is (the draft does not say how to read it).",
)


def _mix(point: tuple[str, float], seconds: float) -> dict[str, object]:
    mix, load = point
    kv = kv_stream(hosts(4), ["h4"], load, seconds)
    steps = int(seconds * 1000 / INTERVAL_MS)
    ep = alltoall(
        hosts(2) + ["h4", "h5"], *ROWS["M3"], 512, step_interval_ms=INTERVAL_MS, steps=steps
    )
    work = {"kv": [kv], "ep": [ep], "kv+ep": [kv, ep]}[mix]
    return {"workloads": work}


def _mix_label(mix: tuple[str, float]) -> str:
    return mix[0] if mix[0] == "ep" else f"{mix[0]}@{mix[1]:.0%}"


MIXES = (("kv", 0.5), ("kv", 0.75), ("ep", 0.0), ("kv+ep", 0.5), ("kv+ep", 0.75))
CONTENTION = Procedure(
    "7.4",
    "Expert parallelism and KV cache transfer contention",
    CATEGORY,
    "substitute",
    ("KV_xfer_latency", "EP_alltoall_latency", "Contention_penalty", "Packet_drop_rate"),
    Sweep(
        base([alltoall(["h0", "h1", "h4", "h5"], *ROWS["M3"], 512)], scale=FINE),
        (
            Axis(
                "traffic (isolated KV, isolated EP, both) × KV load (50%, 75%)",
                {
                    p: tuple(
                        Point(_mix_label(m), _mix(m, DEFAULT_BUDGETS[p].duration_s)) for m in MIXES
                    )
                    for p in PROFILES
                },
            ),
        ),
        quick_gives_up="18 of 20 repetitions and trial length",
    ),
    (si.EP_RDMA, si.PUT, si.ECN, si.PFC),
    notes="KV: four prefill GPUs into one decode GPU (h4) at 50% / 75% of its link; EP "
    "shares h4's and the uplinks' queues. One class: no HTB priority unless the fabric "
    "spec adds controller.qos.",
)

PROCEDURES = (DISPATCH_THROUGHPUT, DISPATCH_MODES, WIDE_EP, CONTENTION)

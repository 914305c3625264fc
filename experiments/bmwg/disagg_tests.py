"""Category 2 of the draft: prefill/decode disaggregation (6.1–6.4)."""

from __future__ import annotations

from experiments.bmwg import stand_ins as si
from experiments.bmwg.bases import KV_MODEL, base, serving, spine_leaf
from experiments.bmwg.model import (
    DRAFT,
    QUICK,
    STANDARD,
    Axis,
    Budget,
    Point,
    Procedure,
    Substitute,
    Sweep,
    axis,
    budgets,
)
from traffic.compute import prefill_time_s

CATEGORY = "Prefill/decode disaggregation"
PROMPTS = (128, 512, 1024, 2048, 4096, 8192, 16384)
IN_TOKENS = "workloads.0.arrivals.synthetic.input_tokens"
RATE = "workloads.0.arrivals.synthetic.rate_per_s"

DISAGG_TTFT = Procedure(
    "6.1",
    "End-to-end disaggregated TTFT",
    CATEGORY,
    "implemented",
    ("TTFT", "TTFT_decomposition", "TTFT_fabric", "Fabric_fraction"),
    Sweep(
        base([serving([0, 1], [2, 3, 4, 5, 6, 7], 2.0, output_tokens=16)]),
        (axis("prompt length, tokens", IN_TOKENS, (128, 1024, 8192), PROMPTS[::2], PROMPTS),),
        quick_gives_up="four of seven prompt lengths and 18 of 20 repetitions",
    ),
    notes="xPyD is 2P6D on 8 GPUs (the draft's 3P9D ratio, 1:3). T_transfer is the KV "
    "time TTFT waits for, at the application (kernel stack included), NIC-to-NIC "
    "segments not separated; intra-node segments are zero.",
)


def _ratio(p: int, total: int) -> dict[str, object]:
    return {
        "workloads.0.prefill.servers": list(range(p)),
        "workloads.0.decode.servers": list(range(p, total)),
    }


XPYD = Axis(
    "xPyD ratio",
    {
        "quick": tuple(Point(f"{p}P{8 - p}D", _ratio(p, 8)) for p in (2, 4, 6)),
        "standard": tuple(Point(f"{p}P{8 - p}D", _ratio(p, 8)) for p in range(1, 8)),
        "draft": tuple(Point(f"{p}P{12 - p}D", _ratio(p, 12)) for p in (1, 2, 3, 4, 6, 8, 10, 11)),
    },
)
# Zipf(α = 1) over [128, 8192] is log-uniform: mean 1939, sd of the log 1.2
ZIPF_LIKE = {"dist": "lognormal", "mean": 1939, "sigma": 1.2}

XPYD_SWEEP = Procedure(
    "6.2",
    "xPyD ratio optimization",
    CATEGORY,
    "substitute",
    ("TTFT", "ITL", "TPS_output", "Inference_Goodput", "Pareto_xPyD"),
    Sweep(
        base([serving([0, 1], [2, 3, 4, 5, 6, 7], 4.0, ZIPF_LIKE)]),
        (XPYD, axis("request rate, req/s", RATE, (8.0,), (4.0, 16.0), (2.0, 4.0, 8.0, 16.0, 32.0))),
        budgets=budgets(QUICK, STANDARD, Budget(20, 60.0, 10.0, {"fabric": spine_leaf(leaves=3)})),
        quick_gives_up="ratios but 2P6D/4P4D/6P2D on 8 GPUs (the draft's 12 nodes: draft "
        "profile), one request rate, 18 of 20 repetitions",
    ),
    (
        Substitute(
            "prompt lengths Zipf(α = 1.0) over [128, 8192]",
            "lognormal prompts of the same mean and log spread (the spec has no Zipf)",
        ),
    ),
    notes="Pareto: highest TPS_output with TTFT P99 < 500 ms and ITL P99 < 50 ms "
    "(reference criteria, Appendix B). Results hinge on the compute model's calibration.",
)

RAIL4 = {"kind": "rail_optimized", "servers": 4, "gpus_per_server": 4, "spines": 2}
RAIL4 |= {"rail_gbps": 400, "spine_gbps": 400, "nvlink_gbps": 3600, "buffer_pkts": 64}


def _tp(prefill: int, decode: int) -> Point:
    keys = {"workloads.0.prefill.tp": prefill, "workloads.0.decode.tp": decode}
    return Point(f"P-TP{prefill}/D-TP{decode}", keys)


PARALLELISM = Axis(
    "parallelism (TP8/TP8, TP8/TP4+DPA2, TP4+DP2/TP2+DPA4; halved on 4-GPU servers)",
    {
        "quick": (_tp(4, 4), _tp(4, 2), _tp(2, 1)),
        "standard": (_tp(4, 4), _tp(4, 2), _tp(2, 1)),
        "draft": (_tp(8, 8), _tp(8, 4), _tp(4, 2)),
    },
)

HETEROGENEOUS = Procedure(
    "6.3",
    "Heterogeneous parallelism configuration",
    CATEGORY,
    "substitute",
    ("KV_BW", "Concurrent_KV_flows", "TTFT", "ITL"),
    Sweep(
        base([serving([0, 1], [2, 3], 4.0, 2048)], fabric=RAIL4),
        (PARALLELISM,),
        budgets=budgets(QUICK, STANDARD, Budget(20, 60.0, 10.0, {"fabric.gpus_per_server": 8})),
        quick_gives_up="8-GPU servers (TP degrees halved) and 18 of 20 repetitions",
    ),
    (
        Substitute(
            "DP-Attention's decode all-to-all",
            "not modelled: only the KV fan-out a TP split gives (instances of decode.tp GPUs)",
        ),
        Substitute("TP rank → NIC mapping", "one rail NIC per GPU (rail_optimized)"),
    ),
)


def _rates(ratios: tuple[float, ...], tokens: int = 4096, instances: int = 2) -> tuple[float, ...]:
    """Arrival rates at ``ratios`` of the prefill pool's service rate for ``tokens``."""
    service = instances / prefill_time_s(KV_MODEL, "h100", tokens, tp=1)
    return tuple(round(r * service, 3) for r in ratios)


PREFILL_QUEUE = Procedure(
    "6.4",
    "Prefill queue depth impact on transfer latency",
    CATEGORY,
    "substitute",
    ("KV_xfer_latency", "Burst_size", "Link_utilization", "Packet_drop_rate"),
    Sweep(
        base([serving([0, 1], [2, 3, 4, 5, 6, 7], 4.0, 4096, 32)]),
        (
            axis(
                "prefill oversubscription 1.0–2.0× (arrival rate ÷ prefill service rate)",
                RATE,
                _rates((1.0, 1.5, 2.0)),
                _rates((1.0, 1.25, 1.5, 1.75, 2.0)),
                _rates((1.0, 1.25, 1.5, 1.75, 2.0)),
            ),
        ),
        budgets=budgets(QUICK, STANDARD, DRAFT),
        quick_gives_up="1.25× and 1.75× and 18 of 20 repetitions",
    ),
    (si.ECN, si.PFC),
    notes="Service rate from the compute model (traffic.compute) for 4096-token prompts "
    "on the two prefill GPUs.",
)

PROCEDURES = (DISAGG_TTFT, XPYD_SWEEP, HETEROGENEOUS, PREFILL_QUEUE)

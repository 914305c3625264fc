"""Category 1 of the draft: RDMA KV-cache transfer (5.1–5.4), as TCP KV messages."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import product

from experiments.bmwg import stand_ins as si
from experiments.bmwg.bases import (
    MB,
    MESSAGE_SIZES,
    background,
    base,
    message,
    rounds_for,
    size_label,
    spine_leaf,
    stream_rounds,
    streams,
)
from experiments.bmwg.model import (
    DEFAULT_BUDGETS,
    PROFILES,
    QUICK,
    STANDARD,
    Axis,
    Budget,
    Point,
    Procedure,
    Substitute,
    Sweep,
    budgets,
)

CATEGORY = "RDMA KV cache transfer"
FINE = {"bandwidth": 1.0e-3, "time_dilation": "auto"}  # two hosts only: packets of 1.4 KB real


LATENCY_BUDGETS = budgets(QUICK, STANDARD, Budget(20, 120.0, 10.0))  # 5.2: >= 120 s trials


def _trial(profile: str, table: Mapping[str, Budget] = DEFAULT_BUDGETS) -> float:
    return table[profile].trial_s


def _qps_point(n: int, size: int, budget: Budget) -> Point:
    """``n`` QPs of ``size`` messages h0 → h4 for the trial, with the warm-up their
    span leaves when the message cap ends them sooner."""
    rounds, warmup_s = stream_rounds(size, budget, n)
    label = f"{size_label(size)}x{n}qp"
    return Point(label, {"workloads": streams(n, "h0", "h4", size, rounds)}, warmup_s)


def _size_x_qps() -> Axis:
    sizes = {
        "quick": (MB, 16 * MB, 256 * MB),
        "standard": MESSAGE_SIZES[::2],
        "draft": MESSAGE_SIZES,
    }
    qps = {"quick": (1, 8), "standard": (1, 4, 16, 64), "draft": (1, 4, 8, 16, 32, 64, 128)}
    points = {
        p: tuple(_qps_point(n, s, DEFAULT_BUDGETS[p]) for n, s in product(qps[p], sizes[p]))
        for p in PROFILES
    }
    return Axis("message size (64 KB–1 GB) × concurrent QPs (1–128)", points)


P2P_THROUGHPUT = Procedure(
    "5.1",
    "Point-to-point KV cache transfer throughput",
    CATEGORY,
    "substitute",
    ("KV_xfer_bandwidth", "Fabric_Goodput", "Link_utilization"),
    Sweep(
        base([message("h0", "h4", MB, 1)], scale=FINE),
        (_size_x_qps(),),
        quick_gives_up="sizes under 1 MB and above 256 MB, QP counts but 1 and 8, "
        "18 of 20 repetitions; the draft's 8 × 7 × 20 trials of >= 60 s take ~22 h",
    ),
    (si.PUT, si.QP, si.NIC),
    notes="NIC offload and GPU-to-NIC overhead are not modelled; CPU use is the "
    "emulator's. Sizes under one emulated packet (1.4 MB real at scale 1e-3) "
    "measure latency, not throughput.",
)


def _size_x_load() -> Axis:
    sizes = {"quick": (MB, 16 * MB), "standard": (64 << 10, MB, 16 * MB, 256 * MB)}
    sizes["draft"] = sizes["standard"]
    loads = {"quick": (0.0, 0.5, 0.9), "standard": (0.0, 0.25, 0.5, 0.75, 0.9)}
    loads["draft"] = loads["standard"]
    points = {}
    for p in PROFILES:
        pts = []
        for s, load in product(sizes[p], loads[p]):
            rounds, warmup_s = stream_rounds(s, LATENCY_BUDGETS[p])
            work = [message("h0", "h4", s, rounds)] + ([background(load)] if load else [])
            pts.append(Point(f"{size_label(s)}@{load:.0%}", {"workloads": work}, warmup_s))
        points[p] = tuple(pts)
    return Axis("message size × background load (unloaded, 25–90% of capacity)", points)


KV_LATENCY = Procedure(
    "5.2",
    "KV cache transfer latency",
    CATEGORY,
    "substitute",
    ("KV_xfer_latency", "Tail_spread", "Packet_drop_rate"),
    Sweep(
        base([message("h0", "h4", MB, 1)]),
        (_size_x_load(),),
        budgets=LATENCY_BUDGETS,
        quick_gives_up="sizes 64 KB and 256 MB, the 25% and 75% loads, 18 of 20 "
        "repetitions; the draft's 4 × 5 × 20 trials of >= 120 s take ~13 h",
    ),
    (si.PUT, si.COMPLETION, si.NIC, si.ECN),
    notes="No lossless class: loss and TCP retransmission inflate the tail instead. "
    "Kernel scheduling makes sub-millisecond percentiles noise.",
)


def _pairs(n: int, profile: str) -> dict[str, object]:
    per_leaf = max(4, n)
    rounds = rounds_for(16 * MB, _trial(profile)) // n
    work = [message(f"h{i}", f"h{per_leaf + i}", 16 * MB, max(1, rounds)) for i in range(n)]
    return {"fabric.hosts_per_leaf": per_leaf, "workloads": work}


PAIRS = Axis(
    "simultaneous prefill→decode pairs N (16 MB messages, back to back)",
    {
        p: tuple(Point(f"{n}pairs", _pairs(n, p)) for n in ns)
        for p, ns in zip(PROFILES, ((1, 2, 4), (1, 2, 4, 8), (1, 2, 4, 8, 16, 32)), strict=True)
    },
)

CONCURRENT_SCALING = Procedure(
    "5.3",
    "Concurrent KV cache transfer scaling",
    CATEGORY,
    "substitute",
    ("KV_BW", "KV_xfer_latency", "JFI", "Link_utilization"),
    Sweep(
        base([message("h0", "h4", 16 * MB, 1)], fabric=spine_leaf(), scale=FINE),
        (PAIRS,),
        quick_gives_up="N above 4 and 18 of 20 repetitions; the draft's N = 64 and 128 "
        "(256 hosts) are beyond one machine: the draft profile stops at 32",
    ),
    (si.PUT, si.NIC),
)

TIERS = Axis(
    "memory tier pair",
    {
        p: (
            Point("hbm-remote-hbm", {"workloads.0.kv_tiers": None}),
            Point(
                "hbm-cxl", {"workloads.0.kv_tiers": {"hbm_gb": 0.6, "cxl": {"capacity_gb": 256}}}
            ),
            Point(
                "hbm-flash",
                {"workloads.0.kv_tiers": {"hbm_gb": 0.6, "flash": {"capacity_gb": 4000}}},
            ),
        )
        for p in PROFILES
    },
)
TIER_SIZE = Axis(  # llama-3-70b (CFG-B): 320 KiB of KV per token
    "message size (1 MB, 16 MB, 256 MB)",
    {
        "quick": (Point("16MB", {"workloads.0.arrivals.synthetic.input_tokens": 51}),),
        **{
            p: tuple(
                Point(lab, {"workloads.0.arrivals.synthetic.input_tokens": t})
                for lab, t in (("1MB", 3), ("16MB", 51), ("256MB", 819))
            )
            for p in ("standard", "draft")
        },
    },
)

MULTI_TIER = Procedure(
    "5.4",
    "Multi-tier storage transfer characterization",
    CATEGORY,
    "substitute",
    ("KV_xfer_bandwidth", "KV_xfer_latency", "Tier_throughput_ratio"),
    Sweep("kv-tiering", (TIERS, TIER_SIZE)),
    (
        Substitute(
            "HBM → NVMe/SSD and HBM → remote CPU DRAM over RDMA",
            "the flash tier on fabric.storage_nodes (tier_fetch messages over the fabric)",
        ),
        Substitute(
            "DRAM ↔ HBM offload and reload",
            "the CXL tier: host-local, modelled (bandwidth and latency), no fabric hop",
        ),
    ),
    notes="No GPU-direct storage or real memory tiers: the tiers are rate/latency "
    "models; only the flash tier's bytes cross the fabric.",
)

PROCEDURES = (P2P_THROUGHPUT, KV_LATENCY, CONCURRENT_SCALING, MULTI_TIER)

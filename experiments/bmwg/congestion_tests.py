"""Category 4 of the draft: congestion management (8.1–8.4).

The kernel here has no RED/ECN marking and no PFC: the draft's marks and PAUSE frames
become drop-tail drops and TCP retransmissions, its thresholds the queue limit. A
queue limit is a depth in time at the emulated rate (design.md: buffer depth in time
does not survive the bandwidth scale), so the limits swept are packets, not the
draft's 100 KB–5 MB.
"""

from __future__ import annotations

from experiments.bmwg import stand_ins as si
from experiments.bmwg.bases import MB, alltoall, base, hosts, kv_stream, spine_leaf
from experiments.bmwg.model import (
    DEFAULT_BUDGETS,
    DRAFT,
    PROFILES,
    QUICK,
    STANDARD,
    Axis,
    Budget,
    Point,
    Procedure,
    Sweep,
    axis,
    budgets,
)

CATEGORY = "Congestion management"
KV_BLOCK = 16 * MB
QUEUE_LIMITS = axis(
    "queue limit, packets (stands in for the ECN/PFC threshold)",
    "fabric.buffer_pkts",
    (16, 64),
    (8, 16, 64, 256),
    (8, 16, 64, 256),
)
BIG_LEAVES = {"fabric.hosts_per_leaf": 17}  # 33 possible senders for M = 32

ECN_INCAST = Procedure(
    "8.1",
    "ECN marking under inference incast",
    CATEGORY,
    "substitute",
    ("Fabric_Goodput", "Buffer_utilization", "Packet_drop_rate", "Fabric_FCT"),
    Sweep(
        "incast-collapse",
        (
            axis(
                "incast senders M → 1",
                "workloads.0.senders",
                (2, 8),
                (2, 4, 8, 14),
                (2, 4, 8, 16, 32),
            ),
            QUEUE_LIMITS,
        ),
        fixed={"workloads.0.sru_bytes": KV_BLOCK, "workloads.0.rounds": 10},
        budgets=budgets(QUICK, STANDARD, Budget(20, 60.0, 10.0, BIG_LEAVES)),
        quick_gives_up="M of 4, 14 and above, two queue limits, 18 of 20 repetitions",
    ),
    (si.ECN, si.ECN_THRESHOLD),
    notes="No marking rate, onset or queue depth at onset: drops and the sampled backlog "
    "say where the drop-tail queue overflowed instead.",
)

BURST_BASE = base(
    [
        {"kind": "incast", "receiver": "h0", "senders": 8, "sru_bytes": KV_BLOCK, "rounds": 10},
        {
            "kind": "probe",
            "pairs": [["h15", "h0"]],
            "rate_hz": 100,
            "size_bytes": 200,
            "tenant": "probe",
        },
    ],
    fabric=spine_leaf(spines=1, hosts_per_leaf=8, buffer_pkts=16),
)

PFC_BURST = Procedure(
    "8.2",
    "PFC behavior under bursty KV cache transfers",
    CATEGORY,
    "substitute",
    ("Fabric_FCT", "Packet_drop_rate", "Buffer_utilization", "Probe_delay"),
    Sweep(
        BURST_BASE,
        (
            axis(
                "concurrent 16 MB transfers N_burst",
                "workloads.0.senders",
                (4, 8),
                (4, 8, 14),
                (4, 8, 16, 32),
            ),
            axis(
                "arrival window T_arrival, µs",
                "workloads.0.jitter_us",
                (1000.0,),
                (100.0, 1000.0, 10000.0),
                (100.0, 1000.0, 10000.0),
            ),
            QUEUE_LIMITS,
        ),
        budgets=budgets(QUICK, STANDARD, Budget(20, 60.0, 10.0, BIG_LEAVES)),
        quick_gives_up="N_burst 16 and 32, windows but 1 ms, two queue limits, 18 of 20 "
        "repetitions",
    ),
    (si.PFC, si.PFC_THRESHOLD, si.HOL),
    notes="Arrival within 100 µs is as exact as host scheduling allows (about 1 ms).",
)


def _order(order: str, seconds: float) -> dict[str, object]:
    later_ms = seconds * 1000 / 3  # the second class joins a third of the way in
    kv_at, ep_at = (0.0, later_ms) if order == "kv-then-ep" else (later_ms, 0.0)
    steps = int((seconds * 1000 - ep_at) / 100)
    kv = kv_stream(hosts(4), ["h4"], 0.8, seconds, start_ms=kv_at)
    ep = alltoall(["h0", "h4", "h5", "h6"], 7168, 2, 512, step_interval_ms=100.0, steps=steps)
    return {"workloads": [kv, ep | {"start_ms": ep_at}]}


ORDERS = Axis(
    "which class is added to the other (KV at 80% then EP, and the reverse)",
    {
        p: tuple(
            Point(o, _order(o, DEFAULT_BUDGETS[p].duration_s)) for o in ("kv-then-ep", "ep-then-kv")
        )
        for p in PROFILES
    },
)

CC_CONVERGENCE = Procedure(
    "8.3",
    "Congestion control convergence for mixed traffic",
    CATEGORY,
    "substitute",
    ("Convergence_time", "JFI", "Fabric_Goodput", "Packet_drop_rate"),
    Sweep(
        base(
            [kv_stream(hosts(4), ["h4"], 0.8, 10.0)],
            scale={"bandwidth": 1.0e-3, "time_dilation": "auto"},
        ),
        (
            ORDERS,
            axis(
                "TCP congestion control",
                "agents.cc",
                ("cubic",),
                ("cubic", "bbr"),
                ("cubic", "reno", "bbr"),
            ),
        ),
        budgets=budgets(QUICK, STANDARD, DRAFT),
        quick_gives_up="cubic only and 18 of 20 repetitions",
    ),
    (si.CC, si.ECN),
    notes="Convergence: the time from the second class's start until both classes' rates "
    "stay within 5% of their steady state (rates binned from the flows table).",
)

PFC_STORM = Procedure(
    "8.4",
    "PFC storm and deadlock resilience",
    CATEGORY,
    "not_feasible",
    ("PFC_storm", "Deadlock", "Pause_propagation_depth", "Recovery_time"),
    why_not="needs PFC PAUSE and a cyclic buffer dependency: OVS and HTB queues on this "
    "kernel cannot pause a link, so there is no storm or deadlock to provoke (only a "
    "pure simulation could model it)",
)

PROCEDURES = (ECN_INCAST, PFC_BURST, CC_CONVERGENCE, PFC_STORM)

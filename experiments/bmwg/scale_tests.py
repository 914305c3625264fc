"""Categories 8 and 9 of the draft: scale and autoscaling (12.1–12.3), soak and
stability (13.1–13.3)."""

from __future__ import annotations

from experiments.bmwg import stand_ins as si
from experiments.bmwg.bases import base, serving, spine_leaf
from experiments.bmwg.model import (
    DEFAULT_BUDGETS,
    PROFILES,
    Axis,
    Budget,
    Point,
    Procedure,
    Substitute,
    Sweep,
    budgets,
)
from experiments.bmwg.throughput_tests import PROMPTS, SLO_BOUNDED_RATE

SCALE, SOAK = "Scale and autoscaling", "Soak and stability"
DECODE6 = [2, 3, 4, 5, 6, 7]
AT_80 = 0.8 * SLO_BOUNDED_RATE  # 12.3 and 13.x serve at 80% of the SLO-bounded rate


def _size(gpus: int) -> Point:
    prefill = max(1, gpus // 4)
    return Point(
        f"{gpus}gpus",
        {
            "fabric": spine_leaf(leaves=max(2, gpus // 4), hosts_per_leaf=4),
            "workloads.0.prefill.servers": list(range(prefill)),
            "workloads.0.decode.servers": list(range(prefill, gpus)),
            "workloads.0.arrivals.synthetic.rate_per_s": gpus * 1.0,
        },
    )


SCALE_LIMITS = Procedure(
    "12.1",
    "Fabric scale limits for inference clusters",
    SCALE,
    "substitute",
    ("TTFT", "TPS_output", "KV_xfer_latency", "KV_BW", "Scale_limit"),
    Sweep(
        base([serving([0, 1], DECODE6, 8.0, PROMPTS, 128)]),
        (
            Axis(
                "cluster size, GPUs (doubling)",
                {
                    p: tuple(_size(n) for n in ns)
                    for p, ns in (
                        ("quick", (4, 8)),
                        ("standard", (4, 8, 16)),
                        ("draft", (4, 8, 16, 32, 64)),
                    )
                },
            ),
        ),
        quick_gives_up="16 GPUs and more, 18 of 20 repetitions",
    ),
    (
        Substitute(
            "control-plane convergence and routing-table size",
            "left out: not recorded per run (the controller installs its rules before traffic)",
        ),
        Substitute(
            "up to 1024 nodes / 8192 GPUs",
            "what one machine emulates: the draft profile stops at 64 GPUs",
        ),
    ),
    notes="Scale limit: the first size at which a KPI is > 10% worse than the smallest "
    "(reference criterion). Offered load grows with the GPUs (1 req/s each).",
)

AUTOSCALING = Procedure(
    "12.2",
    "Dynamic autoscaling response time",
    SCALE,
    "not_feasible",
    ("Convergence_time", "First_transfer_time", "Steady_state_time"),
    why_not="a serving pool is fixed when the run starts: no spec key adds or removes "
    "decode instances during a run (faults.agent_kill is a failure, not a drain), so "
    "there is no scale event to time",
)

FAILURES = {
    "leaf-spine": [["leaf1", "spine0"]],
    "decode-leaf": [["h4", "leaf1"]],
    "2x leaf-spine": [["leaf0", "spine0"], ["leaf1", "spine1"]],
    "2x decode-leaf": [["h4", "leaf1"], ["h5", "leaf1"]],
}


# Fault_disruption is how long these stop getting through: prefill GPUs to decode GPUs
# across the spine, through each failed link (h4, h5 behind leaf1)
FAILURE_PROBES = {
    "kind": "probe",
    "pairs": [["h0", "h4"], ["h1", "h5"], ["h0", "h5"], ["h1", "h4"]],
    "rate_hz": 100,
    "size_bytes": 200,
    "tenant": "probe",
}


def _failure(name: str, profile: str) -> Point:
    seconds = DEFAULT_BUDGETS[profile].duration_s
    down, up = round(seconds / 3, 3), round(2 * seconds / 3, 3)
    faults = [{"at_s": down, "link_down": link} for link in FAILURES[name]]
    faults += [{"at_s": up, "link_up": link} for link in FAILURES[name]]
    return Point(name, {"faults": faults})


LINK_FAILURE = Procedure(
    "12.3",
    "Link failure convergence impact on serving",
    SCALE,
    "implemented",
    ("Fault_disruption", "Convergence_time", "TTFT", "TPS_output", "Recovery_time"),
    Sweep(
        base([serving([0, 1], DECODE6, AT_80, PROMPTS, 128), FAILURE_PROBES]),
        (
            Axis(
                "failure (leaf-spine, decode leaf link; single and dual)",
                {p: tuple(_failure(f, p) for f in FAILURES) for p in PROFILES},
            ),
        ),
        quick_gives_up="18 of 20 repetitions per failure",
    ),
    notes="The controller's reroute is this fabric's convergence. Spine-spine links need "
    "a three-tier fabric: run it with a fat_tree --fabric (core links). Served at 80% of "
    "the SLO-bounded rate (11.3's default until 11.1 gives it).",
)

SOAK_BUDGETS = budgets(Budget(1, 120.0, 10.0), Budget(1, 1800.0, 60.0), Budget(1, 86400.0, 600.0))
SOAK_BASE = base([serving([0, 1], DECODE6, AT_80, PROMPTS, 128)])
SOAK_GIVES_UP = "23 h 58 min of the 24 h: a 2-minute soak shows no slow trend or leak"

SUSTAINED = Procedure(
    "13.1",
    "24-hour sustained inference load",
    SOAK,
    "substitute",
    (
        "Trend",
        "TTFT",
        "ITL",
        "TPS_output",
        "KV_xfer_latency",
        "Link_utilization",
        "Packet_drop_rate",
    ),
    Sweep(
        SOAK_BASE,
        (Axis("soak (one run)", {p: (Point("soak", {}),) for p in PROFILES}),),
        budgets=SOAK_BUDGETS,
        quick_gives_up=SOAK_GIVES_UP,
    ),
    (si.SOAK, si.QP_ERRORS, si.ECN),
    notes="Switch CPU and memory: the machine's CPU (cpu table) only.",
)

LEAKS = Procedure(
    "13.2",
    "KV cache memory leak detection",
    SOAK,
    "not_feasible",
    ("Trend",),
    why_not="no memory is sampled over a run: no per-worker GPU or CPU memory, "
    "registered-memory, pinned-memory or active-KV-page time series (the KV tiers "
    "record per-request outcomes only), so there is no curve to test for growth",
)


def _flap(profile: str) -> Point:
    mid = round(SOAK_BUDGETS[profile].duration_s / 2, 3)
    flap = {"link": ["leaf1", "spine0"], "period_ms": 2000.0, "count": 1}
    return Point("flap-at-midpoint", {"faults": [{"at_s": mid, "link_flap": flap}]})


STABILITY = Procedure(
    "13.3",
    "Long-running serving stability",
    SOAK,
    "substitute",
    ("Trend", "Recovery_time", "Packet_drop_rate", "Buffer_utilization"),
    Sweep(
        SOAK_BASE,
        (Axis("one link flap at the mid-point", {p: (_flap(p),) for p in PROFILES}),),
        budgets=SOAK_BUDGETS,
        quick_gives_up=SOAK_GIVES_UP,
    ),
    (
        si.SOAK,
        si.QP_ERRORS,
        Substitute(
            "BGP/OSPF adjacency flaps",
            "controller and link events of the run (events.json)",
        ),
        Substitute("FEC and CRC error trends", "left out: emulated links have no PHY"),
    ),
)

PROCEDURES = (SCALE_LIMITS, AUTOSCALING, LINK_FAILURE, SUSTAINED, LEAKS, STABILITY)

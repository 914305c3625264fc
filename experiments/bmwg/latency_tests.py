"""Category 6 of the draft: latency (10.1–10.4)."""

from __future__ import annotations

from experiments.bmwg import stand_ins as si
from experiments.bmwg.bases import alltoall, background, base, serving
from experiments.bmwg.model import (
    PROFILES,
    Axis,
    Budget,
    Point,
    Procedure,
    Substitute,
    Sweep,
    axis,
    budgets,
)

CATEGORY = "Latency"
N_REQUESTS = "workloads.0.arrivals.synthetic.n"
DECODE6 = [2, 3, 4, 5, 6, 7]

PROMPT_TTFT = Procedure(
    "10.1",
    "TTFT under varying prompt lengths",
    CATEGORY,
    "implemented",
    ("TTFT", "TTFT_fabric", "Fabric_fraction", "TTFT_decomposition"),
    Sweep(
        base([serving([0], [4], 0.5, 1024, 4)]),
        (
            axis(
                "prompt length, tokens",
                "workloads.0.arrivals.synthetic.input_tokens",
                (128, 2048, 16384),
                (128, 512, 2048, 8192, 16384),
                (128, 256, 512, 1024, 2048, 4096, 8192, 16384),
            ),
        ),
        budgets=budgets(
            Budget(2, 16.0, 2.0, {N_REQUESTS: 8}),
            Budget(3, 60.0, 5.0, {N_REQUESTS: 30}),
            Budget(1, 200.0, 10.0, {N_REQUESTS: 100}),  # the draft's >= 100 per length
        ),
        quick_gives_up="five of eight prompt lengths and 16 instead of 100 requests each",
    ),
    notes="Single requests at 0.5 req/s on 1P1D across the spine (CFG-A, Table 9). "
    "T_transfer at the application, as in 6.1.",
)

SAMPLES = {"quick": 1, "standard": 3, "draft": 5}  # 2048-token requests: 5 give >= 10,000 ITLs
ITL_BUDGETS = budgets(Budget(2, 25.0, 2.0), Budget(3, 40.0, 5.0), Budget(20, 60.0, 10.0))


def _condition(name: str, profile: str) -> Point:
    requests = serving([0, 1], DECODE6, 1.0, 1024, 2048)
    requests["arrivals"]["synthetic"]["n"] = SAMPLES[profile]
    extra = {
        "idle": [],
        "bg50": [background(0.5)],
        "bg90+ep": [
            background(0.9),
            alltoall(["h1", "h3", "h5", "h7"], 7168, 2, 8, step_interval_ms=100.0)
            | {"steps": int(ITL_BUDGETS[profile].duration_s * 10)},
        ],
    }[name]
    return Point(name, {"workloads": [requests, *extra]})


ITL_TAIL = Procedure(
    "10.2",
    "ITL characterization and tail latency",
    CATEGORY,
    "substitute",
    ("ITL", "ITL_stalls", "ITL_fabric"),
    Sweep(
        base([serving([0, 1], DECODE6, 1.0, 1024, 2048)]),
        (
            Axis(
                "fabric condition (idle, 50% background, 90% background + EP dispatch)",
                {p: tuple(_condition(c, p) for c in ("idle", "bg50", "bg90+ep")) for p in PROFILES},
            ),
        ),
        budgets=ITL_BUDGETS,
        quick_gives_up="one 2048-token request per trial (2,047 ITLs, not 10,000)",
    ),
    (
        Substitute(
            "ITL_fabric: the EP dispatch round trip per decode step at DUT-F",
            "the decode step's fabric messages (TP all-reduce, or the all-to-all steps "
            "when an EP tenant runs); µs resolution is not available",
        ),
        si.ECN,
    ),
    notes="Token pacing comes from the emulated decode model; stalls are ITL > 100 ms.",
)


def _tenancy(name: str) -> Point:
    victim = serving([0, 1], [4, 5], 4.0, 2048, 64) | {"tenant": "a"}
    other = {
        "single": [],
        "+ep": [
            alltoall(["h2", "h3", "h6", "h7"], 4096, 2, 8192, step_interval_ms=100.0, steps=100)
            | {"tenant": "b"}
        ],
        "+kv": [
            {"kind": "kv_transfer", "tenant": "b", "model": "llama-3.1-8b", "tokens": [8192] * 60}
            | {"prefill_hosts": ["h2", "h3"], "decode_hosts": ["h6", "h7"], "rate_rps": 6.0}
            | {"prefill_tp": 1, "decode_tp": 1}
        ],
    }[name]
    return Point(name, {"workloads": [victim, *other]})


MULTI_TENANT = Procedure(
    "10.3",
    "End-to-end latency under multi-tenant load",
    CATEGORY,
    "substitute",
    ("TTFT", "ITL", "E2E_latency", "Interference_penalty"),
    Sweep(
        base([serving([0, 1], [4, 5], 4.0, 2048, 64)]),
        (
            Axis(
                "tenancy (alone; with an MoE tenant; with a KV-transfer tenant)",
                {p: tuple(_tenancy(t) for t in ("single", "+ep", "+kv")) for p in PROFILES},
            ),
        ),
        quick_gives_up="18 of 20 repetitions and trial length",
    ),
    (
        Substitute(
            "two or more model instances, each a serving pool",
            "one serving tenant (a spec holds one serving workload) beside an MoE "
            "all-to-all tenant or a KV-transfer tenant on the same fabric",
        ),
    ),
)


def _load(load: float) -> Point:
    work = [serving([0, 1], DECODE6, 4.0, 2048, 64)] + ([background(load)] if load else [])
    return Point(f"bg{load:.0%}", {"workloads": work})


CONGESTION_SENSITIVITY = Procedure(
    "10.4",
    "Latency sensitivity to fabric congestion",
    CATEGORY,
    "implemented",
    ("TTFT", "ITL", "Inflection_point", "Degradation_factor"),
    Sweep(
        base([serving([0, 1], DECODE6, 4.0, 2048, 64)]),
        (
            Axis(
                "background load, % of capacity (0–95% in 5% steps)",
                {
                    "quick": tuple(_load(x) for x in (0.0, 0.5, 0.9)),
                    "standard": tuple(_load(x) for x in (0.0, 0.25, 0.5, 0.75, 0.9)),
                    "draft": tuple(_load(i / 20) for i in range(20)),
                },
            ),
        ),
        quick_gives_up="17 of 20 load levels and 18 of 20 repetitions",
    ),
    notes="Near saturation the fabric is lossy (drop-tail + TCP), not lossless.",
)

PROCEDURES = (PROMPT_TTFT, ITL_TAIL, MULTI_TENANT, CONGESTION_SENSITIVITY)

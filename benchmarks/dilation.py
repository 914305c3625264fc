"""dilation: does time dilation (``scale.time_dilation``) keep a run's answers while it
trades wall time for grain and size? Three parts, each through ``kvfabric run`` itself:

- **invariance**: the flagship (``topology-aware-placement``, topology-aware router),
  ``incast-collapse`` (8 senders, 16-packet buffer) and ``noisy-neighbour`` (ecmp, no
  classes), each at d = 1, 2 and 4 (same ``scale.bandwidth``) over ``SEEDS`` seeds.
  For each headline figure (TTFT, ITL, KV transfer p50 and p99; incast goodput and FCT)
  the mean over seeds at d is set beside the mean and spread at d = 1. The test: d
  agrees with 1 when ``|mean_d - mean_1| <= max(2 sd_1, range_1)`` over the seeds
  (``agrees``); every run's verdict is in the rows, and a run judged unfaithful is
  not counted (the row says so).
- **grain**: the classic incast at real packet sizes (Phanishayee et al. FAST'08,
  Vasudevan et al. SIGCOMM'09): ``scale.bandwidth: 1`` (one packet is one packet),
  1 Gbit/s host links, a 32 KB switch buffer (21 frames), a 1 MB block striped over
  1-32 senders, Reno without delayed ACKs or tail-loss probes, at d = 16 (1 Gbit/s links shaped to
  62.5 Mbit/s of wall time). Goodput against senders with the kernel's 200 ms minimum
  RTO and with a 1 ms one (``transport.rto_min_ms``, applied x d on every host route).
- **size**: the scale-64 benchmark's 16-, 64- and 128-GPU serving specs at
  ``time_dilation: auto`` (when the planner resolves it), each with its d, its verdict
  and the wall seconds per real-equivalent second.

``--quick``: d = 1 and 2 over two seeds of the incast only, and the grain at 1 and 16
senders; what it gives up: the serving figures, noisy-neighbour and the size part.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import result, show

NAME = "dilation"
SEEDS = 3
DILATIONS = (1, 2, 4)
SERVING = ("ttft_ms", "itl_ms", "kv_transfer_ms")
INVARIANCE = {  # spec -> --set overrides that fix one point of its sweep
    "incast-collapse": ["sweep={}", "fabric.buffer_pkts=16", "workloads.0.senders=8"],
    "topology-aware-placement": ["sweep={}", "workloads.0.router=topology_aware"],
    "noisy-neighbour": ["sweep={}", "controller.policy=ecmp"],
}
# the kernel's 200 ms minimum RTO kept in real-equivalent time at every d (without it,
# a d = 2 run's RTO is 100 ms real and the tails it sets halve: measured, incast FCT p99
# 243 ms at d = 1 against 131 ms at d = 2)
TRANSPORT = "transport.rto_min_ms=200"
GRAIN_SPEC = """
name: incast-real-packets
seed: 3
duration_s: 6
scale: {{bandwidth: 1, time_dilation: {d}}}
fabric: {{kind: spine_leaf, spines: 1, leaves: 1, hosts_per_leaf: 33,
         host_gbps: 1, uplink_gbps: 1, buffer_pkts: 21}}
controller: {{policy: shortest_path}}
transport: {{rto_min_ms: {rto}, delayed_ack: false, tail_loss_probe: false}}
agents: {{cc: reno}}
workloads:
  - {{kind: incast, receiver: h0, senders: {n}, sru_bytes: {sru}, rounds: {rounds}}}
"""
BLOCK_BYTES = 1 << 20
GRAIN_D = 16


# ----- pure parts (unit-tested) ------------------------------------------------------
def figures(summary: dict[str, Any]) -> dict[str, float]:
    """The headline figures of one run's summary.json metrics."""
    m, out = summary.get("metrics") or {}, {}
    for key in SERVING:
        for q in ("p50", "p99"):
            value = (m.get(key) or {}).get(q)
            if value is not None:
                out[f"{key}_{q}"] = value
    incast = m.get("incast") or {}
    if incast.get("goodput_mbps"):
        out["incast_goodput_mbps"] = incast["goodput_mbps"]["mean"]
        for q in ("p50", "p99"):
            out[f"fct_ms_{q}"] = (m.get("fct_ms") or {}).get(q)
    return {k: v for k, v in out.items() if v is not None}


def agreement(by_d: dict[int, list[dict[str, float]]]) -> list[dict[str, Any]]:
    """Per figure and d > 1: mean over seeds at d beside the mean, sd and range at d = 1,
    and whether they agree (``|mean_d - mean_1| <= max(2 sd_1, range_1)``)."""
    base = by_d.get(1) or []
    rows = []
    for name in sorted({k for runs in by_d.values() for r in runs for k in r}):
        ones = [r[name] for r in base if name in r]
        if len(ones) < 2:
            continue
        m1, sd1, rng1 = statistics.mean(ones), statistics.stdev(ones), max(ones) - min(ones)
        for d in sorted(k for k in by_d if k != 1):
            vals = [r[name] for r in by_d[d] if name in r]
            if not vals:
                continue
            md = statistics.mean(vals)
            rows.append(
                {
                    "figure": name,
                    "d": d,
                    "mean_d": md,
                    "mean_1": m1,
                    "sd_1": sd1,
                    "range_1": rng1,
                    "n_1": len(ones),
                    "n_d": len(vals),
                    "ratio": md / m1 if m1 else None,
                    "agrees": abs(md - m1) <= max(2 * sd1, rng1),
                }
            )
    return rows


# ----- runs --------------------------------------------------------------------------
def run_one(spec: str, sets: list[str], seed: int | None = None) -> tuple[dict, float]:
    """``kvfabric run --force`` of ``spec`` (a bundled name or YAML text) with ``sets``;
    its summary and the wall seconds it took."""
    from experiments.orchestration.runner import run_spec
    from experiments.spec.load import expand, find_bundled, load_spec

    with tempfile.TemporaryDirectory(prefix="kvfabric-bench-") as tmp:
        source = find_bundled(spec) if "\n" not in spec else spec
        loaded = load_spec(source, sets, seed=seed)
        t = time.monotonic()
        outcomes = run_spec(loaded, expand(loaded), Path(tmp), force=True)
        wall = time.monotonic() - t
        if any(str(o.summary.get("error", "")).startswith("interrupt") for o in outcomes):
            raise KeyboardInterrupt  # Ctrl-C stops the benchmark, not only this run
        (path,) = Path(tmp).glob("*/*/summary.json")
        return json.loads(path.read_text()), wall


def _verdict(s: dict) -> str:
    checks = (s.get("fidelity") or {}).get("checks") or {}
    failed = [k for k, c in checks.items() if not c.get("ok")]
    if s.get("error"):
        return f"error: {s['error']}"
    return "ok" if (s.get("fidelity") or {}).get("ok") else "failed " + ", ".join(failed)


def invariance(specs: list[str], dilations: tuple[int, ...], seeds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in specs:
        runs, by_d = [], {}
        for d in dilations:
            for i in range(seeds):
                s, wall = run_one(
                    spec, [*INVARIANCE[spec], TRANSPORT, f"scale.time_dilation={d}"], 1 + i
                )
                verdict = _verdict(s)
                figs = figures(s)
                runs.append(
                    {"d": d, "seed": s.get("seed"), "verdict": verdict, "wall_s": wall} | figs
                )
                if verdict == "ok":
                    by_d.setdefault(d, []).append(figs)
        out[spec] = {"runs": runs, "agreement": agreement(by_d)}
    return out


def grain(senders: list[int], rtos: list[float], rounds: int) -> list[dict[str, Any]]:
    rows = []
    for rto in rtos:
        for n in senders:
            text = GRAIN_SPEC.format(d=GRAIN_D, rto=rto, n=n, sru=BLOCK_BYTES // n, rounds=rounds)
            s, wall = run_one(text, [])
            incast = (s.get("metrics") or {}).get("incast") or {}
            good = (incast.get("goodput_mbps") or {}).get("mean")
            rows.append(
                {
                    "rto_min_ms": rto,
                    "senders": n,
                    "goodput_mbps": good,  # scale 1: emulated = real Mbit/s
                    "round_ms_p50": (incast.get("round_ms") or {}).get("p50"),
                    "drops": ((s.get("metrics") or {}).get("drops") or {}).get("total"),
                    "verdict": _verdict(s),
                    "wall_s": wall,
                }
            )
    return rows


SIZES = [(4, 4), (8, 8), (16, 8), (32, 8)]  # servers x GPUs per server: 16 ... 256 GPUs
SIZE_REPEATS = {16: 1, 64: 5, 128: 3, 256: 3}


def size(sizes: list[tuple[int, int]], repeats: dict[int, int], duration: float) -> list[dict]:
    """The scale-64 benchmark's serving specs at ``time_dilation: auto``: per run, the d
    the planner chose, the verdict and the wall seconds per real-equivalent second."""
    from . import scale

    rows = []
    for servers, gpus in sizes:
        half = servers // 2
        text = scale.SPEC.format(
            duration=duration,
            servers=servers,
            gpus=gpus,
            processes="auto",
            prefill=list(range(half)),
            decode=list(range(half, servers)),
            n=24,
        ).replace("scale: {bandwidth: 1.0e-4}", "scale: {bandwidth: 1.0e-4, time_dilation: auto}")
        for i in range(repeats.get(servers * gpus, 1)):
            s, wall = run_one(text, [], seed=1 + i)
            dil = (s.get("envelope") or {}).get("time_dilation") or {}
            served = ((s.get("metrics") or {}).get("serving") or {}).get("served")
            rows.append(
                {
                    "gpus": servers * gpus,
                    "seed": s.get("seed"),
                    "d": s.get("time_dilation"),
                    "auto": dil.get("auto"),
                    "verdict": _verdict(s),
                    "failed": {
                        k: c.get("detail")
                        for k, c in ((s.get("fidelity") or {}).get("checks") or {}).items()
                        if not c.get("ok")
                    },
                    "served": served,
                    "wall_s": wall,
                    "wall_per_real_s": wall / duration,
                }
            )
    return rows


def _invariance_rows(inv: dict[str, Any]) -> list[list[Any]]:
    return [
        [spec, r["figure"], r["d"], r["mean_d"], r["mean_1"], r["sd_1"], r["ratio"], r["agrees"]]
        for spec, v in inv.items()
        for r in v["agreement"]
    ]


INVARIANCE_COLUMNS = ["spec", "figure", "d", "mean at d", "mean at 1", "sd at 1", "ratio", "agrees"]
GRAIN_COLUMNS = [
    "min RTO ms",
    "senders",
    "goodput Mbit/s",
    "round ms p50",
    "drops",
    "verdict",
    "wall s",
]
SIZE_COLUMNS = ["GPUs", "seed", "d", "verdict", "served", "wall s", "wall s per real s"]


def _grain_rows(grains: list[dict[str, Any]]) -> list[list[Any]]:
    keys = ("rto_min_ms", "senders", "goodput_mbps", "round_ms_p50", "drops", "verdict", "wall_s")
    return [[r[k] for k in keys] for r in grains]


def _size_rows(sizes: list[dict[str, Any]]) -> list[list[Any]]:
    keys = ("gpus", "seed", "d", "verdict", "served", "wall_s", "wall_per_real_s")
    return [[r[k] for k in keys] for r in sizes]


def collapse(grains: list[dict[str, Any]]) -> tuple[int | None, float | None, float | None]:
    """The most senders of the grain part, and its goodput with a 200 ms and a 1 ms
    minimum RTO (faithful runs only)."""
    ok = [r for r in grains if r["verdict"] == "ok"]
    collapsed = {r["senders"]: r["goodput_mbps"] for r in ok if r["rto_min_ms"] == 200}
    recovered = {r["senders"]: r["goodput_mbps"] for r in ok if r["rto_min_ms"] == 1}
    both = sorted(set(collapsed) & set(recovered))
    if not both:
        return None, None, None
    return both[-1], collapsed[both[-1]], recovered[both[-1]]


def run_invariance(quick: bool = False) -> dict:
    """The invariance part alone (``kvfabric bench dilation-invariance``)."""
    inv = (
        invariance(["incast-collapse"], (1, 2), 2)
        if quick
        else invariance(list(INVARIANCE), DILATIONS, SEEDS)
    )
    rows = [r for spec in inv.values() for r in spec["agreement"]]
    agree = sum(r["agrees"] for r in rows)
    record = result(
        "dilation-invariance",
        value=agree,
        baseline=len(rows),
        unit="figures whose mean at d agrees with d = 1 within the seeds' spread, of figures",
        target="every figure agrees across d",
        target_met=None,
        quick=quick,
        invariance=inv,
    )
    show(record, INVARIANCE_COLUMNS, _invariance_rows(inv))
    return record


def run_grain(quick: bool = False) -> dict:
    """The grain part alone (``kvfabric bench dilation-grain``)."""
    grains = grain([1, 16] if quick else [1, 4, 8, 16, 32], [200, 1], 10)
    most, value, baseline = collapse(grains)
    record = result(
        "dilation-grain",
        value=value,
        baseline=baseline,
        unit=f"Mbit/s incast goodput at {most} senders, real packets: 200 ms vs 1 ms min RTO",
        target="goodput collapses with a 200 ms minimum RTO and recovers with a 1 ms one",
        target_met=None,
        quick=quick,
        grain=grains,
    )
    show(record, GRAIN_COLUMNS, _grain_rows(grains))
    return record


def run_size(quick: bool = False) -> dict:
    """The size part alone (``kvfabric bench dilation-size``)."""
    sizes = size(SIZES[:2] if quick else SIZES, {16: 1, 64: 1} if quick else SIZE_REPEATS, 12.0)
    faithful = sum(r["verdict"] == "ok" for r in sizes)
    record = result(
        "dilation-size",
        value=faithful,
        baseline=len(sizes),
        unit="runs judged faithful at time_dilation auto, of runs",
        target="every run faithful",
        target_met=None,
        quick=quick,
        size=sizes,
    )
    show(record, SIZE_COLUMNS, _size_rows(sizes))
    return record


def run(quick: bool = False) -> dict:
    """All three parts in one record (``kvfabric bench dilation``): each part's own
    table and verdict line as it finishes, then the whole; ``--quick`` leaves out size."""
    inv = run_invariance(quick)
    grains = run_grain(quick)
    sizes = [] if quick else run_size()["size"]
    return result(
        NAME,
        value=grains["value"],
        baseline=grains["baseline"],
        unit=grains["unit"],
        target="every figure agrees across d; goodput collapses with a 200 ms RTO and recovers",
        target_met=None,
        quick=quick,
        invariance=inv["invariance"],
        agreement=f"{inv['value']} of {inv['baseline']} figures agree",
        grain=grains["grain"],
        size=sizes,
    )

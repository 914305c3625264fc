"""queue-theory: mean queue of one egress fed by Poisson packet arrivals (UDP,
fixed 1514-byte frames) at load ρ = 0.5, 0.7, 0.9, against M/D/1:
Lq = ρ² / (2(1 − ρ)).

h0 sends one-packet UDP messages at Poisson instants (agents, absolute send
times) to h1 across a spine: hosts run at 50 Mbit/s, the leaf0 → spine0 uplink
at 5 Mbit/s is the only queue (2.42 ms per frame). The queue sampler reads the
uplink's pfifo backlog at 1 kHz; its time average is the measured queue.

What "in queue" means here: HTB dequeues a packet from the pfifo only when it
has the tokens for it, and veth then carries it at once, so serialisation is
HTB's token debt, not a packet sitting somewhere. A packet is in the pfifo
from arrival until its transmission *starts*: the pfifo backlog is M/D/1's Lq
(waiting, service excluded), not L = Lq + ρ. That holds exactly for a token
bucket one packet deep; kvfabric's HTB bucket is ``burst_bytes`` (≥ 2 frames),
and HTB sends while its tokens are >= 0 (charging the frame after), so after an idle spell
up to three packets leave back to back and the queue is
shorter than M/D/1's. The table shows both references computed on the very
send instants of the run: an ideal M/D/1 server and HTB's token bucket.
"""

from __future__ import annotations

import numpy as np

from controller.ofctl import StaticRules
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.scale import Scale
from topologies.shaping import MTU_BYTES, burst_bytes
from traffic.workloads.schedule import build_schedule

from .common import failed_checks, md1_lq, relative_error, result, show, trial

NAME = "queue-theory"
SCALE = Scale(5e-4)  # hosts 100 Gbit/s -> 50 Mbit/s, uplinks 10 Gbit/s -> 5 Mbit/s
RHOS = [0.5, 0.7, 0.9]
PAYLOAD = MTU_BYTES - 14 - 28  # UDP payload of a full 1514-byte frame
WARMUP_S = 0.5


def poisson_instants(rate_hz: float, seconds: float, rng: np.random.Generator) -> np.ndarray:
    gaps = rng.exponential(1 / rate_hz, size=int(rate_hz * seconds * 1.2) + 100)
    t = np.cumsum(gaps)
    return t[t < seconds]


def token_bucket_backlog(
    arrivals_s: np.ndarray, rate_bps: float, bucket_bytes: float, frame_bytes: int, span_s: float
) -> float:
    """Time-average number of packets waiting in a FIFO in front of a token bucket
    (rate, depth) with an instant link: a packet waits until the bucket holds its
    bytes. With a bucket one frame deep this is M/D/1's Lq."""
    rate = rate_bps / 8
    tokens, t_last, d_prev, wait = bucket_bytes, 0.0, -np.inf, 0.0
    for a in arrivals_s:
        t = max(a, d_prev)
        tokens = min(bucket_bytes, tokens + rate * (t - t_last))
        if tokens < frame_bytes:
            t += (frame_bytes - tokens) / rate
            tokens = frame_bytes
        tokens -= frame_bytes
        t_last = d_prev = t
        wait += t - a
    return wait / span_s


def htb_bucket_bytes(rate_bps: int) -> int:
    """HTB sends while its tokens are >= 0 and then charges the frame, so its bucket
    holds ``burst`` plus one frame in the usual (send when tokens >= frame) terms."""
    return burst_bytes(rate_bps) + MTU_BYTES


def measure(net, rho: float, seconds: float, seed: int) -> dict:
    fabric = net.fabric
    link = fabric.link_between("leaf0", "spine0")
    rate_bps = SCALE.link_bps(link.real_gbps)
    service_s = MTU_BYTES * 8 / rate_bps
    instants = poisson_instants(rho / service_s, seconds, np.random.default_rng(seed))
    n = len(instants)
    schedule = build_schedule(
        {
            "kind": ["probe"] * n,
            "tenant": ["bench"] * n,
            "src": ["h0"] * n,
            "dst": ["h1"] * n,
            "bytes": np.full(n, PAYLOAD),
            "t_sched_ns": (instants * 1e9).astype(np.int64),
            "chunk": np.arange(n),
            "proto": ["udp"] * n,
            "scaled": np.zeros(n, dtype=bool),
        }
    )
    port = link.port_of("leaf0")
    run = trial(net, schedule, SCALE, queue_hz=1000, timeout_s=seconds + 20)
    t0, q, flows = run["payload"], run["queues"], run["flows"]
    q = q[(q["node"] == "leaf0") & (q["port"] == port)]
    t_rel = (q["t_ns"].to_numpy() - t0) / 1e9
    window = (t_rel >= WARMUP_S) & (t_rel <= seconds)
    backlog = q["backlog_pkts"].to_numpy()[window]
    sent = flows["t_start_ns"].dropna().to_numpy(dtype=np.float64)
    sent_s = np.sort((sent - t0) / 1e9)
    span = seconds - WARMUP_S
    in_window = sent_s[sent_s >= WARMUP_S]
    # The models count waiting time of packets arriving in the window over its span.
    md1_here = token_bucket_backlog(in_window, rate_bps, MTU_BYTES, MTU_BYTES, span)
    htb_here = token_bucket_backlog(
        in_window, rate_bps, htb_bucket_bytes(rate_bps), MTU_BYTES, span
    )
    measured = float(backlog.mean()) if backlog.size else float("nan")
    theory = md1_lq(rho)
    late = flows["issue_lateness_ms"].dropna()
    return {
        "rho": rho,
        "packets": n,
        "achieved_rho": len(in_window) / span * service_s,
        "lq_measured": measured,
        "lq_md1": theory,
        "error_vs_md1": relative_error(measured, theory),
        "md1_on_these_arrivals": md1_here,
        "htb_bucket_on_these_arrivals": htb_here,
        "error_vs_htb_model": relative_error(measured, htb_here) if htb_here else None,
        "samples": int(backlog.size),
        "lost": int((~flows["ok"]).sum()),
        "send_lateness_p99_ms": float(late.quantile(0.99)) if len(late) else None,
        "fidelity_ok": run["verdict"]["ok"],
        "failed_checks": failed_checks(run["verdict"]),
    }


def run(quick: bool = False) -> dict:
    seconds = 12.0 if quick else 60.0
    fabric = spine_leaf(1, 2, 1, host_gbps=100, uplink_gbps=10)
    with FabricNetwork(fabric, SCALE, rules=StaticRules()) as net:
        rows = [measure(net, rho, seconds, seed=i) for i, rho in enumerate(RHOS)]
    worst = max(rows, key=lambda r: r["error_vs_md1"])
    met = all(r["error_vs_md1"] <= 0.25 for r in rows)
    rate = SCALE.link_bps(10)
    limit = (
        ""
        if met
        else (
            f"HTB's burst is {burst_bytes(rate)} bytes "
            "(>= 2 frames: topologies.shaping.burst_bytes) "
            "and HTB sends while its tokens are >= 0, so after an idle spell up to 3 packets leave "
            "back to back where M/D/1 serves one at a time: the queue is shorter than M/D/1's, "
            "most at low ρ (at ρ=0.9 idle spells are rare and it matches); the token-bucket model "
            "on the same send instants (htb_bucket_on_these_arrivals) is what the emulation "
            "should match, and sampling/send jitter is the rest"
        )
    )
    record = result(
        NAME,
        value=worst["lq_measured"],
        baseline=worst["lq_md1"],
        unit="packets (mean pfifo backlog, worst ρ)",
        target="within 25% of M/D/1 at each ρ",
        target_met=met,
        quick=quick,
        seconds_per_rho=seconds,
        egress_mbps=rate / 1e6,
        frame_bytes=MTU_BYTES,
        htb_burst_bytes=burst_bytes(rate),
        rhos=rows,
        limit=limit,
        worst_rho=worst["rho"],
    )
    show(
        record,
        [
            "ρ",
            "ρ achieved",
            "Lq measured",
            "M/D/1 Lq",
            "error",
            "M/D/1 on arrivals",
            "HTB bucket model",
            "error vs HTB",
            "send p99 ms",
            "fidelity",
        ],
        [
            [
                r["rho"],
                r["achieved_rho"],
                r["lq_measured"],
                r["lq_md1"],
                r["error_vs_md1"],
                r["md1_on_these_arrivals"],
                r["htb_bucket_on_these_arrivals"],
                r["error_vs_htb_model"],
                r["send_lateness_p99_ms"],
                "ok" if r["fidelity_ok"] else ", ".join(r["failed_checks"]),
            ]
            for r in rows
        ],
    )
    return record

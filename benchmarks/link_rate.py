"""link-rate: achieved ÷ configured rate of a saturated switch egress at 5
emulated rates. Two iperf3 senders (h0, h1) into one receiver (h2) keep a
standing queue at leaf0's egress to h2; the queue sampler's dequeued bytes
over the standing-queue stretches give the achieved rate (whole frames, as
HTB counts them, so 1.0 is faithful), judged at the rates the fidelity
monitor accepts (its verdict over the same run). iperf3's goodput against the
TCP ceiling (rate × 1448/1514) is reported beside it.
"""

from __future__ import annotations

import threading
import time

import pandas as pd

from controller.ofctl import StaticRules
from experiments.analysis.fidelity import busy_dequeue
from experiments.measurement.iperf import TCP_GOODPUT_FRACTION, Transfer, iperf3
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.scale import Scale

from .common import failed_checks, result, show, trial_verdict

NAME = "link-rate"
RATES_MBPS = [10, 50, 100, 200, 400]
HOST_GBPS = 100.0


def saturate(net, seconds: float, begin) -> tuple[list[Transfer], pd.DataFrame]:
    """Two concurrent iperf3 transfers into h2; their flows rows for the verdict.
    Sampling begins once the transfers are under way (past iperf3's start-up)."""
    out: list[Transfer | BaseException] = [None, None]  # type: ignore[list-item]

    def one(i: int, src: str) -> None:
        try:
            out[i] = iperf3(net, src, "h2", seconds=seconds, port=5301 + i)
        except BaseException as exc:  # re-raised in the caller
            out[i] = exc

    t0 = time.monotonic_ns()
    threads = [threading.Thread(target=one, args=(i, s)) for i, s in enumerate(["h0", "h1"])]
    for t in threads:
        t.start()
    time.sleep(0.6)
    begin()
    for t in threads:
        t.join()
    t1 = time.monotonic_ns()
    for o in out:
        if isinstance(o, BaseException):
            raise o
    flows = pd.DataFrame(
        {
            "src": [o.src for o in out],
            "dst": [o.dst for o in out],  # type: ignore[union-attr]
            "bytes": [o.raw["end"]["sum_received"]["bytes"] for o in out],  # type: ignore[union-attr]
            "t_start_ns": [t0, t0],
            "t_end_ns": [t1, t1],
        }
    )
    return out, flows  # type: ignore[return-value]


def measure(rate_mbps: float, seconds: float) -> dict:
    scale = rate_mbps * 1e6 / (HOST_GBPS * 1e9)
    fabric = spine_leaf(1, 1, 3, host_gbps=HOST_GBPS, uplink_gbps=HOST_GBPS)
    egress = ("leaf0", fabric.link_between("leaf0", "h2").port_of("leaf0"))
    with FabricNetwork(fabric, Scale(scale), rules=StaticRules()) as net:
        judged = trial_verdict(net, lambda begin: saturate(net, seconds, begin), queue_hz=200)
    transfers, queues = judged["payload"], judged["queues"]
    rate = {egress: rate_mbps * 1e6}  # the verdict's rule: the queue could not have emptied
    busy = busy_dequeue(
        queues[(queues["node"] == egress[0]) & (queues["port"] == egress[1])], rates_bps=rate
    )
    achieved = float(busy["bps"].iloc[0]) / 1e6 if not busy.empty else None
    goodput = sum(t.goodput_mbps for t in transfers)
    return {
        "configured_mbps": rate_mbps,
        "achieved_mbps": achieved,
        "ratio": achieved / rate_mbps if achieved else None,
        "busy_s": float(busy["busy_s"].iloc[0]) if not busy.empty else 0.0,
        "iperf3_goodput_mbps": goodput,
        "goodput_of_tcp_ceiling": goodput / (rate_mbps * TCP_GOODPUT_FRACTION),
        "fidelity_ok": judged["verdict"]["ok"],
        "failed_checks": failed_checks(judged["verdict"]),
        "cpu_p95_pct": judged["verdict"]["checks"]["cpu"]["value"],
    }


def run(quick: bool = False) -> dict:
    seconds = 2.0 if quick else 8.0
    rows = [measure(r, seconds) for r in RATES_MBPS]
    accepted = [r for r in rows if r["fidelity_ok"] and r["ratio"] is not None]
    value = min((r["ratio"] for r in accepted), default=None)
    met = bool(accepted) and all(r["ratio"] >= 0.95 for r in accepted)
    limit = ""
    if not met:
        low = [
            f"{r['configured_mbps']} Mbit/s ({r['ratio']:.3f})"
            for r in accepted
            if r["ratio"] < 0.95
        ]
        limit = (
            f"below 0.95 at {', '.join(low)}"
            if low
            else "no rate was accepted by the fidelity monitor"
        )
    record = result(
        NAME,
        value=value,
        baseline=1.0,
        unit="achieved / configured (worst accepted rate)",
        target=">= 0.95 at every rate the fidelity monitor accepts",
        target_met=met,
        quick=quick,
        seconds=seconds,
        rates=rows,
        limit=limit,
        rejected=[r["configured_mbps"] for r in rows if not r["fidelity_ok"]],
    )
    show(
        record,
        [
            "configured Mbit/s",
            "achieved Mbit/s",
            "ratio",
            "standing s",
            "iperf3 of TCP ceiling",
            "CPU p95 %",
            "fidelity ok",
            "failed checks",
        ],
        [
            [
                r["configured_mbps"],
                r["achieved_mbps"],
                r["ratio"],
                r["busy_s"],
                r["goodput_of_tcp_ceiling"],
                r["cpu_p95_pct"],
                r["fidelity_ok"],
                ", ".join(r["failed_checks"]),
            ]
            for r in rows
        ],
    )
    return record

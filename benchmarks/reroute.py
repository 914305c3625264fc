"""reroute: time from a link going down to the controller's last rule sent and
acknowledged (its event log), and to traffic recovered (probes), under ecmp on
spine_leaf 2x2x2 with the os-ken controller.

Probes: one-packet UDP messages at 500 Hz on every cross-leaf host pair (8
pairs), so some of them hash onto the failed uplink. The link leaf0-spine0 is
taken down and up again (``repeat`` times); for each down: the controller's
port-status time, last rule sent, last barrier acknowledged (all
``time.monotonic_ns`` in one clock) minus the instant ``ip link set down``
was issued, and the recovery time = last probe lost after the down
(its send instant + one probe period) minus that instant.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from controller.process import ControllerProcess
from topologies import spine_leaf
from topologies.builder import Controller, FabricNetwork
from topologies.scale import Scale
from traffic.workloads import probe

from .common import result, show, trial

NAME = "reroute"
SCALE = Scale()  # the default: 400 Gbit/s runs at 40 Mbit/s
PROBE_HZ = 500
FIRST_DOWN_S, CYCLE_S, DOWN_FOR_S = 1.0, 2.5, 1.2


def faults(net, repeat: int, downs: list[int]) -> tuple:
    """An ``on_start`` that takes leaf0-spine0 down and up ``repeat`` times in a thread."""
    threads: list[threading.Thread] = []

    def go(t0_ns: int) -> None:
        for k in range(repeat):
            at = t0_ns + int((FIRST_DOWN_S + k * CYCLE_S) * 1e9)
            time.sleep(max(0.0, (at - time.monotonic_ns()) / 1e9))
            downs.append(time.monotonic_ns())
            net.set_link("leaf0", "spine0", up=False)
            time.sleep(DOWN_FOR_S)
            net.set_link("leaf0", "spine0", up=True)

    def on_start(t0_ns: int) -> None:
        th = threading.Thread(target=go, args=(t0_ns,), daemon=True)
        th.start()
        threads.append(th)

    return on_start, threads


def run(quick: bool = False) -> dict:
    repeat = 1 if quick else 5
    fabric = spine_leaf(2, 2, 2)
    left, right = ["h0", "h1"], ["h2", "h3"]  # the hosts of leaf0 and of leaf1
    pairs = [(a, b) for a in left for b in right] + [(b, a) for a in left for b in right]
    seconds = FIRST_DOWN_S + repeat * CYCLE_S
    schedule = probe(pairs, PROBE_HZ, 100, seconds)
    downs: list[int] = []
    with (
        tempfile.TemporaryDirectory(prefix="kvfabric-bench-") as run_dir,
        ControllerProcess(fabric, "ecmp", Path(run_dir)) as ctl,
        FabricNetwork(fabric, SCALE, controller=Controller(port=ctl.port)) as net,
    ):
        ctl.wait_ready(timeout_s=60)
        on_start, threads = faults(net, repeat, downs)
        out = trial(net, schedule, SCALE, timeout_s=seconds + 20, on_start=on_start)
        for th in threads:
            th.join(timeout=30)
        time.sleep(0.3)
        events = ctl.client.events()
        errors = ctl.errors()
    if errors:
        raise RuntimeError(f"controller reported: {errors[0][:300]}")
    flows = out["flows"]
    reroutes = [e for e in events if e["event"] == "reroute" and e.get("down")]
    sched = flows["t_sched_ns"].to_numpy(dtype=np.float64)
    lost = ~flows["ok"].to_numpy(dtype=bool)
    cycles = []
    for t_down in downs:
        ev = next((e for e in reroutes if e["t_ns"] >= t_down), None)
        window = (sched >= t_down) & (sched < t_down + DOWN_FOR_S * 1e9)
        lost_here = sched[window & lost]
        cycles.append(
            {
                "detect_ms": (ev["t_ns"] - t_down) / 1e6 if ev else None,
                "last_rule_sent_ms": (ev["t_last_sent_ns"] - t_down) / 1e6 if ev else None,
                "last_rule_acked_ms": (
                    (ev["t_installed_ns"] - t_down) / 1e6 if ev and "t_installed_ns" in ev else None
                ),
                "recovered_ms": (
                    (lost_here.max() - t_down) / 1e6 + 1e3 / PROBE_HZ if lost_here.size else 0.0
                ),
                "probes_lost": int(lost_here.size),
                "probes_in_window": int(window.sum()),
            }
        )
    lost_before = int((lost & (sched < downs[0])).sum()) if downs else None

    def med(key: str) -> float | None:
        vals = [c[key] for c in cycles if c[key] is not None]
        return statistics.median(vals) if vals else None

    record = result(
        NAME,
        value=med("last_rule_acked_ms"),
        baseline=None,
        unit="ms (link down → rules acked)",
        target="report",
        target_met=None,
        quick=quick,
        policy="ecmp",
        fabric="spine_leaf 2x2x2",
        link="leaf0-spine0",
        probe_hz=PROBE_HZ,
        pairs=len(pairs),
        median={
            k: med(k)
            for k in ("detect_ms", "last_rule_sent_ms", "last_rule_acked_ms", "recovered_ms")
        },
        cycles=cycles,
        probes_lost_before_fault=lost_before,
    )
    show(
        record,
        [
            "down #",
            "detected ms",
            "last rule sent ms",
            "last rule acked ms",
            "traffic recovered ms",
            "probes lost",
        ],
        [
            [
                i,
                c["detect_ms"],
                c["last_rule_sent_ms"],
                c["last_rule_acked_ms"],
                c["recovered_ms"],
                f"{c['probes_lost']}/{c['probes_in_window']}",
            ]
            for i, c in enumerate(cycles)
        ],
    )
    return record

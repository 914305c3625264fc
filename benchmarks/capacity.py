"""capacity: the highest aggregate offered load (switch-hop Mbit/s, as the
fidelity monitor counts it) at which the fidelity verdict stays ok, against the
raw switching capacity of this machine's OVS datapath measured in the same run:
iperf3 h0 → h1 through one switch with the shaping removed (1 and 4 streams,
the better one).

The load: spine_leaf 2x2x4, every host of leaf0 sends to its peer on leaf1 and
the hosts of leaf1 send 2-to-1 to h0 and h1 (standing queues at leaf0, so the
dequeue-rate check has something to judge): 6 host links' worth of payload
crossing 3 switches = 18 × the host rate. The host rate is stepped so the load
is a fraction of the measured raw capacity; the verdict's offered-load check
uses the measured capacity, not the configured KVFABRIC_SWITCH_CAPACITY_MBPS.
"""

from __future__ import annotations

import numpy as np

from experiments.fidelity import offered_switching_mbps
from experiments.iperf import iperf3
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.shaping import switch_capacity_mbps
from topologies.system import run as run_cmd
from traffic.workloads.schedule import build_schedule

from .common import failed_checks, result, show, trial

NAME = "capacity"
HOST_GBPS = 100.0
SWITCHES_PER_FLOW = 3
HOST_LINKS_DELIVERED = 6  # 4 one-to-one flows + 2 receivers of a 2-to-1 incast


def raw_capacity(seconds: float) -> dict:
    """iperf3 through one unshaped switch (payload Mbit/s = switch-hop Mbit/s)."""
    fabric = spine_leaf(1, 1, 2, host_gbps=HOST_GBPS, uplink_gbps=HOST_GBPS)
    with FabricNetwork(fabric, 1e-2) as net:
        for host in ("h0", "h1"):
            link = fabric.link_between(host, "leaf0")
            net.mn(host).pexec("tc", "qdisc", "del", "dev", net.intf(host, link.port_of(host)),
                               "root")  # fmt: skip
            run_cmd(["tc", "qdisc", "del", "dev", net.intf("leaf0", link.port_of("leaf0")), "root"])
        streams = {p: iperf3(net, "h0", "h1", seconds=seconds, parallel=p).goodput_mbps
                   for p in (1, 4)}  # fmt: skip
    return {"mbps": max(streams.values()), "by_streams": streams}


def load_schedule(rate_mbps: float, seconds: float, scale: float):
    """Bytes (real-equivalent) so every flow lasts ``seconds`` at its fair share."""
    full = rate_mbps * 1e6 * seconds / 8 / scale
    pairs = [(f"h{i}", f"h{i + 4}", full) for i in range(4)]
    pairs += [(f"h{4 + i}", f"h{i // 2}", full / 2) for i in range(4)]
    n = len(pairs)
    return build_schedule({
        "kind": ["background"] * n, "tenant": ["bench"] * n,
        "src": [p[0] for p in pairs], "dst": [p[1] for p in pairs],
        "bytes": np.array([int(p[2]) for p in pairs]), "t_sched_ns": np.zeros(n, dtype=np.int64),
    })  # fmt: skip


def step(fraction: float, raw_mbps: float, seconds: float) -> dict:
    rate = fraction * raw_mbps / (HOST_LINKS_DELIVERED * SWITCHES_PER_FLOW)
    scale = rate * 1e6 / (HOST_GBPS * 1e9)
    fabric = spine_leaf(2, 2, 4, host_gbps=HOST_GBPS, uplink_gbps=4 * HOST_GBPS)
    with FabricNetwork(fabric, scale) as net:
        out = trial(net, load_schedule(rate, seconds, scale), scale, timeout_s=seconds * 3 + 10,
                    capacity_mbps=raw_mbps)  # fmt: skip
    offered, _ = offered_switching_mbps(out["flows"], fabric)
    checks = out["verdict"]["checks"]
    return {
        "fraction_planned": fraction, "host_mbps": rate, "offered_mbps": offered,
        "fidelity_ok": out["verdict"]["ok"], "failed_checks": failed_checks(out["verdict"]),
        "checks": {k: c["value"] for k, c in checks.items()},
        "flows_ok": int(out["flows"]["ok"].sum()), "flows": len(out["flows"]),
    }  # fmt: skip


def run(quick: bool = False) -> dict:
    seconds = 3.0 if quick else 8.0
    fractions = [0.4, 0.7, 1.0] if quick else [0.2, 0.4, 0.6, 0.8, 0.9, 1.0]
    raw = raw_capacity(seconds)
    steps = [step(f, raw["mbps"], seconds) for f in fractions]
    ok = [s["offered_mbps"] for s in steps if s["fidelity_ok"] and s["offered_mbps"]]
    value = max(ok) if ok else None
    met = value is not None and value / raw["mbps"] >= 0.6
    first_bad = next((s for s in steps if not s["fidelity_ok"]), None)
    limit = ""
    if not met:
        limit = (f"from {first_bad['offered_mbps']:.0f} Mbit/s offered the verdict failed on "
                 f"{', '.join(first_bad['failed_checks'])}: the 2 cores that switch the packets "
                 "(OVS userspace) also run the agents, samplers and TCP stacks"
                 if first_bad else "no step passed")  # fmt: skip
    record = result(
        NAME, value=value, baseline=raw["mbps"], unit="switch-hop Mbit/s (payload)",
        target=">= 0.6", target_met=met, quick=quick, seconds=seconds, raw=raw, steps=steps,
        configured_capacity_mbps=switch_capacity_mbps(), limit=limit,
        first_failing=first_bad and {"offered_mbps": first_bad["offered_mbps"],
                                     "failed_checks": first_bad["failed_checks"]},
    )  # fmt: skip
    show(record, ["planned × raw", "host Mbit/s", "offered Mbit/s", "of raw", "CPU p95 %",
                  "lateness p99 ms", "dequeue ratio", "verdict"],
         [[s["fraction_planned"], s["host_mbps"], s["offered_mbps"],
           (s["offered_mbps"] or 0) / raw["mbps"], s["checks"]["cpu"], s["checks"]["lateness"],
           s["checks"]["dequeue_rate"],
           "ok" if s["fidelity_ok"] else ", ".join(s["failed_checks"])]
          for s in steps])  # fmt: skip
    return record

"""A recorded run as the ``RunTables`` its KPIs are computed from: the tables after the
warm-up (``window.measured``), the measured seconds, and from its spec the scale, the
queue limit, each switch port's capacity and the uplinks (a port from a lower to a
higher tier, ``topologies.fabric.TIER``)."""

from __future__ import annotations

from typing import Any

from experiments.analysis.bmwg.per_run import RunTables
from experiments.analysis.bmwg.window import measured
from experiments.output.results import Run
from experiments.spec.typed import fabric_of
from topologies.fabric import TIER, Fabric
from topologies.scale import Scale


def port_capacities(fabric: Fabric, bandwidth: float) -> dict[str, float]:
    """``"node:port"`` → emulated Mbit/s of every switch egress (time dilation aside:
    the tables read in real-equivalent time)."""
    out = {}
    for link in fabric.links:
        for end in link.ends():
            if not fabric.by_name[end].is_host:
                out[f"{end}:{link.port_of(end)}"] = link.real_gbps * 1000.0 * bandwidth
    return out


def uplink_ports(fabric: Fabric) -> tuple[str, ...]:
    """The switch ports that face a higher tier (leaf → spine, rail → spine, …)."""
    out = []
    for link in fabric.links:
        a, b = (fabric.by_name[n] for n in link.ends())
        if a.is_host or b.is_host or link.kind != "fabric":
            continue
        low = a if TIER.get(a.kind, 0) < TIER.get(b.kind, 0) else b
        if TIER.get(a.kind, 0) != TIER.get(b.kind, 0):
            out.append(f"{low.name}:{link.port_of(low.name)}")
    return tuple(sorted(out))


def _ep_ranks(spec: dict[str, Any]) -> int:
    for w in spec.get("workloads") or []:
        if isinstance(w, dict) and w.get("kind") == "moe_alltoall":
            return len(w.get("group") or [])
    return 0


def run_tables(run: Run, test: str, warmup_s: float) -> RunTables:
    """``run``'s KPI inputs for procedure ``test``, its first ``warmup_s`` dropped."""
    config = run.config
    if config is None:
        raise ValueError(f"{run.path}: its spec.yaml cannot be read")
    fabric = fabric_of(config)
    start = int(run.events.get("t0_ns") or 0)
    tables = {}
    for name in ("flows", "requests", "tokens", "queues", "links"):
        table = run.table(name)
        tables[name] = None if table is None else measured(table, name, start, warmup_s)
    requests = tables["requests"]
    decode = requests["decode_host"].nunique() if requests is not None and len(requests) else 1
    buffers = [lk.buffer_pkts for lk in fabric.links if lk.kind == "fabric"]
    return RunTables(
        test=test,
        seconds=max(1e-9, config.duration_s - warmup_s),
        scale=Scale(config.scale.bandwidth, config.scale.mtu),
        buffer_pkts=float(max(buffers, default=64)),
        capacity_mbps=port_capacities(fabric, config.scale.bandwidth),
        uplinks=uplink_ports(fabric),
        decode_gpus=max(1, int(decode)),
        ep_ranks=_ep_ranks(run.spec),
        faults=tuple((run.summary.get("metrics") or {}).get("faults") or ()),
        **tables,
    )

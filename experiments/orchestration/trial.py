"""One measured trial on a running fabric, judged as a run is judged: a schedule on the
agents under the queue and CPU samplers, then the fidelity verdict over what they saw.
``kvfabric calibrate`` and the benchmarks measure with it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from topologies.scale import Scale


def switch_ports(net: Any) -> dict[str, tuple[str, int]]:
    """Interface name -> (switch, port) of every shaped switch egress."""
    return {
        net.intf(e.node, e.port): (e.node, e.port)
        for e in net.plan
        if not net.fabric.node(e.node).is_host
    }


def trial(
    net: Any,
    schedule: Any,
    scale: Scale,
    *,
    queue_hz: float = 200.0,
    timeout_s: float = 60.0,
    on_start: Callable[[int], None] | None = None,
    capacity_mbps: float | None = None,
) -> dict[str, Any]:
    """Run ``schedule`` on agents under the samplers of a real run: ``trial_verdict``
    whose payload is the fleet's t0 (ns). Sampling begins once every agent is ready."""
    from traffic.agents import AgentFleet

    def work(begin: Callable[[], None]) -> tuple[int | None, Any]:
        def started(t0_ns: int) -> None:
            begin()
            if on_start is not None:
                on_start(t0_ns)

        with (
            tempfile.TemporaryDirectory(prefix="kvfabric-bench-") as run_dir,
            AgentFleet(net, run_dir, schedule, scale) as fleet,
        ):
            flows = fleet.run(timeout_s=timeout_s, on_start=started)
            return fleet.t0_ns, flows

    return trial_verdict(net, work, queue_hz=queue_hz, capacity_mbps=capacity_mbps)


def trial_verdict(
    net: Any,
    work: Callable[[Callable[[], None]], tuple[Any, Any]],
    *,
    queue_hz: float = 200.0,
    capacity_mbps: float | None = None,
) -> dict[str, Any]:
    """Run ``work(begin)`` (returning (payload, flows table)); ``begin()`` starts the queue
    and CPU samplers, so the steady state is judged and not the start-up of agents or
    tools (dozens of Python imports on 2 cores). The fidelity verdict over what they saw."""
    from experiments.analysis.fidelity import egress_rates_bps, verdict
    from experiments.measurement import tcpcount
    from experiments.measurement.samplers import CpuSampler, QueueSampler

    samplers = [QueueSampler(switch_ports(net), queue_hz), CpuSampler()]
    started: list[Any] = []

    def begin() -> None:
        for s in samplers[len(started) :]:
            s.start()
            started.append(s)

    hosts = [h.name for h in net.fabric.hosts]
    tcp_before = tcpcount.host_counters(net, hosts)
    try:
        payload, flows = work(begin)
    finally:
        for s in reversed(started):
            s.stop(raise_error=s is samplers[0])
    tcp = tcpcount.totals(tcpcount.delta(tcp_before, tcpcount.host_counters(net, hosts)))
    queues, cpu = samplers
    rates = {
        "queues": (queues.achieved_hz, queues.requested_hz),
        "cpu": (cpu.achieved_hz, cpu.requested_hz),
    }
    judged = verdict(
        flows,
        queues.table() if started else None,
        cpu.table() if len(started) > 1 else None,
        rates,
        egress_rates_bps(net.plan),
        net.fabric,
        capacity_mbps=capacity_mbps,
        tcp=tcp,
        mtu=net.mtu,
    )
    return {
        "payload": payload,
        "flows": flows,
        "queues": queues.table() if started else None,
        "verdict": judged,
    }


def failed_checks(judged: Mapping[str, Any]) -> list[str]:
    return [n for n, c in judged.get("checks", {}).items() if not c["ok"]]

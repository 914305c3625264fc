"""A run report's "Grain of the fabric's queues": one row per class of egress queue
(``topologies.grain.queue_grain``) with what its packets and buffer stand for on the
real fabric, the run's hottest queue in that class (from ``summary.json``'s
``queue_pkts.hottest``), and what the emulation cannot represent at that grain.
Nothing here reads a table: the fabric is rebuilt from the run's configuration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from experiments.output.formatting import fmt
from experiments.spec.config import RunConfig
from experiments.spec.typed import fabric_of
from topologies.fabric import FabricError
from topologies.grain import (
    QueueGrain,
    base_rtt,
    dilation_sentence,
    limits_sentence,
    queue_grain,
    rtt_sentence,
)

HEADER = (
    "| egress | ports | real Gbit/s | real bytes per packet | buffer (packets) "
    "| buffer (emulated bytes) | buffer (µs of the real port) | BDP (packets) "
    "| shaped (Mbit/s of wall time) | hottest queue of this run |"
)


def grain_lines(config: RunConfig | None, hottest: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The report's grain section (empty when the run's configuration is unknown);
    ``hottest`` is ``queue_pkts.hottest`` of the run's metrics, hottest first."""
    if config is None:
        return []
    try:
        fabric = fabric_of(config)
    except FabricError:
        return []
    scale = config.scale
    rtt = base_rtt(fabric, scale)
    lines = [
        "### Grain of the fabric's queues",
        "",
        "Every egress queue, grouped by its link's real rate and its buffer "
        "(real-equivalent time):",
        "",
        HEADER,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in queue_grain(fabric, scale, rtt):
        lines.append(
            f"| {', '.join(row.directions)} | {row.n_ports} | {fmt(row.real_gbps)} "
            f"| {row.real_bytes_per_packet:,.0f} | {row.buffer_pkts} | {row.buffer_bytes:,} "
            f"| {fmt(row.buffer_real_us)} | {fmt(row.bdp_pkts)} | {fmt(row.wall_mbps)} "
            f"| {_hottest_in(row, hottest)} |"
        )
    lines.append("")
    lines += [
        f"- {s}" for s in (rtt_sentence(rtt), dilation_sentence(scale), limits_sentence(scale))
    ]
    return [*lines, ""]


def _hottest_in(row: QueueGrain, hottest: Sequence[dict[str, Any]]) -> str:
    """The hottest of the run's hottest queues that is in ``row``'s class, as
    ``node:port (mean, max packets)``; "–" when none is."""
    ports = set(row.ports)
    for q in hottest:
        port = _port_number(q.get("port"))
        if (q.get("node"), port) in ports:
            return (
                f"{q['node']}:{port} (mean {fmt(q.get('mean_pkts'))}, "
                f"max {fmt(q.get('max_pkts'))} packets)"
            )
    return "–"


def _port_number(port: Any) -> int | None:
    """A queue table's port: the fabric's port number (``3``, or ``"eth3"``)."""
    text = str(port).removeprefix("eth")
    return int(text) if text.isdigit() else None

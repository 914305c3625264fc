"""The report's account of what a message latency is made of here (pure): per point of a
test with a message-latency KPI, the median fct of its completed TCP messages split
into the real fabric's wire time, what the emulation's packet grain adds, and the
emulator's own excess (``experiments.analysis.latency_parts``), so a reader can tell
a fabric's latency from this machine's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from experiments.bmwg.aggregate import LATENCY_PARTS, counted
from experiments.bmwg.catalog import BY_ID
from experiments.output.formatting import fmt

# the KPIs a message's completion time makes
MESSAGE_LATENCY_KPIS = frozenset({"KV_xfer_latency", "Fabric_FCT", "EP_alltoall_latency"})
EMULATOR_BOUND = 1.0  # the least-delayed tenth's excess ÷ the model's time (wire + grain)


def latency_points(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (test, point) with a message-latency KPI and measured parts, over its counted
    runs: the medians of each run's ``fct_p50_ms`` and parts, its time dilations, n."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        test = str(r.get("test"))
        if test not in BY_ID or not MESSAGE_LATENCY_KPIS & set(BY_ID[test].kpis):
            continue
        if counted(r) and r.get("fct_p50_ms") is not None:
            groups.setdefault((test, str(r.get("point"))), []).append(r)
    out = []
    for (test, point), runs in groups.items():
        got: dict[str, Any] = {"test": test, "point": point, "n": len(runs)}
        for key in LATENCY_PARTS:
            known = [float(r[key]) for r in runs if r.get(key) is not None]
            got[key] = median(known) if known else None
        got["dilations"] = sorted({r.get("time_dilation") for r in runs} - {None})
        model = (got["wire_p50_ms"] or 0.0) + (got["grain_p50_ms"] or 0.0)
        floor = got["excess_p10_ms"]
        got["floor_ratio"] = floor / model if model > 0 and floor is not None else None
        out.append(got)
    return out


def latency_section(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's section (empty without such points)."""
    points = latency_points(rows)
    if not points:
        return []
    lines = [
        "## What a message latency is made of here",
        "",
        "Per point of a test with a message-latency KPI (KV_xfer_latency, Fabric_FCT, "
        "EP_alltoall_latency): the median completion time of its completed TCP messages "
        "(median over the counted runs of each run's median, real-equivalent ms) and its "
        "parts. **wire**: the real fabric's time for the same bytes (serialised at the "
        "path's slowest hop, one real frame store-and-forwarded on each other hop). "
        "**grain**: what the emulation's packets add (each stands for the real bytes of one"
        " frame ÷ scale.bandwidth and is store-and-forwarded whole on every hop; a "
        "per-message connection's handshake is counted here): modelled, and a finer "
        "scale.bandwidth shrinks it. **excess**: the rest, what a model of an idle path "
        "does not have: the emulator's own cost (the kernels' stacks, the agents, OVS's "
        "userspace forwarding: wall time, read ÷ the time dilation d) and, under load, "
        "queueing and retransmission (the fabric's). **excess p10**: the excess of the "
        "least-delayed tenth of the messages, those that met the least queueing: the "
        "emulator's cost as near as a run shows it; ÷ wire + grain it is the **floor ÷ "
        "model**. **burst**: the most the shapers' bursts (one wall millisecond at "
        "each hop's rate, 1/d ms real-equivalent) can take off an idle path: an excess down"
        " to −burst is messages let through unpaced, not a faster fabric (at d = 1 a "
        "message under a millisecond of wire time can beat its own serialisation).",
        "",
        "| test | point | d | runs | fct p50 ms | wire | grain | burst | excess | "
        "excess p10 | floor ÷ model |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    bound, grained, bursting = [], [], []
    for p in points:
        share = p["floor_ratio"]
        d = "/".join(fmt(x) for x in p["dilations"]) or "–"
        cells = [fmt(p[k]) if p[k] is not None else "–" for k in LATENCY_PARTS]
        fct, wire, grain, excess, burst, floor = cells
        lines.append(
            f"| {p['test']} | {p['point']} | {d} | {p['n']} | {fct} | {wire} | {grain} | "
            f"{burst} | {excess} | {floor} | {'–' if share is None else fmt(share)} |"
        )
        name = f"{p['test']} {p['point']}"
        if share is not None and share >= EMULATOR_BOUND:
            bound.append(name)
        if p["grain_p50_ms"] >= p["wire_p50_ms"]:
            grained.append(name)
        if p["excess_p50_ms"] < 0 and p["fct_p50_ms"] < p["wire_p50_ms"]:
            bursting.append(name)
    lines.append("")
    if bound:
        lines.append(
            "Even the least-delayed tenth's excess is at least the model's time for the "
            f"message (wire + grain) at {', '.join(bound)}: the emulator's own cost at "
            "that d is most of their message latencies, which describe this machine, not "
            "the fabric."
        )
    if grained:
        lines.append(
            f"The packet grain at least doubles the wire time at {', '.join(grained)}: "
            "their latencies are the emulation's coarse packets as much as the fabric."
        )
    if bursting:
        lines.append(
            f"Faster than the real fabric's wire time at {', '.join(bursting)}: the "
            "shapers' bursts let their messages through unpaced, so their latencies are "
            "understated; a larger d shrinks the bursts (1/d ms)."
        )
    return [*lines, ""]

"""The fidelity verdict: did the emulation stay faithful while it measured?

Pure functions over the recorded tables (no root, no netlink). Each check
returns ``{"ok", "value", "threshold", "unit", "detail"}`` and ``verdict``
gathers them; everything is JSON-serialisable (no NaN: ``None``).

- ``cpu``: the machine was not saturated (p95 of whole-machine CPU).
- ``dequeue_rate``: every egress with a standing queue drained at its
  configured rate (standing: the queue held, at one sample, at least what the
  port can send until the next). A standing queue means HTB was the bottleneck, so the
  pfifo's dequeued bytes over those stretches must grow at the HTB rate. Both
  count whole Ethernet frames (``skb->len``, 14-byte header included, no FCS
  or preamble), so the ratio is 1.0 when faithful: not TCP's 1448/1514.
- ``lateness``: the agents sent on schedule (p99 of ``lateness_ms``).
- ``sampler_rate``: the samplers kept their rate (what they saw is dense enough).
- ``offered_load``: the switch-hop work the run asked for (bytes × switches on
  the path, over the run's busy span) fits this machine's switching capacity.
- ``unmodelled_loss``: TCP lost no more than the shaped queues dropped. Every
  loss the emulation models is a pfifo drop; retransmissions beyond those
  drops (less the ones the receivers reported as duplicates, and one per
  retransmission timeout) were lost where nothing is modelled: OVS or a veth
  fell behind, which the average offered load does not show during bursts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from experiments.analysis.port_series import PortIds, series, standing_stretches
from experiments.measurement.tcpcount import UNMODELLED_PLACES
from experiments.spec.config import Fidelity
from experiments.spec.typed import default_section
from topologies.fabric import Fabric, FabricError
from topologies.shaping import (
    DEFAULT_MTU,
    MTU_BYTES,
    Egress,
    frame_bytes,
    switch_capacity_mbps,
)

# the thresholds of a verdict without a spec (calibration, trials): the spec's defaults
DEFAULT_THRESHOLDS: Fidelity = default_section("fidelity")  # the schema's defaults
CPU_QUANTILE = 0.95
# a core this busy (%) for this long (s) without a break starves what runs on it (OVS's
# one main thread, an agent worker), even when the machine-wide p95 looks fine
SATURATED_CORE_PCT, MAX_SATURATED_S = 95.0, 0.5
# the host taking this share of the CPU (steal) slows the emulation, not what it models:
# measured here, at 36-40 % steal a 46 Mbit/s shaped path carried 23-26 Mbit/s, at 5-9 %
# its rate (tests that judge a rate, and calibrate's refusals, are excused only above it)
BUSY_STEAL_PCT = 20.0
MIN_BUSY_MS = 20.0  # a standing queue must last this long to count
MIN_SAMPLER_RATIO = 0.9
CHECKS = ("cpu", "dequeue_rate", "lateness", "sampler_rate", "offered_load", "unmodelled_loss")
# unexplained retransmissions allowed: this share of segments sent, plus a
# share of the modelled drops (a drop can cost more than one retransmission)
UNMODELLED_SHARE, PER_DROP, MIN_UNEXPLAINED = 0.002, 0.1, 50

Check = dict[str, Any]


def _num(x: Any) -> float | None:
    """A JSON-safe float: None for None/NaN/inf."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def make_check(ok: bool, value: Any, threshold: float, unit: str, detail: str) -> Check:
    return {
        "ok": bool(ok),
        "value": _num(value),
        "threshold": float(threshold),
        "unit": unit,
        "detail": detail,
    }


# ----- cpu -------------------------------------------------------------------
def saturated_core_s(cpu: pd.DataFrame | None, pct: float = SATURATED_CORE_PCT) -> float:
    """The longest stretch (s) over which the busiest core stayed at ≥ ``pct`` at every
    sample (``max_core_pct``; each sample stands for the interval up to it)."""
    if cpu is None or cpu.empty or "max_core_pct" not in cpu:
        return 0.0
    c = cpu.sort_values("t_ns", kind="stable")
    t = c["t_ns"].to_numpy(dtype=np.int64)
    hot = c["max_core_pct"].to_numpy(dtype=float) >= pct
    step = float(np.median(np.diff(t))) if len(t) > 1 else 0.0
    best, start = 0.0, None
    for i, h in enumerate(hot):
        if h and start is None:
            start = i
        if start is not None and (not h or i == len(hot) - 1):
            end = i if h else i - 1
            best = max(best, (t[end] - t[start] + step) / 1e9)
            start = None
    return best


def cpu_check(cpu: pd.DataFrame | None, max_pct: float = 90.0) -> Check:
    """p95 of ``cpu_pct`` (whole machine, 0–100) over the run ≤ ``max_pct``, and no
    core saturated (≥ ``SATURATED_CORE_PCT``) for ``MAX_SATURATED_S`` on end.
    No samples fails: a saturated machine could not be ruled out."""
    pct = _column(cpu, "cpu_pct")
    if pct.size == 0:
        return make_check(False, None, max_pct, "%", "no CPU samples: saturation not ruled out")
    p95 = float(np.quantile(pct, CPU_QUANTILE))
    detail = f"p95 of machine CPU over {pct.size} samples, max {pct.max():.0f}%"
    stretch = saturated_core_s(cpu)
    if cpu is not None and "max_core_pct" in cpu:
        cores = _column(cpu, "max_core_pct")
        if cores.size:
            detail += (
                f"; busiest core p95 {np.quantile(cores, CPU_QUANTILE):.0f}%, "
                f"at ≥ {SATURATED_CORE_PCT:g}% for {stretch:.1f} s at most "
                f"(allowed < {MAX_SATURATED_S:g} s)"
            )
    if cpu is not None and "steal_pct" in cpu:
        steal = _column(cpu, "steal_pct")
        if steal.size and steal.max() > 0:
            detail += (
                f"; of it the hypervisor took (steal) {steal.mean():.0f}% on average, "
                f"p95 {np.quantile(steal, CPU_QUANTILE):.0f}%"
            )
    ok = p95 <= max_pct and stretch < MAX_SATURATED_S
    return make_check(ok, p95, max_pct, "%", detail)


def servers_cpu_check(cpu: pd.DataFrame | None, max_pct: float = 90.0) -> Check:
    """``cpu_check`` on each server of a cluster run (a ``server`` column: each server
    sampled its own CPU): every one must pass; the worst stands for all, and the detail
    names it. Without the column, ``cpu_check`` of the one machine."""
    if cpu is None or cpu.empty or "server" not in cpu:
        return cpu_check(cpu, max_pct)
    each = {str(name): cpu_check(part, max_pct) for name, part in cpu.groupby("server")}
    failed = sorted(n for n, c in each.items() if not c["ok"])
    worst = max(each, key=lambda n: (not each[n]["ok"], each[n]["value"] or 0.0))
    c = dict(each[worst])
    c["ok"] = not failed
    c["detail"] = f"worst server {worst}: {c['detail']}" + (
        f"; failed on {', '.join(failed)}" if failed else f"; {len(each)} servers judged"
    )
    c["by_server"] = {n: {"ok": v["ok"], "value": v["value"]} for n, v in each.items()}
    return c


# ----- dequeue rate ------------------------------------------------------------
def busy_dequeue(
    queues: pd.DataFrame | None,
    min_busy_ms: float = MIN_BUSY_MS,
    rates_bps: Mapping[tuple[str, int], float] | None = None,
) -> pd.DataFrame:
    """Per (node, port): the stretches where the queue stood, summed, spanning
    ≥ ``min_busy_ms``. Columns ``node, port, stretches, busy_s, busy_bytes, bps``
    (bits/s dequeued while busy); ports that never had such a stretch are absent.
    An interval where ``sent_bytes`` went backwards (qdisc re-created) ends a stretch.

    An interval (one sample to the next) stood if the queue was non-empty at both
    ends and, where the port's rate is known (``rates_bps``), held at its start at
    least what the port can send in the interval: a smaller queue may have emptied
    between the samples, and the port then idled for want of packets, not of rate
    (a 100 Mbit/s port sends 62.5 KB, 41 frames, between two 200 Hz samples)."""
    cols = ["node", "port", "stretches", "busy_s", "busy_bytes", "bps"]
    if queues is None or queues.empty:
        return pd.DataFrame([], columns=cols)
    ports = PortIds()
    pid = ports.of(queues)
    order, _ = series(pid, queues["t_ns"])
    n, span_ns, nbytes = standing_stretches(
        pid[order],
        queues["t_ns"].to_numpy(dtype=np.int64)[order],
        queues["sent_bytes"].to_numpy(dtype=np.int64)[order],
        queues["backlog_pkts"].to_numpy()[order],
        queues["backlog_bytes"].to_numpy(dtype=np.float64)[order],
        ports.values(rates_bps or {}),
        min_busy_ms * 1e6,
    )
    rows = [
        [node, port, int(n[i]), span_ns[i] / 1e9, int(nbytes[i]), nbytes[i] * 8e9 / span_ns[i]]
        for i, (node, port) in enumerate(ports.keys)
        if n[i]
    ]
    return pd.DataFrame(sorted(rows, key=lambda r: (r[0], r[1])), columns=cols)


def evidence_bytes(stretches: int, tolerance: float, frame: int = MTU_BYTES) -> float:
    """Bytes a port must dequeue while busy before its rate is judged: each
    stretch's ends can be off by about a packet (counters move a frame at a
    time), so the relative error is ~2 frames × sqrt(stretches) / bytes; ask
    for it to be a quarter of the tolerance."""
    return 4 * 2 * frame * math.sqrt(stretches) / tolerance


def dequeue_rate_check(
    queues: pd.DataFrame | None,
    rates_bps: Mapping[tuple[str, int], float],
    tolerance: float = 0.05,
    frame: int = MTU_BYTES,
    min_busy_ms: float = MIN_BUSY_MS,
) -> Check:
    """Each egress with a standing queue drained within ``tolerance`` of its
    configured rate (``rates_bps[(node, port)]``, bit/s; ``frame``: the bytes the
    counters move by). Value: the worst port's achieved/configured ratio (farthest from 1)."""
    busy = busy_dequeue(queues, min_busy_ms, rates_bps)
    return judge_dequeue(busy, rates_bps, tolerance, frame, min_busy_ms)


def judge_dequeue(
    busy: pd.DataFrame,
    rates_bps: Mapping[tuple[str, int], float],
    tolerance: float = 0.05,
    frame: int = MTU_BYTES,
    min_busy_ms: float = MIN_BUSY_MS,
) -> Check:
    """``dequeue_rate_check`` of the standing-queue stretches ``busy`` (``busy_dequeue``'s
    columns; a run judged as it goes sums them over its stretches of samples)."""
    unit = "x configured"
    judged, short, unknown = [], [], []
    for r in busy.itertuples(index=False):
        where = f"{r.node}:{r.port}"
        rate = rates_bps.get((r.node, r.port))
        if not rate:
            unknown.append(where)
        elif r.busy_bytes < evidence_bytes(r.stretches, tolerance, frame):
            short.append(where)
        else:
            judged.append((r.bps / rate, where, r))
    notes = []
    if short:
        notes.append(f"too little standing-queue time to judge: {_few(short)}")
    if unknown:
        notes.append(f"no configured rate for {_few(unknown)}")
    if not judged:
        why = f"no egress had a standing queue for ≥ {min_busy_ms:g} ms"
        return make_check(True, None, tolerance, unit, "; ".join([why, *notes]))
    ratio, where, r = max(judged, key=lambda j: abs(j[0] - 1))
    ok = all(abs(j[0] - 1) <= tolerance for j in judged)
    bad = [w for q, w, _ in judged if abs(q - 1) > tolerance]
    detail = (
        f"worst {where}: {r.bps / 1e6:.3f} of {rates_bps[(r.node, r.port)] / 1e6:.3f} Mbit/s "
        f"over {r.busy_s * 1e3:.0f} ms of standing queue; {len(judged)} port(s) judged"
    )
    if bad:
        detail += f"; off by more than {tolerance:.0%}: {_few(bad)}"
    return make_check(ok, ratio, tolerance, unit, "; ".join([detail, *notes]))


def split_by_rate(
    queues: pd.DataFrame | None,
    rates_bps: Mapping[tuple[str, int], float],
    changes: Mapping[tuple[str, int], Sequence[tuple[int, float]]],
) -> tuple[pd.DataFrame | None, dict[tuple[str, int], float]]:
    """The queue samples and configured rates with each port whose rate changed mid-run
    (``changes``: ``(node, port) -> [(t_ns, rate_bps), ...]``, a ``link_degrade``) cut
    into one pseudo-port per stretch of one rate, named ``node@<rate>M`` (e.g.
    ``spine0@2.5M``), so ``dequeue_rate_check`` judges each stretch by its own rate
    and no interval across a change is judged."""
    rates = dict(rates_bps)
    if queues is None or queues.empty or not changes:
        return queues, rates
    out = queues.copy()
    out["node"] = out["node"].astype(object)
    for (node, port), steps in changes.items():
        at = (out["node"] == node) & (out["port"] == port)
        if not at.any():
            continue
        t = out.loc[at, "t_ns"].to_numpy(dtype=np.int64)
        bounds = np.array([t_ns for t_ns, _ in sorted(steps)], dtype=np.int64)
        stretch = np.searchsorted(bounds, t, side="right")  # 0: before the first change
        per = [rates_bps.get((node, port), 0.0)] + [r for _, r in sorted(steps)]
        names = [f"{node}@{per[i] / 1e6:g}M" if i else node for i in stretch]
        out.loc[at, "node"] = names
        for rate in per[1:]:
            rates[(f"{node}@{rate / 1e6:g}M", port)] = rate
    return out, rates


def egress_rates_bps(plan: Iterable[Egress]) -> dict[tuple[str, int], int]:
    """Configured rate (bit/s) of every egress of ``plan`` (the one the fabric was shaped
    by: ``FabricNetwork.plan``, ``Deployment.plan``), keyed (node, port)."""
    return {(e.node, e.port): e.rate_bps for e in plan}


# ----- lateness ------------------------------------------------------------------
def lateness_check(flows: pd.DataFrame | None, p99_ms: float = 2.0) -> Check:
    """p99 of the agents' schedule lateness ≤ ``p99_ms``: ``issue_lateness_ms`` (the
    agent's timer lag, without waiting behind earlier messages on a persistent
    connection) where recorded, else ``lateness_ms``; flows that never started have
    none. Rows released by a completed group (``after`` ≥ 0: the next incast round,
    an all-to-all combine) also carry the coordinator's notification round trip;
    they are reported in the detail, not judged. No started flow passes with None."""
    column = "issue_lateness_ms" if flows is not None and "issue_lateness_ms" in flows else None
    dependent = None
    if flows is not None and "after" in flows:
        waits = flows["after"].fillna(-1).astype(int) >= 0
        dependent, flows = flows[waits], flows[~waits]
    late = _column(flows, column or "lateness_ms")
    dep = _column(dependent, column or "lateness_ms") if dependent is not None else late[:0]
    extra = ""
    if dep.size:
        extra = (
            f"; {dep.size} group-released flows, p99 {np.quantile(dep, 0.99):.3f} ms (not judged)"
        )
    if late.size == 0:
        return make_check(True, None, p99_ms, "ms", "no timer-driven flow started" + extra)
    p99 = float(np.quantile(late, 0.99))
    detail = f"p99 over {late.size} flows (p50 {np.median(late):.3f}, max {late.max():.3f} ms)"
    return make_check(p99 <= p99_ms, p99, p99_ms, "ms", detail + extra)


def lateness_apart_from_stalls(
    flows: pd.DataFrame | None, stalls: Sequence[tuple[int, int]]
) -> dict[str, float | int | None]:
    """The lateness the check judges, over the timer-driven flows whose wait (from
    ``t_sched_ns`` to the agent's issue, or its start where no issue was recorded) no
    machine stall overlapped. ``stalls``: (start_ns, end_ns) stretches in which nothing
    in user space ran on a CPU (``experiments.measurement.stalls``), on the agents'
    monotonic clock. What is left is the lateness the emulation itself caused:
    ``{"p99_ms", "kept", "stalled"}`` (p99 None when no flow is left)."""
    none = {"p99_ms": None, "kept": 0, "stalled": 0}
    if flows is None or flows.empty or "t_sched_ns" not in flows:
        return none
    if "after" in flows:
        flows = flows[flows["after"].fillna(-1).astype(int) < 0]
    column = "issue_lateness_ms" if "issue_lateness_ms" in flows else "lateness_ms"
    until = "t_issue_ns" if column == "issue_lateness_ms" else "t_start_ns"
    if column not in flows or until not in flows:
        return none
    late, sched, end = (_floats(flows[c]) for c in (column, "t_sched_ns", until))
    started = np.isfinite(late) & np.isfinite(sched) & np.isfinite(end)
    late, sched, end = late[started], sched[started], end[started]
    hit = np.zeros(late.size, dtype=bool)
    if len(stalls) and late.size:
        s = np.asarray(sorted(stalls), dtype=np.float64)
        reach = np.maximum.accumulate(s[:, 1])  # the latest end among stalls begun so far
        i = np.searchsorted(s[:, 0], end, side="left") - 1  # stalls begun before the issue
        hit = (i >= 0) & (reach[np.clip(i, 0, None)] > sched)
    kept = late[~hit]
    p99 = float(np.quantile(kept, 0.99)) if kept.size else None
    return {"p99_ms": p99, "kept": int(kept.size), "stalled": int(hit.sum())}


# ----- sampler rate ------------------------------------------------------------------
def sampler_rate_check(
    rates: Mapping[str, tuple[float, float] | Mapping[str, float]],
    min_ratio: float = MIN_SAMPLER_RATIO,
) -> Check:
    """Every sampler took ≥ ``min_ratio`` of the ticks asked of it. ``rates``: name ->
    (achieved_hz, requested_hz), or a sampler's ``rates()``: a sampler that lowered its
    rate is judged against what it then asked of itself (``target_hz``), and the detail
    states the resolution it kept. No sampler fails (nothing was watched)."""
    if not rates:
        return make_check(False, None, min_ratio, "x requested", "no sampler ran")
    got = {n: _rate(r) for n, r in rates.items()}
    ratios = {n: (a / t if t > 0 else 0.0) for n, (a, t, _, _) in got.items()}
    worst = min(ratios, key=lambda n: ratios[n])
    achieved, target, requested, resolution = got[worst]
    detail = f"worst {worst}: {achieved:.1f} of {target:.4g} Hz"
    adapted = [
        f"{n} {g[2]:g} Hz → every {g[3]:.3g} ms" for n, g in got.items() if g[3] > 1e3 / g[2] * 1.01
    ]
    if adapted:
        detail += f"; lowered to keep pace: {', '.join(adapted)}"
    slow = [n for n, q in ratios.items() if q < min_ratio]
    if slow:
        detail += f"; below {min_ratio:.0%}: {', '.join(sorted(slow))}"
    return make_check(not slow, ratios[worst], min_ratio, "x requested", detail)


def _rate(r: tuple[float, float] | Mapping[str, float]) -> tuple[float, float, float, float]:
    """(achieved, target, requested Hz, resolution ms) of a sampler's reported rates."""
    if isinstance(r, Mapping):
        requested = float(r["requested_hz"])
        target = float(r.get("target_hz", requested))
        return (
            float(r["achieved_hz"]),
            target,
            requested,
            float(r.get("resolution_ms", 1e3 / requested)),
        )
    achieved, requested = r
    return (
        float(achieved),
        float(requested),
        float(requested),
        1e3 / requested if requested else 0.0,
    )


# ----- offered load ------------------------------------------------------------------
def switch_counter(fabric: Fabric) -> Callable[[str, str], int]:
    """A function (src host, dst host) -> switches on a shortest path (as
    ``Fabric.shortest_paths``: hosts are never transit), cached per pair."""
    switches = {n.name for n in fabric.switches}
    g = fabric.graph().subgraph(switches)
    attached = {
        h.name: [lk.other(h.name) for lk in fabric.links_of(h.name) if lk.other(h.name) in switches]
        for h in fabric.hosts
    }
    dist: dict[str, dict[str, int]] = {}
    pairs: dict[tuple[str, str], int] = {}

    def count(src: str, dst: str) -> int:
        key = (src, dst)
        if key not in pairs:
            for name in (src, dst):
                fabric.node(name)  # an unknown name raises FabricError
            if src == dst or any(lk.other(src) == dst for lk in fabric.links_of(src)):
                pairs[key] = 0
            else:
                best = math.inf
                for a in attached.get(src, []):
                    if a not in dist:
                        dist[a] = nx.single_source_shortest_path_length(g, a)
                    for b in attached.get(dst, []):
                        best = min(best, dist[a].get(b, math.inf) + 1)
                pairs[key] = int(best) if math.isfinite(best) else 0
        return pairs[key]

    return count


def offered_switching_mbps(flows: pd.DataFrame | None, fabric: Fabric) -> tuple[float | None, str]:
    """Emulated bytes × switches on each flow's path, × 8, over the run's busy
    span (first start to last end among the flows), in Mbit/s; and a detail."""
    mbps, _, detail = switch_work(flows, fabric)
    return mbps, detail


def switch_work(
    flows: pd.DataFrame | None,
    fabric: Fabric,
    count: Callable[[str, str], int] | None = None,
) -> tuple[float | None, dict[int, float], str]:
    """``offered_switching_mbps``, and its switch-hop bits by path length (what a
    capacity that depends on path length is judged by); ``count``: the fabric's
    ``switch_counter``, for a caller that judges many tables of one fabric."""
    if flows is None or flows.empty:
        return None, {}, "no flows"
    count = count or switch_counter(fabric)
    unknown: set[str] = set()

    def hops_of(src: str, dst: str) -> int:
        try:
            return count(src, dst)
        except FabricError:  # not a host of this fabric: counted as no switch work
            unknown.update(n for n in (src, dst) if n not in fabric.by_name)
            return 0

    hops = np.fromiter(
        (hops_of(s, d) for s, d in zip(flows["src"], flows["dst"], strict=True)),
        dtype=np.float64,
        count=len(flows),
    )
    bits = flows["bytes"].to_numpy(dtype=np.float64) * hops * 8
    work = float(bits.sum())
    by_hops = {int(h): float(bits[hops == h].sum()) for h in np.unique(hops) if h > 0}
    starts = _column(flows, "t_start_ns")
    ends = np.concatenate([starts, _column(flows, "t_end_ns")])
    if starts.size == 0 or ends.max() <= starts.min():
        return None, by_hops, "no flow has a start and a later end: no busy span"
    span_s = (ends.max() - starts.min()) / 1e9
    mbps = work / span_s / 1e6
    detail = (
        f"{work / 8e6:.2f} MB switch-hop work (mean {hops.mean():.2f} switches per flow) "
        f"over a {span_s:.2f} s busy span"
    )
    if unknown:
        detail += f"; not in the fabric, not counted: {_few(sorted(unknown))}"
    return mbps, by_hops, detail


def offered_load_check(
    flows: pd.DataFrame | None,
    fabric: Fabric,
    capacity_mbps: float | Callable[[float], float] | None = None,
) -> Check:
    """Offered switch-hop load ≤ this machine's switching capacity: a figure, or the
    envelope's capacity by path length (``Envelope.capacity_mbps``), for a mix of path
    lengths the load at which each length's share of the work uses up its own capacity
    (Σ work ÷ Σ work/capacity, as the plan's machine load sums shares);
    ``topologies.shaping.switch_capacity_mbps()`` if None."""
    mbps, by_hops, detail = switch_work(flows, fabric)
    cap, where = switching_capacity(by_hops, capacity_mbps)
    if mbps is None:
        return make_check(True, None, cap, "Mbit/s", detail)
    detail += f"; capacity{where} {cap:g} Mbit/s ({mbps / cap:.0%} used)"
    return make_check(mbps <= cap, mbps, cap, "Mbit/s", detail)


def switching_capacity(
    by_hops: Mapping[int, float], capacity_mbps: float | Callable[[float], float] | None
) -> tuple[float, str]:
    """The capacity (Mbit/s) ``offered_load_check`` judges switch-hop work split by path
    length (``by_hops``: bits per path length) against, and where it comes from."""
    if callable(capacity_mbps):
        total = sum(by_hops.values())
        if total > 0:
            cap = total / sum(w / float(capacity_mbps(h)) for h, w in by_hops.items())
        else:
            cap = float(capacity_mbps(3))
        lengths = "/".join(str(h) for h in sorted(by_hops)) or "no"
        return cap, f" for {lengths}-switch paths, the envelope's"
    return (switch_capacity_mbps() if capacity_mbps is None else float(capacity_mbps)), ""


def servers_offered_load_check(
    flows: pd.DataFrame | None,
    fabric: Fabric,
    capacity_mbps: float | Callable[[float], float] | None,
    links: pd.DataFrame | None,
) -> Check:
    """``offered_load_check`` per server of a cluster run: each server forwards only
    its own switches' share of the switch-hop work, so each is judged by that share
    against its capacity, not the whole fabric's work against one machine's. A
    server's share is what its switches' ports sent (``links``, sampled there:
    ``server`` column), of what every server's sent; without two servers, the one
    machine's check."""
    whole = offered_load_check(flows, fabric, capacity_mbps)
    if (
        links is None
        or links.empty
        or "server" not in links
        or links["server"].nunique() < 2
        or whole["value"] is None
    ):
        return whole
    sent = (
        links.groupby(["server", "node", "port"])["tx_bytes"]
        .agg(lambda b: max(0, int(b.max()) - int(b.min())))
        .groupby(level="server")
        .sum()
    )
    if sent.sum() <= 0:
        return whole
    cap = float(whole["threshold"])
    each = {
        str(server): float(whole["value"]) * float(b) / float(sent.sum())
        for server, b in sent.items()
    }
    failed = sorted(n for n, v in each.items() if v > cap)
    worst = max(each, key=each.__getitem__)
    detail = (
        f"busiest server {worst}: {each[worst]:.3g} Mbit/s, its switches' "
        f"{each[worst] / float(whole['value']):.0%} of the fabric's "
        f"{whole['detail']}"
    ) + (f"; over on {', '.join(failed)}" if failed else f"; {len(each)} servers judged")
    c = make_check(not failed, each[worst], cap, "Mbit/s", detail)
    c["by_server"] = {n: {"ok": v <= cap, "value": v} for n, v in each.items()}
    return c


# ----- unmodelled loss -----------------------------------------------------------------
def queue_drops(queues: pd.DataFrame | None) -> int:
    """Packets the sampled (switch) pfifos dropped while they were watched."""
    return sum(drops_by_switch(queues).values())


def drops_by_switch(queues: pd.DataFrame | None) -> dict[str, int]:
    """Packets each switch's sampled pfifos dropped while they were watched."""
    if queues is None or queues.empty:
        return {}
    by_port = queues.groupby(["node", "port"])["drops"]
    grown = (by_port.max() - by_port.min()).clip(lower=0).groupby(level="node").sum()
    return {str(node): int(n) for node, n in grown.items()}


def counter_growth(links: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """How much each of a link table's counters ``columns`` grew on each (node, port)
    over the watched span: last sample less first."""
    ordered = links.sort_values("t_ns").groupby(["node", "port"])[list(columns)]
    return ordered.last() - ordered.first()


def batch_losses(
    links: pd.DataFrame | None, queues: pd.DataFrame | None, frame: int
) -> dict[str, int]:
    """Frames lost inside each switch whose queues dropped, beyond what its queues
    counted: by byte conservation over the watched span (bytes in on every port less
    bytes out, in full frames), less the queues' drops; switches whose queues dropped
    nothing are left out (a loss there is not a queue's).

    Where it comes from: when a full pfifo refuses a packet, the kernel answers Open
    vSwitch's ``sendmmsg`` with ENOBUFS and OVS abandons the rest of that send batch for
    the port (``topologies.ovs_tx``); no queue counts them. They are packets arriving
    back to back at a queue that is full, which a tail-drop switch drops too, so they
    explain retransmissions as the queue's own drops do. Measured: a 16-sender incast
    into a 21-frame queue lost 1,476 frames (senders' retransmissions, and the switch's
    bytes in less bytes out), of which the queue counted 1,086."""
    if links is None or links.empty or queues is None or queues.empty:
        return {}
    need = {"node", "port", "t_ns", "rx_bytes", "tx_bytes"}
    if not need <= set(links.columns):
        return {}
    per_switch = counter_growth(links, ["rx_bytes", "tx_bytes"]).groupby(level="node").sum()
    out = {}
    for node, n in drops_by_switch(queues).items():
        if n <= 0 or node not in per_switch.index:
            continue
        lost = (per_switch.at[node, "rx_bytes"] - per_switch.at[node, "tx_bytes"]) / frame
        extra = int(lost) - n
        if extra > 0:
            out[node] = extra
    return out


Span = tuple[int, int | None]  # a link down: from t_ns to t_ns (None: still down at the end)


def fault_losses(
    links: pd.DataFrame | None,
    spans: Mapping[str, Sequence[Span]],
    frame: int,
    queues: pd.DataFrame | None = None,
) -> dict[str, int]:
    """Frames each switch that had a link down took in and did not send on, over the
    spans a link of it was down (``faults.downed_spans``; each from the sample before it
    went down to the first after it came back): bytes in less bytes out on all its
    ports, in full frames (a lower bound of the packets, and the unit ``batch_losses``
    counts in; a packet count would add pure ACKs, whose loss rarely costs a
    retransmission), less what the switch's shaped queues counted as dropped over the
    run (those are in ``queue_drops`` already).

    A link taken down loses what its switch forwards into it until the routes move, and
    what its queue held (``ip link set down`` discards a qdisc's backlog without
    counting it): a real switch loses both, so they are the fault's, not the
    emulator's. Measured: two leaf-spine links down at once on spine-leaf-1to1 (bmwg
    12.3, which cuts ``leaf0`` off from ``leaf1``) left 65-75 retransmissions the
    verdict could not explain, while ``leaf0`` took in 280-312 frames' bytes more than
    it sent on; one link down lost under one."""
    if links is None or links.empty or not spans:
        return {}
    if not {"node", "port", "t_ns", "rx_bytes", "tx_bytes"} <= set(links.columns):
        return {}
    dropped = drops_by_switch(queues)
    out = {}
    for node, node_spans in spans.items():
        ports = [p for _, p in links[links["node"] == node].sort_values("t_ns").groupby("port")]
        lost = sum(_kept_bytes(port, span) for port in ports for span in node_spans)
        n = int(lost / frame) - dropped.get(str(node), 0)
        if n > 0:
            out[str(node)] = n
    return out


def _kept_bytes(port: pd.DataFrame, span: Span) -> float:
    """Bytes a port took in less bytes it sent over ``span``, from its last sample at or
    before the start to its first at or after the end (its first and last samples
    where there is none)."""
    start, end = span
    before = port[port["t_ns"] <= start]
    first = before.iloc[-1] if not before.empty else port.iloc[0]
    after = port[port["t_ns"] >= end] if end is not None else port.iloc[0:0]
    last = after.iloc[0] if not after.empty else port.iloc[-1]
    return float((last["rx_bytes"] - first["rx_bytes"]) - (last["tx_bytes"] - first["tx_bytes"]))


def unmodelled_loss_check(
    tcp: Mapping[str, int] | None,
    queues: pd.DataFrame | None,
    links: pd.DataFrame | None = None,
    mtu: int = DEFAULT_MTU,
    downed: Mapping[str, Sequence[Span]] | None = None,
) -> Check:
    """Retransmitted segments not explained by a shaped queue's drop (counted, or lost
    in the same switch beyond its count: ``batch_losses``), a loss in a switch while a
    link of it was down (``downed``, ``fault_losses``: the fault's, as on a real
    switch), a duplicate the receiver reported, or a retransmission timeout. ``tcp``:
    the run's totals from ``experiments.measurement.tcpcount`` (None: not measured)."""
    unit = "segments"
    if not tcp:
        return make_check(True, None, MIN_UNEXPLAINED, unit, "TCP counters not measured")
    drops = queue_drops(queues) + int(tcp.get("egress_drops", 0))
    batch = batch_losses(links, queues, frame_bytes(mtu))
    # a switch both overflowed and cut off: its fault span's loss beyond its batches'
    at_fault = {
        n: v - batch.get(n, 0)
        for n, v in fault_losses(links, downed or {}, frame_bytes(mtu), queues).items()
        if v > batch.get(n, 0)
    }
    # a loss counted elsewhere in a switch (OVS's receive sockets, a port's kernel
    # drops) is in its bytes in less bytes out too: it is neither the queue's nor the
    # fault's (taken from the queues' share first)
    elsewhere = sum(int(tcp.get(k, 0)) for k in UNMODELLED_PLACES)
    at_queues = max(0, sum(batch.values()) - elsewhere)
    lost_at_fault = max(0, sum(at_fault.values()) - max(0, elsewhere - sum(batch.values())))
    retrans, sent = int(tcp.get("retrans_segs", 0)), int(tcp.get("out_segs", 0))
    explained = drops + at_queues + lost_at_fault
    explained += int(tcp.get("spurious_segs", 0)) + int(tcp.get("timeouts", 0))
    unexplained = max(0, retrans - explained)
    allowed = MIN_UNEXPLAINED + UNMODELLED_SHARE * sent + PER_DROP * drops
    beyond = (
        f" and {at_queues} more lost in the switches whose queues overflowed "
        f"({', '.join(batch)}; bytes in less bytes out: send batches OVS abandoned at a "
        "full queue)"
        if at_queues
        else ""
    )
    if lost_at_fault:
        beyond += (
            f", {lost_at_fault} lost in switches while a link of theirs was down "
            f"({', '.join(at_fault)}; bytes in less bytes out: forwarded into the "
            "link before the routes moved, or held in its queue)"
        )
    detail = (
        f"{retrans} retransmitted of {sent} segments sent; {drops} dropped by shaped "
        f"queues{beyond}, {tcp.get('spurious_segs', 0)} reported duplicate, "
        f"{tcp.get('timeouts', 0)} timeouts; {unexplained} unexplained (allowed {allowed:.0f})"
    )
    if tcp.get("receiver_drops"):
        detail += f"; receiving stacks threw away {tcp['receiver_drops']} (slow readers)"
    seen = [f"{UNMODELLED_PLACES[k]} {tcp[k]}" for k in UNMODELLED_PLACES if tcp.get(k)]
    if seen:
        detail += "; dropped outside the queues: " + ", ".join(seen)
    return make_check(unexplained <= allowed, unexplained, allowed, unit, detail)


# ----- the verdict ---------------------------------------------------------------------
def verdict(
    flows: pd.DataFrame | None,
    queues: pd.DataFrame | None,
    cpu: pd.DataFrame | None,
    sampler_rates: Mapping[str, tuple[float, float]],
    rates_bps: Mapping[tuple[str, int], float],
    fabric: Fabric,
    thresholds: Fidelity | None = None,
    capacity_mbps: float | Callable[[float], float] | None = None,
    tcp: Mapping[str, int] | None = None,
    mtu: int = DEFAULT_MTU,
    rate_changes: Mapping[tuple[str, int], Sequence[tuple[int, float]]] | None = None,
    links: pd.DataFrame | None = None,
    downed: Mapping[str, Sequence[Span]] | None = None,
) -> dict[str, Any]:
    """``{"ok", "checks": {name: check}}`` over one run's tables.

    ``flows``: src, dst, bytes (emulated), t_start_ns, t_end_ns, lateness_ms;
    ``queues``: the QueueSampler table; ``cpu``: the CpuSampler table;
    ``sampler_rates``: name -> (achieved_hz, requested_hz); ``rates_bps``:
    (node, port) -> configured bit/s (``egress_rates_bps``); ``thresholds``:
    the run's ``config.fidelity`` (None: :data:`DEFAULT_THRESHOLDS`); ``tcp``:
    the hosts' TCP counter totals over the traffic (``experiments.measurement.tcpcount``);
    ``mtu``: the run's, for the size of the frames the queue counters move by;
    ``rate_changes``: ports a ``link_degrade`` re-shaped (``split_by_rate``);
    ``links``: the LinkSampler table (with a ``server`` column, each server's share of
    the switch-hop work is judged: ``servers_offered_load_check``); ``downed``: each
    switch a ``link_down`` took a link of, with the span it was down
    (``faults.downed_spans``).
    """
    th = thresholds or DEFAULT_THRESHOLDS
    judged_queues, rates_bps = split_by_rate(queues, rates_bps, rate_changes or {})
    checks = {
        "cpu": servers_cpu_check(cpu, th.cpu_max_pct),
        "dequeue_rate": dequeue_rate_check(
            judged_queues, rates_bps, th.dequeue_rate_tolerance, frame_bytes(mtu)
        ),
        "lateness": lateness_check(flows, th.lateness_p99_ms),
        "sampler_rate": sampler_rate_check(sampler_rates),
        "offered_load": servers_offered_load_check(flows, fabric, capacity_mbps, links),
        "unmodelled_loss": unmodelled_loss_check(tcp, queues, links, mtu, downed),
    }
    return {"ok": all(c["ok"] for c in checks.values()), "checks": checks}


def format_verdict(v: Mapping[str, Any]) -> str:
    """A short Markdown block for the top of report.md."""
    checks = v.get("checks", {})
    failed = [n for n, c in checks.items() if not c["ok"]]
    if v.get("ok") and not failed:
        head = "**Fidelity: OK**"
    else:
        head = f"**Fidelity: FAILED** — the emulation was not faithful: {', '.join(failed)}"
    lines = [head, ""]
    for name, c in checks.items():
        mark = "ok" if c["ok"] else "FAILED"
        lines.append(f"- `{name}` {mark}: {_measured(name, c)} — {c['detail']}")
    return "\n".join(lines) + "\n"


def _measured(name: str, c: Mapping[str, Any]) -> str:
    value, th, unit = c["value"], c["threshold"], c["unit"]
    if name == "dequeue_rate":
        shown = "—" if value is None else f"{value:.3f}×"
        return f"{shown} configured rate (tolerance ±{th:.0%})"
    if name == "sampler_rate":
        shown = "—" if value is None else f"{value:.0%}"
        return f"{shown} of requested rate (minimum {th:.0%})"
    sign = "≤"
    shown = "—" if value is None else f"{value:.3g} {unit}"
    return f"{shown} (threshold {sign} {th:g} {unit})"


# ----- helpers -----------------------------------------------------------------------------
def _floats(col: pd.Series) -> np.ndarray:
    """A column as float64, missing values NaN."""
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _column(df: pd.DataFrame | None, name: str) -> np.ndarray:
    """A column as float64 without missing values (empty if absent)."""
    if df is None or name not in df or df.empty:
        return np.empty(0)
    x = pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    return x[np.isfinite(x)]


def _few(names: list[str], n: int = 5) -> str:
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return ", ".join(names[:n]) + more

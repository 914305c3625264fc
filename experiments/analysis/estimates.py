"""Analytic estimates printed beside the measurement: what queueing theory, link
arithmetic or the compute model predicts for a run, from the same configuration.

``estimate(config, fabric)`` returns a JSON-able dict (``{"what": ..., ...}``) or
None when no estimate applies. The runner stores it as ``summary.json.estimate``
and the report shows it next to the measured numbers.

The estimate is recognised from the workload kinds (no spec key): one section per
kind present, each a pure function of the run's configuration (``RunConfig``) and the
fabric.

- ``incast``: the ideal round (N × SRU at the receiver's TCP goodput ceiling), the
  queue peak when N synchronised senders each burst a window into one port
  ((N − 1) × window packets, the port draining one sender's worth meanwhile), and,
  when that overflows the buffer, a round stretched by TCP's 200 ms minimum RTO.
- ``kv_transfer``: bytes per rank pair over the slowest link of its path; the part
  of the transfer left exposed after prefill (monolithic: all of it; layer-pipelined:
  what the last layer cannot overlap); and, for transfers that cross a spine tier
  several at a time, ECMP collision odds and the FCT each routing policy implies.
- ``moe_alltoall``: bytes per step and the step's lower bound at the host links.
- ``serving``: the fluid simulator (``traffic.serving.sim``) run on a driver built
  from the same workload and seed: TTFT, ITL and KV-transfer time without packet-level
  contention, plus the compute-model numbers of the mean prompt.
- ``routes``: under ``minimal``, ``valiant`` or ``ugal``, the first wave of every
  ``kv_transfer`` workload that starts at once (no ``rate_rps``) as flows over the
  policy's routes: share of injection and FCT slowdown by policy, fluid and max-min
  fair (``experiments.analysis.route_estimate``), beside the textbook's closed forms.
- ``buffer``: how long a full egress buffer takes to drain, emulated and real: the
  queueing delay a packet can meet, which does not scale with the bandwidth scale.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from experiments.spec.config import (
    IncastWorkload,
    KvTransferWorkload,
    MoeAlltoallWorkload,
    RunConfig,
    ServingWorkload,
)
from experiments.spec.typed import resolved_of
from topologies import Fabric

# TCP payload per Ethernet frame as HTB counts it (1448 B of 1514 B).
GOODPUT_FRACTION = 1448 / 1514
MSS_BYTES = 1448
FRAME_BYTES = 1514
INITIAL_WINDOW_PKTS = 10  # Linux initcwnd
MIN_RTO_MS = 200.0  # Linux TCP_RTO_MIN: does not scale with the bandwidth scale


def estimate(config: RunConfig, fabric: Fabric, driver: Any = None) -> dict[str, Any] | None:
    """The analytic prediction for a run, or None. ``driver``: an unused copy of the run's
    serving driver (``TrafficPlan.spare_driver``) to simulate instead of building one."""
    scale = config.scale.bandwidth
    out: dict[str, Any] = {}
    what: list[str] = []
    for i, w in enumerate(config.workloads):
        if isinstance(w, IncastWorkload):
            out.setdefault("incast", []).append(incast_estimate(w, fabric, scale))
            what.append("incast round time and collapse (buffer vs synchronised windows)")
        elif isinstance(w, KvTransferWorkload):
            policy = config.controller.policy
            out.setdefault("kv_transfer", []).append(kv_transfer_estimate(w, fabric, policy))
            what.append("KV transfer time at the bottleneck link, pipelining overlap, ECMP")
        elif isinstance(w, MoeAlltoallWorkload):
            out.setdefault("alltoall", []).append(alltoall_estimate(w, fabric))
            what.append("all-to-all step bytes and lower bound")
        elif isinstance(w, ServingWorkload):
            out["serving"] = serving_estimate(config, i, fabric, driver)
            what.append("serving TTFT/ITL from the fluid simulator and the compute model")
    if not out:
        return None
    routes = wave_routes(config, fabric)
    if routes is not None:
        out["routes"] = routes
        what.append("low-diameter routing: share of injection and FCT slowdown by policy")
    out["buffer"] = buffer_estimate(fabric, scale)
    out["what"] = "; ".join(dict.fromkeys(what))
    return out


# ---- helpers ----------------------------------------------------------------------------


def host_gbps(fabric: Fabric, host: str) -> float:
    """Real rate of a host's link to its first switch (NVLink excluded)."""
    links = [lk for lk in fabric.links_of(host) if lk.kind != "nvlink"]
    return min(lk.real_gbps for lk in links)


def path_gbps(fabric: Fabric, src: str, dst: str) -> float:
    """Real rate of the slowest link on the first fewest-hop path."""
    path = fabric.shortest_paths(src, dst)[0]
    return min(fabric.link_between(a, b).real_gbps for a, b in zip(path, path[1:], strict=False))


def crosses_spine(fabric: Fabric, src: str, dst: str) -> bool:
    return len(fabric.shortest_paths(src, dst)[0]) > 3


def spine_count(fabric: Fabric) -> int:
    return sum(1 for s in fabric.switches if s.kind in ("spine", "core"))


def buffer_estimate(fabric: Fabric, scale: float) -> dict[str, Any]:
    """Drain time of a full egress buffer on each link class, emulated and real."""
    out = {}
    for lk in fabric.links:
        if lk.kind in out:
            continue
        bits = lk.buffer_pkts * FRAME_BYTES * 8
        out[lk.kind] = {
            "buffer_pkts": lk.buffer_pkts,
            "real_gbps": lk.real_gbps,
            "full_buffer_ms_emulated": bits / (lk.real_gbps * 1e9 * scale) * 1e3,
            "full_buffer_ms_real": bits / (lk.real_gbps * 1e9) * 1e3,
        }
    return out


# ---- incast -----------------------------------------------------------------------------


def incast_estimate(w: IncastWorkload, fabric: Fabric, scale: float) -> dict[str, Any]:
    senders = w.senders if isinstance(w.senders, int) else len(w.senders)
    receiver = w.receiver
    link = next(lk for lk in fabric.links_of(receiver) if lk.kind != "nvlink")
    gbps, buffer_pkts = link.real_gbps, link.buffer_pkts
    sru = int(w.sru_bytes)
    goodput_gbps = gbps * GOODPUT_FRACTION
    ideal_round_ms = senders * sru * 8 / (goodput_gbps * 1e9) * 1e3
    sru_pkts = math.ceil(sru * scale / MSS_BYTES)
    window = min(sru_pkts, INITIAL_WINDOW_PKTS)
    peak_queue = (senders - 1) * window
    overflow = peak_queue > buffer_pkts
    round_ms = ideal_round_ms + (MIN_RTO_MS if overflow else 0.0)
    goodput = senders * sru * 8 / (round_ms / 1e3) / 1e9
    return {
        "senders": senders,
        "receiver_gbps": gbps,
        "buffer_pkts": buffer_pkts,
        "sru_pkts_emulated": sru_pkts,
        "ideal_round_ms": ideal_round_ms,
        "ideal_goodput_real_gbps": goodput_gbps,
        "ideal_goodput_mbps": goodput_gbps * 1e3 * scale,
        "burst_window_pkts": window,
        "peak_queue_pkts": peak_queue,
        "overflow": overflow,
        "predicted_round_ms": round_ms,
        "predicted_goodput_real_gbps": goodput,
        "predicted_goodput_mbps": goodput * 1e3 * scale,
    }


# ---- KV transfer ------------------------------------------------------------------------


def pipelined_exposed_s(transfer_s: float, prefill_s: float, layers: int) -> float:
    """Time from prefill end until the last layer's KV has arrived, when layer l is sent
    at (l + 1)/L of the prefill and the layers share one link: the last layer alone if
    the link keeps up with the compute, else the backlog the link could not clear."""
    per_x, per_c = transfer_s / layers, prefill_s / layers
    return max(per_x, transfer_s - (layers - 1) * per_c)


def transfer_numbers(
    model: Any,
    gpu: str,
    tokens: int,
    p_tp: int,
    d_tp: int,
    dtype: str,
    rate_gbps: float,
    efficiency: float = 0.5,
) -> dict[str, Any]:
    """Monolithic vs layer-pipelined exposure of one request's KV over rank pairs that
    each have their own path at ``rate_gbps`` (the largest rank-pair share decides)."""
    from traffic import compute, presets
    from traffic.workloads.kv_transfer import shard_overlap

    m = presets.model(model)
    elem = presets.dtype_bytes(dtype)
    overlap = shard_overlap(m.kv_heads, p_tp, d_tp)
    pair_bytes = int(overlap.max()) * tokens * m.head_dim * 2 * elem * m.layers
    transfer_s = pair_bytes * 8 / (rate_gbps * 1e9)
    prefill_s = compute.prefill_time_s(m, gpu, tokens, p_tp, efficiency)
    piped = pipelined_exposed_s(transfer_s, prefill_s, m.layers)
    return {
        "tokens": tokens,
        "kv_bytes": m.kv_bytes_per_token(dtype) * tokens,
        "rank_pair_bytes": pair_bytes,
        "path_gbps": rate_gbps,
        "prefill_ms": prefill_s * 1e3,
        "transfer_ms": transfer_s * 1e3,
        "exposed_ms_monolithic": transfer_s * 1e3,
        "exposed_ms_layer_pipelined": piped * 1e3,
        "hidden_fraction_layer_pipelined": 1 - piped / transfer_s if transfer_s else 1.0,
        "ttft_gain_ms": (transfer_s - piped) * 1e3,
    }


def collision_odds(flows: int, spines: int) -> dict[str, float]:
    """``flows`` elephants hashed uniformly onto ``spines`` spines: the chance two given
    flows share one, the chance that no two share, and the mean number of other
    elephants on a flow's spine."""
    p_none = 0.0 if flows > spines else math.perm(spines, flows) / spines**flows
    return {
        "p_pair_shares": 1 / spines,
        "p_no_collision": p_none,
        "p_some_collision": 1 - p_none,
        "mean_others_on_my_spine": (flows - 1) / spines,
    }


def kv_transfer_estimate(w: KvTransferWorkload, fabric: Fabric, policy: str) -> dict[str, Any]:
    from traffic import presets

    m = presets.model(w.model)
    pre, dec = list(w.prefill_hosts), list(w.decode_hosts)
    p_tp, d_tp = w.prefill_tp or len(pre), w.decode_tp or len(dec)
    tokens = list(w.tokens) if isinstance(w.tokens, tuple) else [w.tokens]
    mean_tokens = int(round(float(np.mean(tokens))))
    rate = min(path_gbps(fabric, a, b) for a in pre for b in dec)
    out = transfer_numbers(m, w.gpu, mean_tokens, p_tp, d_tp, w.dtype, rate, w.efficiency)
    out["mode"] = w.mode
    out["requests"] = len(tokens)
    # Elephants released together: one per prefill instance (each starts its queue at 0).
    concurrent = min(len(pre) // p_tp, len(dec) // d_tp, len(tokens))
    pairs = [(pre[k * p_tp], dec[k * d_tp]) for k in range(concurrent)]
    spines = spine_count(fabric)
    if concurrent > 1 and spines > 1 and all(crosses_spine(fabric, a, b) for a, b in pairs):
        alone = out["transfer_ms"]
        uplink = min(
            lk.real_gbps
            for lk in fabric.links
            if any(fabric.node(x).kind in ("spine", "core") for x in lk.ends())
        )
        per_uplink_ms = out["rank_pair_bytes"] * 8 / (uplink * 1e9) * 1e3
        odds = collision_odds(concurrent, spines)
        fct = {
            # every elephant on the one shortest path: they share its uplink
            "shortest_path": max(alone, concurrent * per_uplink_ms),
            # expected: a flow shares its spine with (k-1)/S others on average
            "ecmp": max(alone, (1 + odds["mean_others_on_my_spine"]) * per_uplink_ms),
            # least-loaded spine per new flow: no sharing while k <= S
            "adaptive": max(alone, math.ceil(concurrent / spines) * per_uplink_ms),
        }
        out["collisions"] = {
            "elephants_per_wave": concurrent,
            "spines": spines,
            **odds,
            "fct_ms_by_policy": fct,
            "fct_ms_this_policy": fct.get(policy, fct["ecmp"]),
        }
    return out


def wave_routes(config: RunConfig, fabric: Fabric) -> dict[str, Any] | None:
    """The ``routes`` section: the first transfer of every prefill instance of the
    ``kv_transfer`` workloads released at the start, all at once, under a low-diameter
    policy (None for another policy or without such transfers)."""
    from experiments.analysis.route_estimate import route_estimate
    from traffic import presets

    policy = config.controller.policy
    if policy not in ("minimal", "valiant", "ugal"):
        return None
    pairs, gbytes = [], []
    for w in config.workloads:
        if not isinstance(w, KvTransferWorkload) or w.rate_rps is not None:
            continue
        pre, dec = list(w.prefill_hosts), list(w.decode_hosts)
        p_tp, d_tp = w.prefill_tp or len(pre), w.decode_tp or len(dec)
        tokens = list(w.tokens) if isinstance(w.tokens, tuple) else [w.tokens]
        m = presets.model(w.model)
        for k in range(min(len(pre) // p_tp, len(dec) // d_tp, len(tokens))):
            pairs.append((pre[k * p_tp], dec[k * d_tp]))
            rank_pair = transfer_numbers(m, w.gpu, tokens[k], p_tp, d_tp, w.dtype, 1.0)
            gbytes.append(rank_pair["rank_pair_bytes"] / 1e9)
    if not pairs:
        return None
    size = float(np.mean(gbytes))  # the fluid model moves equal sizes
    return route_estimate(fabric, pairs, size, policy, config.seed)


# ---- MoE all-to-all ---------------------------------------------------------------------


def alltoall_estimate(w: MoeAlltoallWorkload, fabric: Fabric) -> dict[str, Any]:
    from traffic.workloads import moe_alltoall

    one_step = resolved_of(dataclasses.replace(w, steps=1))
    sched = moe_alltoall(**{k: v for k, v in one_step.items() if k != "kind"})
    per_host = sched.groupby("src")["bytes"].sum()
    gbps = min(host_gbps(fabric, h) for h in w.group)
    bound_ms = float(per_host.max()) * 8 / (gbps * 1e9) * 1e3
    cross = sum(int(r.bytes) for r in sched.itertuples() if crosses_spine(fabric, r.src, r.dst))
    return {
        "step_bytes": int(sched["bytes"].sum()),
        "cross_spine_bytes_per_step": cross,
        "step_ms_lower_bound": bound_ms,
        "step_interval_ms": w.step_interval_ms,
        "host_link_busy_fraction": min(bound_ms / w.step_interval_ms, 1.0),
    }


# ---- serving ----------------------------------------------------------------------------


def _stats(values: Any) -> dict[str, float] | None:
    arr = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if not len(arr):
        return None
    return {
        "count": int(len(arr)),
        "mean": float(arr.mean()),
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
    }


def serving_estimate(
    config: RunConfig, index: int, fabric: Fabric, driver: Any = None
) -> dict[str, Any]:
    """The fluid simulator's prediction for serving workload ``index`` of ``config``, run
    on ``driver`` (an unused driver of that workload) or on one built here."""
    from experiments.analysis.metrics.bursts import peak_second_metrics
    from experiments.analysis.metrics.kv import pipelining_metrics, prefix_cache_metrics
    from experiments.analysis.metrics.sessions import session_metrics
    from experiments.analysis.tier_estimate import tier_estimate
    from experiments.spec.workloads import workload_seed
    from traffic import presets
    from traffic.serving import build_serving, fabric_rate, simulate
    from traffic.serving.instances import TIERS

    w = config.workloads[index]
    assert isinstance(w, ServingWorkload)
    if driver is None:
        driver = build_serving(w, fabric, workload_seed(config.seed, index))
    arrivals_n = len(driver.requests)
    until = int((config.duration_s + 5.0) * 1e9)  # the run's length plus its drain
    res = simulate(driver, fabric_rate(fabric), until_ns=until)
    req = driver.requests_table()
    tok = driver.tokens_table()
    served = req["ttft_ms"].notna()
    out: dict[str, Any] = {
        "method": "fluid simulation: every host pair its own pipe at its path's slowest"
        " link; no contention, loss or protocol overhead",
        "requests": arrivals_n,
        "served": int(served.sum()),
        "ttft_ms": _stats(req["ttft_ms"]),
        "itl_ms": _stats(tok["itl_ms"]) if len(tok) else None,
        "kv_transfer_ms": _stats(req["kv_transfer_ms"]),
        "e2e_ms": _stats(req["e2e_ms"]),
        "network_bytes_real": int(res.flows["bytes"].sum()) if len(res.flows) else 0,
        "prefix_cache": {
            k: v for k, v in prefix_cache_metrics(req).items() if k.endswith("hit_rate")
        },
    }
    if w.transfer == "layer_pipelined":
        out["pipelining"] = {"hidden_fraction": pipelining_metrics(req)["hidden_fraction"]}
    sessions = session_metrics(req)
    if sessions is not None:
        out["sessions"] = {k: sessions[k] for k in ("hit_rate", "ttft_ms", "completion_ms")}
    kv_tiers = tier_estimate(driver, req, tok, res.flows)
    if kv_tiers is not None:
        out["kv_tiers"] = kv_tiers
    peak = peak_second_metrics(req)
    if peak is not None:
        out["peak_second"] = peak
    if w.mode == "disaggregated" and len(req):
        m = presets.model(w.model)
        p, d = driver.prefill[0].inst, driver.decode[0].inst
        rates = [path_gbps(fabric, a, b) for a in p.hosts for b in d.hosts if a != b]
        mean_tokens = int(round(float(req["input_tokens"].mean())))
        out["mean_prompt"] = transfer_numbers(
            m, w.gpu, mean_tokens, p.tp, d.tp, w.kv_dtype, min(rates)
        )
        tiers = [t for row in driver.tiers for t in row]
        rate_by_tier: dict[int, float] = {}
        for pe in driver.prefill:
            for de, tier in zip(driver.decode, driver.tiers[pe.inst.index], strict=True):
                r = min(path_gbps(fabric, a, b) for a in pe.inst.hosts for b in de.inst.hosts)
                rate_by_tier[tier] = min(rate_by_tier.get(tier, math.inf), r)
        out["tiers"] = {
            "pairs_by_tier": {str(t): tiers.count(t) for t in sorted(set(tiers))},
            "gbps_by_tier": {str(t): g for t, g in sorted(rate_by_tier.items())},
        }
        for slow, fast in ((2, 1), (1, 0), (2, 0)):
            if slow in rate_by_tier and fast in rate_by_tier:
                key = f"{TIERS[slow]}_over_{TIERS[fast]}_transfer_ratio"
                out["tiers"][key] = rate_by_tier[fast] / rate_by_tier[slow]
    return out


# ---- command line -----------------------------------------------------------------------


def _brief(est: dict[str, Any]) -> list[str]:
    """The headline numbers of an estimate, one line per section."""
    lines = []
    for e in est.get("incast", []):
        lines.append(
            f"incast: {e['senders']} senders, buffer {e['buffer_pkts']} pkts: ideal round"
            f" {e['ideal_round_ms']:.1f} ms, peak queue {e['peak_queue_pkts']} pkts"
            f" ({'overflows' if e['overflow'] else 'fits'}), goodput"
            f" {e['predicted_goodput_mbps']:.2f} Mbit/s emulated"
            f" ({e['predicted_goodput_real_gbps']:.1f} Gbit/s real)"
        )
    for e in est.get("kv_transfer", []):
        lines.append(
            f"kv_transfer: {e['tokens']} tokens, {e['rank_pair_bytes'] / 1e6:.0f} MB per rank"
            f" pair at {e['path_gbps']:g} Gbit/s: {e['transfer_ms']:.1f} ms alone"
        )
        if "collisions" in e:
            c = e["collisions"]
            fct = ", ".join(f"{k} {v:.1f}" for k, v in c["fct_ms_by_policy"].items())
            lines.append(
                f"  ECMP: {c['elephants_per_wave']} elephants on {c['spines']} spines:"
                f" P(two share a spine) {c['p_pair_shares']:.2f}, P(no collision)"
                f" {c['p_no_collision']:.3f}; FCT ms by policy: {fct}"
            )
    rt = est.get("routes")
    if rt:
        shares = ", ".join(
            f"{k} {v['injection_share']['mean']:.2f} (slowdown max {v['fct_slowdown']['max']:.1f})"
            for k, v in rt["by_policy"].items()
        )
        lines.append(
            f"routes: {rt['flows']} flows of {rt['gbytes_per_flow']:.2f} GB at once, mean share"
            f" of injection by policy: {shares}"
        )
        if rt["textbook_injection_share"]:
            book = ", ".join(f"{k} {v:.2f}" for k, v in rt["textbook_injection_share"].items())
            lines.append(f"  textbook (dragonfly, group to group): {book}")
    for e in est.get("alltoall", []):
        lines.append(
            f"alltoall: {e['step_bytes'] / 1e9:.2f} GB per step, step >="
            f" {e['step_ms_lower_bound']:.1f} ms of every {e['step_interval_ms']:g} ms"
        )
    sv = est.get("serving")
    if sv:

        def q(key: str) -> str:
            s = sv.get(key)
            return f"p50 {s['p50']:.1f} p99 {s['p99']:.1f}" if s else "–"

        lines.append(
            f"serving (fluid sim): {sv['served']}/{sv['requests']} served; TTFT {q('ttft_ms')};"
            f" ITL {q('itl_ms')}; KV transfer {q('kv_transfer_ms')} ms"
        )
        mp = sv.get("mean_prompt")
        if mp:
            lines.append(
                f"  mean prompt {mp['tokens']} tokens: prefill {mp['prefill_ms']:.1f} ms, KV"
                f" {mp['transfer_ms']:.1f} ms at {mp['path_gbps']:g} Gbit/s; layer-pipelined"
                f" hides {mp['hidden_fraction_layer_pipelined']:.0%}"
                f" (exposed {mp['exposed_ms_layer_pipelined']:.1f} ms)"
            )
        pc = sv.get("prefix_cache") or {}
        if pc.get("ideal_hit_rate") and pc.get("local_hit_rate") is not None:
            lines.append(
                f"  prefix cache: hit rate {pc['hit_rate']:.1%} (local {pc['local_hit_rate']:.1%},"
                f" remote {pc['remote_hit_rate']:.1%}), an infinite cache's"
                f" {pc['ideal_hit_rate']:.1%}; {sv['network_bytes_real'] / 1e9:.1f} GB over the"
                " fabric"
            )
        ss = sv.get("sessions")
        if ss:
            first, later = ss["ttft_ms"]["first_turn"], ss["ttft_ms"]["later_turns"]
            text = f"  sessions: TTFT p50 {first['p50']:.1f} ms first turns"
            if later["count"]:
                hit = ss["hit_rate"]["later_turns"]
                text += f", {later['p50']:.1f} ms later turns (hit rate {hit:.0%})"
            if ss["completion_ms"]["count"]:
                text += f"; completion p50 {ss['completion_ms']['p50']:.0f} ms"
            lines.append(text)
        kt = sv.get("kv_tiers")
        if kt:
            lines += _tier_lines(kt)
        ps = sv.get("peak_second")
        if ps and ps["peak"]["ttft_ms"]["count"] and ps["rest"]["ttft_ms"]["count"]:
            pk, rest = ps["peak"], ps["rest"]
            lines.append(
                f"  busiest second: {pk['requests']} of {ps['requests']} requests"
                f" ({pk['share']:.0%}, mean {ps['mean_per_s']:.1f}/s): TTFT p50"
                f" {pk['ttft_ms']['p50']:.1f} p99 {pk['ttft_ms']['p99']:.1f} ms against"
                f" p50 {rest['ttft_ms']['p50']:.1f} p99 {rest['ttft_ms']['p99']:.1f} ms for"
                f" the rest; prefill backlog met, mean {pk['requests_ahead']['mean']:.1f} vs"
                f" {rest['requests_ahead']['mean']:.1f} requests"
            )
        tiers = sv.get("tiers") or {}
        ratios = [
            f"{key.removesuffix('_transfer_ratio').replace('_over_', '/')} {tiers[key]:.1f}×"
            for key in tiers
            if key.endswith("_transfer_ratio")
        ]
        if ratios:
            lines.append(
                f"  instance pairs by tier {tiers['pairs_by_tier']}; KV transfer time by tier"
                f" (NVLink 0, rail 1, spine 2): {', '.join(ratios)}"
            )
    for kind, b in (est.get("buffer") or {}).items():
        lines.append(
            f"buffer ({kind} links): {b['buffer_pkts']} pkts drain in"
            f" {b['full_buffer_ms_emulated']:.1f} ms emulated ({b['full_buffer_ms_real']:.4f}"
            " ms real)"
        )
    return lines


def _tier_lines(kt: dict[str, Any]) -> list[str]:
    """The kv_tiers lines of an estimate: evictions and their costs."""
    moved = ", ".join(f"{t} {b / 1e9:.2f} GB" for t, b in kt["bytes_moved_by_tier"].items())
    stall = kt["stall_ms"] or {}
    itl = kt["itl_ms_never_evicted"] or {}
    lines = [
        f"  kv_tiers: HBM holds {kt['hbm_tokens_per_instance']} tokens per decode instance;"
        f" {kt['evictions']} evictions, {kt['requests_recomputed']} requests recomputed"
        f" ({kt['recomputed_tokens']} tokens); moved {moved}; stall p50"
        f" {_ms(stall.get('p50'))} ms; ITL p99 of never-evicted {_ms(itl.get('p99'))} ms"
    ]
    v = kt.get("victim")
    if v:
        ways = ", ".join(f"{w} {ms:.1f} ms" for w, ms in v["round_trip_ms"].items())
        lines.append(
            f"  a victim of {v['victim_tokens']} tokens ({v['victim_kv_bytes'] / 1e6:.0f} MB):"
            f" {ways} (out and back; cheapest: {v['cheapest']})"
        )
    return lines


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def print_estimates(spec: str, sets: list[str], as_json: bool = False) -> int:
    """``kvfabric estimate SPEC|NAME [--set k=v]... [--json]``: the analytic estimate
    of every run of a spec, printed without building anything (no root)."""
    import json

    from experiments.spec.load import expand, load_spec, locate

    spec_obj = load_spec(locate(spec), sets)
    out = {}
    for run in expand(spec_obj):
        est = estimate(run.config, run.fabric())
        out[run.label] = est
        if not as_json:
            print(run.label)
            for line in _brief(est or {}) or ["(no estimate for these workloads)"]:
                print(f"  {line}")
    if as_json:
        print(json.dumps(out, indent=1, default=str))
    return 0

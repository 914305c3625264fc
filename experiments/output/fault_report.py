"""The report's Faults section: per fault, what the control plane did and what the traffic
felt, from ``summary.json`` ``metrics.faults`` (``experiments.analysis.metrics.faults``,
``fault_impact``, ``fault_rate``: the definitions are there)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.analysis.metrics.fault_rate import IDLE_MBPS
from experiments.output.formatting import cell, fmt


def fault_lines(m: Mapping[str, Any]) -> list[str]:
    """Two tables, control plane then data plane, and a line per fault that failed
    flows, left the fabric without a controller or killed an agent."""
    faults = m.get("faults") or []
    if not faults:
        return []
    lines = [
        "## Faults",
        "",
        "Milliseconds from the fault injector's timestamp (upper bounds: it includes "
        "the `ip link` command itself; detection is the veth's carrier, instant, plus "
        "the fault's `detect_ms`; – where the controller logged nothing for it, as for "
        "a failure while no controller ran).",
        "",
        "| at (s) | fault | where | controller heard | last rule sent | all acknowledged |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for f in faults:
        lines.append(
            f"| {fmt(f.get('at_s'))} | {_fault(f)} | {_where(f)} | "
            f"{fmt(f.get('detected_ms'))} | {fmt(f.get('last_rule_sent_ms'))} | "
            f"{fmt(f.get('installed_ms'))} |"
        )
    if any("first_probe_ms" in f for f in faults):
        lines += ["", *_data_plane(faults)]
    notes = [n for f in faults for n in _notes(f)]
    return [*lines, "", *([*notes, ""] if notes else [])]


def _data_plane(faults: list[Mapping[str, Any]]) -> list[str]:
    lines = [
        "What the traffic felt. *First probe through*: when every probe pair that lost "
        "probes from the fault to the next one got one through again. *Back to rate*: "
        "the end of the first 200 ms window after the fault whose delivered rate (the "
        "switches' host-facing ports) is at 90% of the second before, so never under "
        "~200 ms; bursty traffic moves it too. *Hit*: flows (probes apart) and requests "
        "alive between the fault and its repair (else 1 s after).",
        "",
        "| at (s) | fault | first probe through | probes lost | back to rate | "
        "Mbit/s before → lowest | window | flows hit | MB hit | requests hit | "
        "TTFT p50 hit / others |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in faults:
        hit = f.get("affected") or {}
        lost, pairs = f.get("probes_lost"), f.get("probe_pairs_hit")
        lost_cell = fmt(lost) if not lost else f"{lost:,} ({pairs} pair{'s' * (pairs != 1)})"
        mb = hit.get("bytes")
        lines.append(
            f"| {fmt(f.get('at_s'))} | {_fault(f)} | {_first_probe(f)} | {lost_cell} | "
            f"{_back_to_rate(f)} | {_rates(f)} | {fmt(f.get('window_ms'))} | "
            f"{_some(hit.get('flows'), hit.get('failed'), 'failed')} | "
            f"{fmt(None if mb is None else mb / 1e6)} | "
            f"{_some(hit.get('requests'), hit.get('requests_failed'), 'unserved')} | "
            f"{_ttft(hit)} |"
        )
    return lines


def _fault(f: Mapping[str, Any]) -> str:
    return cell(f.get("fault") or f.get("event") or "fault")


def _where(f: Mapping[str, Any]) -> str:
    links = f.get("links") or ([f["link"]] if f.get("link") else [])
    if f.get("switch"):
        return cell(f"{f['switch']} ({len(links)} link{'s' * (len(links) != 1)})")
    if f.get("link"):
        where = "–".join(f["link"])
        if f.get("cycles"):
            where += f" × {f['cycles']} cycles"
        if f.get("gbps") is not None:
            where += f" → {fmt(f['gbps'])} Gbit/s"
        return cell(where)
    return cell(f.get("node") or f.get("target") or "–")


def _first_probe(f: Mapping[str, Any]) -> str:
    lost, first = f.get("probes_lost"), f.get("first_probe_ms")
    if lost is None:
        return "no probes"
    if lost == 0:
        return f"no probe lost (next sent {fmt(first)})" if first is not None else "no probe lost"
    return fmt(first) if first is not None else "**none before the run ended**"


def _back_to_rate(f: Mapping[str, Any]) -> str:
    pre, back = f.get("pre_fault_mbps"), f.get("back_to_rate_ms")
    if pre is None:
        return "–"
    if f.get("min_mbps_after") is None and back is None:
        return "idle before" if pre < IDLE_MBPS else "–"
    if back is None:
        return "**not back before the run ended**"
    return f"≤ {fmt(back)}" if not f.get("dip_pct") else fmt(back)  # no dip: the resolution


def _rates(f: Mapping[str, Any]) -> str:
    pre, low, dip = f.get("pre_fault_mbps"), f.get("min_mbps_after"), f.get("dip_pct")
    if pre is None or low is None:
        return fmt(pre)
    return f"{fmt(pre)} → {fmt(low)} (−{fmt(dip)}%)" if dip else f"{fmt(pre)}, no dip"


def _ttft(hit: Mapping[str, Any]) -> str:
    mine, others = hit.get("ttft_p50_ms"), hit.get("others_ttft_p50_ms")
    return "–" if mine is None and others is None else f"{fmt(mine)} / {fmt(others)}"


def _some(n: Any, bad: Any, word: str) -> str:
    return fmt(n) if not bad else f"{fmt(n)} ({fmt(bad)} {word})"


def _notes(f: Mapping[str, Any]) -> list[str]:
    at = f"- at {fmt(f.get('at_s'))} s, {_fault(f)}"
    out = []
    errors = (f.get("affected") or {}).get("errors")
    if errors:
        out.append(f"{at}: the failed flows' errors: {_reasons(errors)}")
    if f.get("fault") == "controller_down":
        gone = f.get("no_controller_ms")
        span = f"for {fmt(gone)} ms" if gone is not None else "ready again before the run ended"
        out.append(
            f"{at}: no controller {span}; {fmt(f.get('flows_started'))} flows "
            f"started meanwhile, {fmt(f.get('flows_started_failed'))} failed"
        )
    if f.get("fault") == "agent_kill" and f.get("host_flows") is not None:
        why = f" ({_reasons(f['host_errors'])})" if f.get("host_errors") else ""
        failed = fmt(f.get("host_flows_failed"))
        out.append(
            f"{at}: {cell(f.get('node'))}'s flows from the kill on: "
            f"{fmt(f['host_flows'])}, {failed} failed{why}"
        )
    return out


def _reasons(errors: Mapping[str, int]) -> str:
    """Most common first (summary.json sorts its keys, so their order is lost)."""
    ranked = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
    return "; ".join(f"{cell(reason)} × {n}" for reason, n in ranked)

"""What the reports show of a run's metrics: the rows of its tables, the run's metrics
(summary.json's, or recomputed from its tables) and its flat row in a comparison. Shared
by the report of one run (:mod:`.report`) and of several (:mod:`.comparison`)."""

from __future__ import annotations

from typing import Any

from experiments.analysis.metrics.stats import percentile_supported
from experiments.analysis.summary import summarize
from experiments.output.formatting import at_path, short_label, verdict_word
from experiments.output.recovery import never_finished
from experiments.output.results import Run

__all__ = [
    "COMPARE_VALUES",
    "LATENCY_ROWS",
    "PLOTS",
    "RAW_VALUE_ROWS",
    "REPORT",
    "VALUE_ROWS",
    "key_metrics",
    "run_metrics",
    "run_scale",
]

PLOTS = "plots"
REPORT = "report.md"
# Latency metrics shown in the tables, in this order, when a run has them:
# (label, path into summary["metrics"]).
LATENCY_ROWS: list[tuple[str, tuple[str, ...]]] = [
    ("FCT, all flows (ms)", ("fct_ms",)),
    ("incast round (ms)", ("incast", "round_ms")),
    ("TTFT (ms)", ("ttft_ms",)),
    ("TPOT (ms)", ("tpot_ms",)),
    ("ITL (ms)", ("itl_ms",)),
    ("end-to-end (ms)", ("e2e_ms",)),
    ("KV transfer (ms)", ("kv_transfer_ms",)),
    ("KV transfer exposed after prefill (ms)", ("serving", "pipelining", "kv_exposed_ms")),
    ("TTFT, first session turns (ms)", ("serving", "sessions", "ttft_ms", "first_turn")),
    ("TTFT, later session turns (ms)", ("serving", "sessions", "ttft_ms", "later_turns")),
    ("session completion (ms)", ("serving", "sessions", "completion_ms")),
    ("TTFT, busiest second's arrivals (ms)", ("serving", "peak_second", "peak", "ttft_ms")),
    ("TTFT, other arrivals (ms)", ("serving", "peak_second", "rest", "ttft_ms")),
    ("agent start lateness (ms)", ("lateness_ms",)),
    ("queue backlog (pkts)", ("queue_pkts", "all")),
]
# Single numbers shown when present: (label, path, unit). Rates and bytes real-equivalent
# (÷ the scale; experiments.analysis.glossary): the emulated ones are RAW_VALUE_ROWS.
VALUE_ROWS: list[tuple[str, tuple[str, ...], str]] = [
    ("flows", ("flows", "total"), ""),
    ("failed flows", ("flows", "failed"), ""),
    ("goodput", ("goodput_real_gbps",), "Gbit/s real-equivalent"),
    (
        "incast goodput per round, mean",
        ("incast", "goodput_real_gbps", "mean"),
        "Gbit/s real-equivalent",
    ),
    (
        "incast goodput per round, min",
        ("incast", "goodput_real_gbps", "min"),
        "Gbit/s real-equivalent",
    ),
    ("Jain fairness across tenants", ("jain_fairness",), ""),
    ("drops", ("drops", "total"), "packets"),
    ("ports with drops", ("drops", "ports_with_drops"), ""),
    ("time above queue threshold (all ports)", ("queue_above", "time_above_s"), "s"),
    ("requests", ("serving", "requests"), ""),
    ("unserved requests", ("serving", "unserved"), ""),
    ("SLO attainment (TTFT and TPOT)", ("serving", "slo", "attainment"), ""),
    ("goodput (requests meeting SLO)", ("serving", "goodput_rps"), "req/s"),
    ("KV transfer share of TTFT", ("serving", "kv_transfer_share_of_ttft", "aggregate"), ""),
    ("prefix-cache hit rate (cached ÷ prompt tokens)", ("serving", "prefix_cache", "hit_rate"), ""),
    ("prefix-cache hit rate, local", ("serving", "prefix_cache", "local_hit_rate"), ""),
    ("prefix-cache hit rate, remote", ("serving", "prefix_cache", "remote_hit_rate"), ""),
    ("prefix-cache hit rate, infinite cache", ("serving", "prefix_cache", "ideal_hit_rate"), ""),
    ("KV transfer hidden behind prefill", ("serving", "pipelining", "hidden_fraction"), ""),
    ("sessions completed", ("serving", "sessions", "completed"), ""),
    ("cache hit rate, later session turns", ("serving", "sessions", "hit_rate", "later_turns"), ""),
    ("KV evictions (HBM full)", ("serving", "kv_tiers", "evictions"), ""),
    ("tokens recomputed after eviction", ("serving", "kv_tiers", "recomputed_tokens"), ""),
    ("KV moved to and from CXL", ("serving", "kv_tiers", "bytes_by_tier", "cxl", "moved"), "bytes"),
    (
        "KV moved to and from flash",
        ("serving", "kv_tiers", "bytes_by_tier", "flash", "moved"),
        "bytes",
    ),
    ("evicted requests' stall, p50", ("serving", "kv_tiers", "stall_ms", "p50"), "ms"),
    (
        "ITL p99 of requests never evicted",
        ("serving", "kv_tiers", "itl_ms_never_evicted", "p99"),
        "ms",
    ),
    ("share of requests in the busiest second", ("serving", "peak_second", "peak", "share"), ""),
]
# The same quantities as they crossed the emulated links, in a report's labelled raw section.
RAW_VALUE_ROWS: list[tuple[str, tuple[str, ...], str]] = [
    ("goodput", ("goodput_mbps",), "Mbit/s emulated"),
    ("incast goodput per round, mean", ("incast", "goodput_mbps", "mean"), "Mbit/s emulated"),
    ("incast goodput per round, min", ("incast", "goodput_mbps", "min"), "Mbit/s emulated"),
    ("bytes delivered", ("flows", "bytes"), "bytes emulated"),
]
# Columns of the comparison table besides p50/p99 of LATENCY_ROWS (real-equivalent).
COMPARE_VALUES: list[tuple[str, tuple[str, ...]]] = [
    ("goodput Gbit/s real-eq.", ("goodput_real_gbps",)),
    ("incast goodput per round, mean Gbit/s real-eq.", ("incast", "goodput_real_gbps", "mean")),
    ("drops", ("drops", "total")),
    ("failed flows", ("flows", "failed")),
    ("SLO attainment", ("serving", "slo", "attainment")),
    ("cache hit rate", ("serving", "prefix_cache", "hit_rate")),
    ("ideal hit rate", ("serving", "prefix_cache", "ideal_hit_rate")),
    ("KV hidden", ("serving", "pipelining", "hidden_fraction")),
    ("evictions", ("serving", "kv_tiers", "evictions")),
    ("recomputed tokens", ("serving", "kv_tiers", "recomputed_tokens")),
    ("Jain", ("jain_fairness",)),
]


def run_metrics(run: Run) -> dict[str, Any]:
    """The run's metrics: summary.json's, or recomputed from the tables when the
    summary has none (a run interrupted before it could summarise, or killed: then the
    tables are the recovered ones, ``recovery``)."""
    metrics = run.summary.get("metrics")
    if metrics:
        return metrics
    if run.config is None:  # no spec.yaml, or one the current schema cannot read
        return {}
    try:
        return summarize(run.flows, run.requests, run.tokens, run.queues, run.config, run.links)
    except (ValueError, KeyError):  # tables too incomplete to summarise
        return {}
    except Exception:  # tables cut short by a kill: a report, never a crash
        if never_finished(run):
            return {}
        raise


def key_metrics(run: Run) -> dict[str, Any]:
    """The flat row of a run in a comparison: label, point, verdict, then p50, p99 and
    sample count ``n`` of each latency metric (p99 ``None`` when n is too small for it,
    ``stats.percentile_supported``) and the single values of :data:`COMPARE_VALUES`."""
    m = run_metrics(run)
    row: dict[str, Any] = {"label": run.label, "run_id": run.run_id}
    row |= {f"point {k}": v for k, v in (run.summary.get("point") or {}).items()}
    row["fidelity"] = verdict_word(run.summary.get("fidelity"))
    row["partial"] = run.partial
    for label, path in LATENCY_ROWS:
        stats = at_path(m, path)
        if isinstance(stats, dict) and stats.get("count"):
            name, n = short_label(label), stats["count"]
            row[f"{name} p50"] = stats.get("p50")
            # a p99 the sample cannot support is no number to compare or plot
            row[f"{name} p99"] = stats.get("p99") if percentile_supported("p99", n) else None
            row[f"{name} n"] = n
    for label, path in COMPARE_VALUES:
        value = at_path(m, path)
        if value is not None:
            row[label] = value
    return row


def run_scale(run: Run) -> float | None:
    """The run's bandwidth scale: its configuration's, else summary.json's (``None`` when
    neither is known)."""
    scale = run.config.scale.bandwidth if run.config is not None else run.summary.get("scale")
    return float(scale) if isinstance(scale, int | float) and scale > 0 else None

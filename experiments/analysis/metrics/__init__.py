"""Metrics computed from a run's recorded tables (flows, requests, tokens, queues).

Pure functions over pandas DataFrames, so ``kvfabric report`` can recompute everything
without root and the unit tests can check each number by hand. Latency metrics use the
summary.json shape ``{count, mean, p50, p90, p99, p999, max}`` in ms, with ``None`` (not
NaN) when there is no data.
"""

from experiments.analysis.metrics.flows import (
    alltoall_step_ms,
    fct_by_kind,
    goodput_mbps,
    incast_goodput,
    probe_owd_ms,
    schedule_lateness_ms,
)
from experiments.analysis.metrics.kv import pipelining_metrics, prefix_cache_metrics
from experiments.analysis.metrics.queues import counter_increase, hottest_ports, queue_occupancy
from experiments.analysis.metrics.serving import kv_transfer_share, serving_metrics
from experiments.analysis.metrics.stats import (
    LATENCY_KEYS,
    jain_fairness,
    json_records,
    latency_stats,
    slowdown,
    value_stats,
)

__all__ = [
    "LATENCY_KEYS",
    "alltoall_step_ms",
    "counter_increase",
    "fct_by_kind",
    "goodput_mbps",
    "hottest_ports",
    "incast_goodput",
    "jain_fairness",
    "json_records",
    "kv_transfer_share",
    "latency_stats",
    "pipelining_metrics",
    "prefix_cache_metrics",
    "probe_owd_ms",
    "queue_occupancy",
    "schedule_lateness_ms",
    "serving_metrics",
    "slowdown",
    "value_stats",
]

"""The KPIs of draft-calabria-bmwg-ai-fabric-inference-bench-02 (and the terms it takes
from draft-calabria-bmwg-ai-fabric-terminology), computed from a run's tables.

``KPIS`` names each KPI a procedure of ``experiments.bmwg`` may report: its unit, what
it is, and the function here (or the existing metric) that computes it, or ``None``
when nothing here measures it (the procedures that need one are not feasible, or say
what stands in).

Modules: ``latency``, ``throughput``, ``fabric`` (KPIs of one run's tables),
``derived`` (what a procedure derives across its runs), ``window`` (the rows after
the warm-up; a soak's windows) and ``per_run`` (each KPI of one run as numbers).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kpi:
    unit: str
    what: str
    function: str | None  # dotted path of the function that computes it


_L, _T, _F, _D = (
    "experiments.analysis.bmwg.latency.",
    "experiments.analysis.bmwg.throughput.",
    "experiments.analysis.bmwg.fabric.",
    "experiments.analysis.bmwg.derived.",
)
KPIS: dict[str, Kpi] = {
    "TTFT": Kpi("ms", "request arrival to its first output token", _L + "ttft"),
    "ITL": Kpi("ms", "gap between consecutive output tokens", _L + "itl"),
    "TTFT_fabric": Kpi("ms", "the KV transfer time TTFT waits for", _L + "ttft_fabric"),
    "ITL_fabric": Kpi("ms", "the fabric's time per decode step", _L + "itl_fabric"),
    "E2E_latency": Kpi("ms", "arrival to the last output token", _L + "e2e_latency"),
    "TTFT_decomposition": Kpi(
        "ms", "T_prefill + T_transfer + T_decode_init", _L + "ttft_decomposition"
    ),
    "Fabric_fraction": Kpi("ratio", "T_transfer ÷ TTFT", _L + "fabric_fraction"),
    "Tail_spread": Kpi("ms", "P99 − P50", _L + "tail_spread"),
    "ITL_stalls": Kpi("tokens", "tokens with ITL > 100 ms", _L + "itl_stalls"),
    "TPS_input": Kpi("tokens/s", "prompt tokens prefilled per second", _T + "tps_input"),
    "TPS_output": Kpi("tokens/s", "output tokens emitted per second", _T + "tps_output"),
    "TPS_per_GPU": Kpi("tokens/s/GPU", "TPS_output ÷ decode GPUs", _T + "tps_per_gpu"),
    "Inference_Goodput": Kpi(
        "tokens/s",
        "output tokens/s of requests done without error or eviction",
        _T + "inference_goodput",
    ),
    "Fabric_Goodput": Kpi(
        "Gbit/s", "delivered payload bytes per second", _T + "fabric_goodput_gbps"
    ),
    "KV_BW": Kpi("Gbit/s", "Fabric_Goodput of prefill→decode KV", _T + "kv_bw_gbps"),
    "KV_xfer_latency": Kpi("ms", "completion time of one KV message", _T + "kv_xfer"),
    "KV_xfer_bandwidth": Kpi("Gbit/s", "KV goodput per sending port", _T + "kv_xfer"),
    "EP_alltoall_latency": Kpi("ms", "one dispatch + combine step", _T + "ep_alltoall"),
    "EP_alltoall_bandwidth": Kpi("Gbit/s", "all-to-all bytes ÷ step time", _T + "ep_alltoall"),
    "BusBW": Kpi("Gbit/s", "data × (n − 1)/n ÷ time", _T + "bus_bandwidth_gbps"),
    "Eviction_rate": Kpi("1/s", "KV evictions per second", _T + "eviction_rate"),
    "Fabric_FCT": Kpi("ms", "completion time of a KV flow", _F + "fabric_fct"),
    "Buffer_utilization": Kpi("%", "peak backlog ÷ buffer", _F + "buffer_utilization"),
    "Link_utilization": Kpi("%", "mean, P95, P99, peak tx ÷ capacity", _F + "link_utilization"),
    "Packet_drop_rate": Kpi("ppm", "drops per million packets offered", _F + "drop_rate_ppm"),
    "JFI": Kpi("index", "(Σx)² ÷ (n·Σx²)", _F + "jfi"),
    "MMR": Kpi("ratio", "max ÷ mean load ([TERMINOLOGY])", _F + "mmr"),
    "Max_min_ratio": Kpi("ratio", "max ÷ min (9.3, 9.4)", _F + "max_min_ratio"),
    "Concurrent_KV_flows": Kpi("flows", "most KV flows in flight", _F + "peak_concurrent_flows"),
    "Probe_delay": Kpi(
        "ms",
        "one-way delay of another tenant's probes",
        "experiments.analysis.metrics.probe_owd_ms",
    ),
    "Prefix_hit_rate": Kpi(
        "ratio", "cached ÷ prompt tokens", "experiments.analysis.metrics.prefix_cache_metrics"
    ),
    "Fault_disruption": Kpi(
        "ms",
        "time the failure stopped probes getting through (0: none lost)",
        "experiments.analysis.metrics.fault_impact.probe_recovery",
    ),
    "Recovery_time": Kpi(
        "ms",
        "failure to the delivered rate back near its level before",
        "experiments.analysis.metrics.fault_rate.rate_recovery",
    ),
    "Convergence_time": Kpi(
        "ms",
        "a fault to the controller's last rule installed for it (12.3); 8.3's settling "
        "of rates (derived.convergence_time_s) is not computed per run",
        "experiments.analysis.metrics.faults.fault_timings",
    ),
    "Contention_penalty": Kpi("ratio", "contended ÷ isolated P99", _D + "contention_penalty"),
    "Interference_penalty": Kpi("%", "multi- vs single-tenant", _D + "interference_penalty_pct"),
    "Inflection_point": Kpi("load", "where P99 leaves its low-load band", _D + "inflection_point"),
    "Degradation_factor": Kpi("ratio", "P99 at 50/75/90% ÷ at 0%", _D + "degradation_factors"),
    "Scale_limit": Kpi("GPUs", "first size > 10% worse", _D + "scale_limit"),
    "EP_scaling_efficiency": Kpi(
        "ratio", "(EP8 ÷ EPN latency) × N/8", _D + "ep_scaling_efficiency"
    ),
    "Decode_balance_CV": Kpi("ratio", "CV across decode workers", _D + "coefficient_of_variation"),
    "Request_Rate": Kpi("req/s", "highest rate meeting the SLO", _D + "slo_bounded_rate"),
    "Pareto_xPyD": Kpi("xPyD", "highest TPS meeting the SLO", _D + "pareto_xpyd"),
    "Goodput_efficiency": Kpi("ratio", "Inference_Goodput ÷ TPS_output", _D + "ratio"),
    "Tier_throughput_ratio": Kpi("ratio", "tier ÷ GPU-to-GPU throughput", _D + "ratio"),
    "Trend": Kpi("per window", "slope, change, monotonic growth", _D + "trend"),
    "Burst_size": Kpi("bytes", "KV burst size, duration and gap", None),
    "GPU_idle_time": Kpi("ms", "time waiting for the dispatch", None),
    "Wasted_fabric_bytes": Kpi("Gbit/s", "fabric bytes of preempted work", None),
    "First_transfer_time": Kpi("ms", "convergence to first KV on new nodes", None),
    "Steady_state_time": Kpi("ms", "to steady throughput after scaling", None),
    "ECN_marking_rate": Kpi("%", "packets marked CE", None),
    "PFC_frame_count": Kpi("frames/s", "PAUSE frames", None),
    "PFC_storm": Kpi("yes/no", "a PAUSE storm occurred", None),
    "Deadlock": Kpi("yes/no", "a PFC deadlock occurred", None),
    "Pause_propagation_depth": Kpi("hops", "how far PAUSE spread", None),
}

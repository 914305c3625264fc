"""Every metric of summary.json's ``metrics``: one name, one formula, one unit (the
project's contract with its users; ``docs/concepts/glossary.md`` is rendered from it).

A key is a path into ``metrics``: ``.`` between levels, ``*`` for a key that is data (a
port, tenant, flow kind, sender count, probe pair, tier or error text), ``[]`` for the
records of a list. A *distribution* is the ``{count, mean, p50, p90, p99, p999, max}``
of ``latency_stats`` (``value_stats``: ``{count, mean, min, p50, max}``), one entry.

Basis says what a figure stands for:

- **time**: a duration as measured. The bandwidth scale shrinks bytes and link rates by
  one factor, so a transfer takes the time it would at full size and rate: times are
  real-equivalent as they stand (queueing delays and TCP timers are not: handouts say so).
- **real-equivalent**: bytes or a rate divided by the scale (``*_real_gbps``,
  ``bytes_real``): what the figure would be on the real fabric. Headlines use these.
- **emulated**: bytes or a rate as they crossed the emulated links (``*_mbps``,
  ``bytes``); shown only in a report's labelled raw section.
- **count**, **ratio** (0-1 unless said), **identity** (names a port, tenant, ...).

``produced_by`` names the code that writes a key the committed references do not hold
yet (a newer metric, or one only some workloads produce).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GLOSSARY", "MAPS", "Metric", "by_key", "markdown", "metric_keys"]

TIME, REAL, EMULATED = "time", "real-equivalent", "emulated"
COUNT, RATIO, IDENTITY = "count", "ratio", "identity"


@dataclass(frozen=True)
class Metric:
    key: str
    unit: str
    basis: str
    formula: str
    produced_by: str = ""  # a module.function, for keys no committed reference holds


# Keys whose children are data, not names: their children are "*".
MAPS = (
    "alltoall.step_ms",
    "drops.by_port",
    "faults[].affected.errors",
    "fct_ms_by_kind",
    "flows.by_kind",
    "flows.errors",
    "incast.by_senders",
    "probe.owd_ms",
    "serving.kv_tiers.bytes_by_tier",
    "tenants",
)
DIST = "distribution"
SERVING = "experiments.analysis.metrics.serving"
KV = "experiments.analysis.metrics.kv.pipelining_metrics"
FAULTS = "experiments.analysis.metrics.faults.fault_timings"
SUMMARY = "experiments.analysis.summary.summarize"
_M = Metric

GLOSSARY: tuple[Metric, ...] = (
    _M("scale", "", RATIO, "the run's bandwidth scale: emulated rate ÷ real rate"),
    # ---- flows
    _M("flows.total", "flows", COUNT, "flows the schedule asked for (every kind)"),
    _M("flows.ok", "flows", COUNT, "flows that delivered all their bytes without error"),
    _M("flows.failed", "flows", COUNT, "flows.total − flows.ok"),
    _M("flows.by_kind.*.total", "flows", COUNT, "flows.total of one kind"),
    _M("flows.by_kind.*.ok", "flows", COUNT, "flows.ok of one kind"),
    _M("flows.errors.*", "flows", COUNT, "failed flows with this error text"),
    _M("flows.bytes", "bytes", EMULATED, "Σ bytes of ok flows, as sent on the emulated links"),
    _M("flows.bytes_real", "bytes", REAL, "Σ real-equivalent bytes of ok flows (bytes ÷ scale)"),
    _M("fct_ms", "ms", TIME, f"{DIST} of flow completion time t_end − t_start, ok flows"),
    _M("fct_ms_by_kind.*", "ms", TIME, "fct_ms of the flows of one kind"),
    _M(
        "fct_slowdown",
        "×",
        RATIO,
        f"{DIST} of FCT ÷ ideal FCT (bytes at the path's bottleneck rate plus propagation)",
    ),
    _M(
        "lateness_ms",
        "ms",
        TIME,
        f"{DIST} of t_start − t_sched: how late agents started flows against the schedule, "
        "waits behind earlier messages on a connection included. The fidelity check "
        "`lateness` judges another column, issue_lateness_ms (the timer lag alone, "
        "group-released flows left out), so the two p99s differ",
    ),
    _M(
        "goodput_mbps",
        "Mbit/s",
        EMULATED,
        "Σ bytes of ok payload flows (probes left out) × 8 ÷ (last t_end − first t_start)",
    ),
    _M("goodput_real_gbps", "Gbit/s", REAL, "goodput_mbps ÷ scale ÷ 1000"),
    _M("tenants.*.flows", "flows", COUNT, "flows of the tenant"),
    _M("tenants.*.failed", "flows", COUNT, "failed flows of the tenant"),
    _M("tenants.*.fct_ms", "ms", TIME, "fct_ms of the tenant's flows"),
    _M("tenants.*.fct_ms_p99", "ms", TIME, "tenants.*.fct_ms p99"),
    _M("tenants.*.goodput_mbps", "Mbit/s", EMULATED, "goodput_mbps of the tenant's flows"),
    _M("tenants.*.goodput_real_gbps", "Gbit/s", REAL, "tenants.*.goodput_mbps ÷ scale ÷ 1000"),
    _M(
        "jain_fairness",
        "",
        RATIO,
        "Jain's index of the tenants' goodput: (Σx)² ÷ (n·Σx²), 1 = equal shares",
    ),
    # ---- incast
    _M("incast.rounds", "rounds", COUNT, "incast rounds (one request to N senders each)"),
    _M("incast.failed_rounds", "rounds", COUNT, "rounds with a failed sender"),
    _M(
        "incast.round_ms",
        "ms",
        TIME,
        f"{DIST} of round time: last t_end of the round − its first t_sched",
    ),
    _M(
        "incast.goodput_mbps",
        "Mbit/s",
        EMULATED,
        "value_stats over rounds of each round's goodput: its ok bytes × 8 ÷ round time. "
        "The mean of per-round goodputs, not incast.aggregate_goodput_mbps (Σ bytes × 8 ÷ "
        "Σ round time, which the incast-collapse handout tabulates)",
    ),
    _M("incast.goodput_real_gbps", "Gbit/s", REAL, "incast.goodput_mbps ÷ scale ÷ 1000"),
    _M(
        "incast.aggregate_goodput_mbps",
        "Mbit/s",
        EMULATED,
        "Σ ok bytes of every round × 8 ÷ Σ round time: the aggregate the incast-collapse "
        "handout tabulates",
        SUMMARY,
    ),
    _M(
        "incast.aggregate_goodput_real_gbps",
        "Gbit/s",
        REAL,
        "incast.aggregate_goodput_mbps ÷ scale ÷ 1000",
        SUMMARY,
    ),
    _M("incast.by_senders.*.rounds", "rounds", COUNT, "incast.rounds with this many senders"),
    _M("incast.by_senders.*.round_ms", "ms", TIME, "incast.round_ms of those rounds"),
    _M("incast.by_senders.*.goodput_mbps", "Mbit/s", EMULATED, "incast.goodput_mbps of those"),
    _M("incast.by_senders.*.goodput_real_gbps", "Gbit/s", REAL, "… ÷ scale ÷ 1000"),
    _M("incast.per_round[].tenant", "", IDENTITY, "the round's tenant"),
    _M("incast.per_round[].round", "", IDENTITY, "the round's number"),
    _M("incast.per_round[].senders", "senders", COUNT, "senders in the round"),
    _M("incast.per_round[].failed", "flows", COUNT, "failed senders in the round"),
    _M("incast.per_round[].bytes", "bytes", EMULATED, "ok bytes delivered in the round"),
    _M("incast.per_round[].round_ms", "ms", TIME, "last t_end − first t_sched"),
    _M("incast.per_round[].goodput_mbps", "Mbit/s", EMULATED, "bytes × 8 ÷ round_ms"),
    _M("incast.per_round[].goodput_real_gbps", "Gbit/s", REAL, "goodput_mbps ÷ scale ÷ 1000"),
    # ---- all-to-all, probes
    _M("alltoall.steps", "steps", COUNT, "all-to-all steps (every rank sends to every other)"),
    _M("alltoall.failed_steps", "steps", COUNT, "steps with a failed flow"),
    _M("alltoall.step_ms.*", "ms", TIME, f"{DIST} per tenant: last t_end − first t_sched"),
    _M("probe.owd_ms.*", "ms", TIME, f"{DIST} of a probe pair's one-way delay, t_end − t_start"),
    # ---- queues, drops, links
    _M("queue_pkts.all", "packets", COUNT, f"{DIST} of every sampled egress backlog"),
    _M("queue_pkts.ports", "ports", COUNT, "egress ports sampled"),
    _M("queue_pkts.hottest[].node", "", IDENTITY, "the switch"),
    _M("queue_pkts.hottest[].port", "", IDENTITY, "its port"),
    _M("queue_pkts.hottest[].samples", "samples", COUNT, "backlog samples of the port"),
    _M("queue_pkts.hottest[].span_s", "s", TIME, "time between its first and last sample"),
    _M("queue_pkts.hottest[].mean_pkts", "packets", COUNT, "time-weighted mean backlog"),
    _M("queue_pkts.hottest[].p99_pkts", "packets", COUNT, "time-weighted p99 backlog"),
    _M("queue_pkts.hottest[].max_pkts", "packets", COUNT, "largest backlog sampled"),
    _M("queue_pkts.hottest[].max_bytes", "bytes", EMULATED, "largest backlog in bytes"),
    _M("queue_pkts.hottest[].drops", "packets", COUNT, "packets the queue dropped"),
    _M(
        "queue_pkts.hottest[].frac_above",
        "",
        RATIO,
        "share of span_s the backlog stood above queue_above.threshold_pkts",
    ),
    _M("queue_pkts.hottest[].sent_bytes", "bytes", EMULATED, "bytes the queue dequeued"),
    _M("queue_pkts.hottest[].dequeue_mbps", "Mbit/s", EMULATED, "sent_bytes × 8 ÷ span_s"),
    _M(
        "queue_pkts.hottest[].busy_dequeue_mbps",
        "Mbit/s",
        EMULATED,
        "dequeue rate while a queue stood (what the dequeue_rate check judges)",
    ),
    _M("drops.total", "packets", COUNT, "Σ packets dropped by egress queues"),
    _M("drops.ports_with_drops", "ports", COUNT, "ports that dropped a packet"),
    _M("drops.by_port.*", "packets", COUNT, "packets dropped at one switch:port"),
    _M(
        "queue_above.threshold_pkts",
        "packets",
        COUNT,
        "the threshold: half the buffer, in frames of the run's MTU",
    ),
    _M("queue_above.time_above_s", "s", TIME, "Σ over ports of the time above the threshold"),
    _M("queue_above.max_frac", "", RATIO, "the largest frac_above of any port"),
    _M("queue_above.max_port", "", IDENTITY, "the port with max_frac"),
    _M("links.ports", "ports", COUNT, "ports whose counters were sampled"),
    _M("links.tx_bytes", "bytes", EMULATED, "Σ bytes every port transmitted"),
    _M("links.tx_dropped", "packets", COUNT, "Σ packets the ports' counters dropped"),
    _M("links.busiest[].node", "", IDENTITY, "the node"),
    _M("links.busiest[].port", "", IDENTITY, "its port"),
    _M("links.busiest[].tx_bytes", "bytes", EMULATED, "bytes it transmitted"),
    _M("links.busiest[].tx_dropped", "packets", COUNT, "packets its counter dropped"),
    _M("links.busiest[].mean_tx_mbps", "Mbit/s", EMULATED, "tx_bytes × 8 ÷ sampled span"),
    _M("links.busiest[].peak_tx_mbps", "Mbit/s", EMULATED, "highest rate of one interval"),
    _M("links.busiest[].mean_tx_real_gbps", "Gbit/s", REAL, "mean_tx_mbps ÷ scale ÷ 1000"),
    _M("links.busiest[].peak_tx_real_gbps", "Gbit/s", REAL, "peak_tx_mbps ÷ scale ÷ 1000"),
    # ---- serving latencies
    _M("ttft_ms", "ms", TIME, f"{DIST} of time to first token: first token − arrival, served"),
    _M("tpot_ms", "ms", TIME, f"{DIST} of time per output token: (e2e − TTFT) ÷ (tokens − 1)"),
    _M(
        "itl_ms",
        "ms",
        TIME,
        f"{DIST} of inter-token latency: the gap before each token after the first",
    ),
    _M("e2e_ms", "ms", TIME, f"{DIST} of end to end: last token − arrival"),
    _M(
        "kv_transfer_ms",
        "ms",
        TIME,
        f"{DIST} of the KV-cache transfer: first shard's start → last shard's end",
    ),
    _M("serving.requests", "requests", COUNT, "requests that arrived"),
    _M("serving.served", "requests", COUNT, "requests with a first token"),
    _M("serving.unserved", "requests", COUNT, "requests.total − served"),
    _M("serving.throughput_rps", "req/s", RATIO, "served requests ÷ the run's duration"),
    _M("serving.goodput_rps", "req/s", RATIO, "requests meeting both SLOs ÷ duration"),
    _M("serving.slo.ttft_ms", "ms", TIME, "the TTFT SLO (the spec's)"),
    _M("serving.slo.tpot_ms", "ms", TIME, "the TPOT SLO (the spec's)"),
    _M("serving.slo.ttft_attainment", "", RATIO, "share of requests with TTFT ≤ the SLO"),
    _M("serving.slo.tpot_attainment", "", RATIO, "share of requests with TPOT ≤ the SLO"),
    _M("serving.slo.attainment", "", RATIO, "share of requests meeting both SLOs"),
    _M(
        "serving.kv_transfer_share_of_ttft.aggregate",
        "",
        RATIO,
        "Σ kv_transfer_ms ÷ Σ ttft_ms over served requests",
    ),
    _M(
        "serving.kv_transfer_share_of_ttft.per_request",
        "",
        RATIO,
        "value_stats of kv_transfer_ms ÷ ttft_ms per request",
    ),
    _M("serving.prefix_cache.enabled", "", IDENTITY, "whether a prefix cache was on"),
    _M("serving.prefix_cache.requests", "requests", COUNT, "requests counted"),
    _M("serving.prefix_cache.prompt_tokens", "tokens", COUNT, "Σ prompt tokens"),
    _M("serving.prefix_cache.cached_tokens", "tokens", COUNT, "Σ prompt tokens found cached"),
    _M("serving.prefix_cache.hit_rate", "", RATIO, "cached_tokens ÷ prompt_tokens"),
    _M("serving.prefix_cache.local_hit_rate", "", RATIO, "… of them in the instance's server"),
    _M("serving.prefix_cache.remote_hit_rate", "", RATIO, "… fetched from another server"),
    _M(
        "serving.prefix_cache.ideal_hit_rate",
        "",
        RATIO,
        "the hit rate of an infinite cache shared by all (every reusable token hits)",
    ),
    _M("serving.pipelining.requests", "requests", COUNT, "layer-pipelined requests", KV),
    _M(
        "serving.pipelining.hidden_fraction",
        "",
        RATIO,
        "1 − Σ kv_exposed_ms ÷ Σ kv_busy_ms: the KV transfer's share done during prefill",
        KV,
    ),
    _M(
        "serving.pipelining.hidden_fraction_per_request",
        "",
        RATIO,
        "value_stats of 1 − kv_exposed_ms ÷ kv_busy_ms per request",
        KV,
    ),
    _M("serving.pipelining.kv_busy_ms", "ms", TIME, f"{DIST} of KV transfer busy time", KV),
    _M(
        "serving.pipelining.kv_exposed_ms",
        "ms",
        TIME,
        f"{DIST} of KV transfer time left after prefill ended",
        KV,
    ),
    # ---- sessions
    _M("serving.sessions.sessions", "sessions", COUNT, "sessions started"),
    _M("serving.sessions.completed", "sessions", COUNT, "sessions whose every turn was served"),
    _M("serving.sessions.turns", "turns", COUNT, "value_stats of turns per session"),
    _M("serving.sessions.completion_ms", "ms", TIME, f"{DIST} of last turn's end − first arrival"),
    _M("serving.sessions.reusable_rate", "", RATIO, "prompt tokens a session's earlier turns hold"),
    _M("serving.sessions.hit_rate.first_turn", "", RATIO, "prefix hit rate of first turns"),
    _M("serving.sessions.hit_rate.later_turns", "", RATIO, "prefix hit rate of later turns"),
    _M("serving.sessions.ttft_ms.first_turn", "ms", TIME, "ttft_ms of first turns"),
    _M("serving.sessions.ttft_ms.later_turns", "ms", TIME, "ttft_ms of later turns"),
    _M("serving.sessions.by_turn[].turn", "", IDENTITY, "the turn's number"),
    _M("serving.sessions.by_turn[].requests", "requests", COUNT, "requests of that turn"),
    _M("serving.sessions.by_turn[].served", "requests", COUNT, "served requests of that turn"),
    _M("serving.sessions.by_turn[].hit_rate", "", RATIO, "prefix hit rate of that turn"),
    _M("serving.sessions.by_turn[].ttft_p50_ms", "ms", TIME, "TTFT p50 of that turn"),
    _M(
        "serving.sessions.by_turn[].ttft_p99_ms",
        "ms",
        TIME,
        "TTFT p99 of that turn (pandas' linear interpolation; with under 100 requests a"
        " turn it is close to the turn's slowest)",
    ),
    _M(
        "serving.sessions.waiting_ms",
        "ms",
        TIME,
        f"{DIST} over complete sessions of the sum of their turns' ttft_ms (tools excluded)",
    ),
    _M(
        "serving.sessions.slow_turns.threshold_ms",
        "ms",
        TIME,
        "the run's per-turn TTFT p90: a turn above it is slow",
    ),
    _M(
        "serving.sessions.slow_turns.sessions_with_one",
        "",
        RATIO,
        "sessions with at least one turn above threshold_ms ÷ sessions",
    ),
    _M(
        "serving.sessions.slow_turns.if_independent",
        "",
        RATIO,
        "mean over sessions of 1 − 0.9^turns: sessions_with_one if turns were independent",
    ),
    # ---- hop counts (experiments.analysis.metrics.hops)
    _M(
        "serving.hops.hops",
        "hops",
        COUNT,
        "value_stats of switch-to-switch hops on the fewest-hop route from each request's"
        " prefill host to its decode host (requests whose KV crossed a switch)",
    ),
    _M("serving.hops.by_hops[].hops", "hops", IDENTITY, "the hop count of the group"),
    _M("serving.hops.by_hops[].requests", "requests", COUNT, "requests with that hop count"),
    _M("serving.hops.by_hops[].ttft_ms", "ms", TIME, f"{DIST} of those requests' ttft_ms"),
    _M(
        "serving.hops.by_hops[].kv_transfer_ms",
        "ms",
        TIME,
        f"{DIST} of those requests' kv_transfer_ms",
    ),
    # ---- peak second
    _M("serving.peak_second.requests", "requests", COUNT, "requests in the window"),
    _M("serving.peak_second.span_s", "s", TIME, "the arrival window"),
    _M("serving.peak_second.mean_per_s", "req/s", RATIO, "requests ÷ span_s"),
    _M(
        "serving.peak_second.peak_over_rest_ttft_p50",
        "×",
        RATIO,
        "TTFT p50 of the busiest second's arrivals ÷ the rest's",
    ),
    _M("serving.peak_second.peak.start_s", "s", TIME, "start of the second with most arrivals"),
    _M("serving.peak_second.peak.share", "", RATIO, "its arrivals ÷ all arrivals"),
    _M("serving.peak_second.*.requests", "requests", COUNT, "arrivals of the group"),
    _M("serving.peak_second.*.unserved", "requests", COUNT, "unserved arrivals of the group"),
    _M("serving.peak_second.*.ttft_ms", "ms", TIME, "ttft_ms of the group"),
    _M("serving.peak_second.*.prefill_ms", "ms", TIME, f"{DIST} of prefill time of the group"),
    _M("serving.peak_second.*.kv_transfer_ms", "ms", TIME, "kv_transfer_ms of the group"),
    _M(
        "serving.peak_second.*.requests_ahead",
        "requests",
        COUNT,
        "value_stats of prefills queued ahead at arrival",
    ),
    # ---- KV tiers
    _M("serving.kv_tiers.evictions", "evictions", COUNT, "KV evictions when HBM was full"),
    _M("serving.kv_tiers.requests_evicted", "requests", COUNT, "requests evicted at least once"),
    _M("serving.kv_tiers.requests_recomputed", "requests", COUNT, "evicted and recomputed"),
    _M("serving.kv_tiers.recomputed_tokens", "tokens", COUNT, "tokens recomputed after eviction"),
    _M("serving.kv_tiers.tier_hit_blocks", "blocks", COUNT, "KV blocks found in a lower tier"),
    _M("serving.kv_tiers.bytes_by_tier.*.offloaded", "bytes", REAL, "KV moved down to the tier"),
    _M("serving.kv_tiers.bytes_by_tier.*.fetched", "bytes", REAL, "KV fetched back from it"),
    _M("serving.kv_tiers.bytes_by_tier.*.moved", "bytes", REAL, "offloaded + fetched"),
    _M(
        "serving.kv_tiers.tier_fetch_bytes_on_wire",
        "bytes",
        EMULATED,
        "Σ bytes of tier_fetch flows on the emulated fabric",
    ),
    _M("serving.kv_tiers.stall_ms", "ms", TIME, f"{DIST} of an evicted request's stall"),
    _M("serving.kv_tiers.stall_ms_total", "ms", TIME, "Σ stalls"),
    _M("serving.kv_tiers.itl_ms_evicted", "ms", TIME, "itl_ms of evicted requests"),
    _M("serving.kv_tiers.itl_ms_never_evicted", "ms", TIME, "itl_ms of requests never evicted"),
    # ---- noisy neighbour
    _M("noisy_neighbour[].victim", "", IDENTITY, "the victim tenant"),
    _M("noisy_neighbour[].aggressor", "", IDENTITY, "the aggressor tenant"),
    _M("noisy_neighbour[].metric", "", IDENTITY, "the victim's metric compared (itl_ms, fct_ms)"),
    _M("noisy_neighbour[].aggressor_active_s", "s", TIME, "time the aggressor had flows"),
    _M("noisy_neighbour[].with_aggressor", "ms", TIME, f"{DIST} of the metric, aggressor active"),
    _M("noisy_neighbour[].without_aggressor", "ms", TIME, f"{DIST} of it, aggressor idle"),
    _M("noisy_neighbour[].slowdown_p50", "×", RATIO, "with p50 ÷ without p50"),
    _M("noisy_neighbour[].slowdown_p99", "×", RATIO, "with p99 ÷ without p99"),
    # ---- faults
    _M("faults[].fault", "", IDENTITY, "the fault's kind (link_down, switch_down, ...)", FAULTS),
    _M("faults[].event", "", IDENTITY, "the applied event", FAULTS),
    _M("faults[].link", "", IDENTITY, "the link it cut", FAULTS),
    _M("faults[].links", "links", COUNT, "links the fault took down", FAULTS),
    _M("faults[].switch", "", IDENTITY, "the switch it took down", FAULTS),
    _M("faults[].target", "", IDENTITY, "what it acted on", FAULTS),
    _M("faults[].clock", "", IDENTITY, "the clock at_s is on", FAULTS),
    _M("faults[].at_s", "s", TIME, "when it was applied, from the traffic's start", FAULTS),
    _M("faults[].detected_ms", "ms", TIME, "fault → the controller heard of it", FAULTS),
    _M("faults[].links_heard", "links", COUNT, "links the controller heard go down", FAULTS),
    _M("faults[].last_rule_sent_ms", "ms", TIME, "fault → its last rule sent", FAULTS),
    _M("faults[].installed_ms", "ms", TIME, "fault → every switch acknowledged", FAULTS),
    _M("faults[].no_controller_ms", "ms", TIME, "time no controller was running", FAULTS),
    _M("faults[].window_ms", "ms", TIME, "the window after the fault judged", FAULTS),
    _M("faults[].first_probe_ms", "ms", TIME, "fault → first probe delivered after", FAULTS),
    _M("faults[].probes_lost", "probes", COUNT, "probes lost in the window", FAULTS),
    _M("faults[].probe_pairs_hit", "pairs", COUNT, "probe pairs that lost one", FAULTS),
    _M("faults[].rate_ports", "ports", COUNT, "ports whose rate was followed", FAULTS),
    _M("faults[].pre_fault_mbps", "Mbit/s", EMULATED, "their rate before the fault", FAULTS),
    _M("faults[].min_mbps_after", "Mbit/s", EMULATED, "their lowest rate after", FAULTS),
    _M("faults[].dip_pct", "%", RATIO, "1 − min_mbps_after ÷ pre_fault_mbps, × 100", FAULTS),
    _M("faults[].back_to_rate_ms", "ms", TIME, "fault → rate back to 90 % of before", FAULTS),
    _M("faults[].flows_started", "flows", COUNT, "flows started in the window", FAULTS),
    _M("faults[].flows_started_failed", "flows", COUNT, "… of them failed", FAULTS),
    _M("faults[].affected.flows", "flows", COUNT, "flows in flight on the fault", FAULTS),
    _M("faults[].affected.failed", "flows", COUNT, "… of them failed", FAULTS),
    _M("faults[].affected.bytes", "bytes", EMULATED, "their bytes", FAULTS),
    _M("faults[].affected.errors.*", "flows", COUNT, "failed flows with this error text", FAULTS),
    _M("faults[].affected.requests", "requests", COUNT, "requests the fault touched", FAULTS),
    _M("faults[].affected.requests_failed", "requests", COUNT, "… unserved", FAULTS),
    _M("faults[].affected.ttft_p50_ms", "ms", TIME, "their TTFT p50", FAULTS),
    _M("faults[].affected.others_ttft_p50_ms", "ms", TIME, "TTFT p50 of the rest", FAULTS),
)


def by_key() -> dict[str, Metric]:
    return {m.key: m for m in GLOSSARY}


def _is_distribution(value: Any) -> bool:
    stats = {"count", "mean", "min", "p50", "p90", "p99", "p999", "max"}
    return isinstance(value, Mapping) and "count" in value and set(value) <= stats


def metric_keys(metrics: Mapping[str, Any]) -> Iterator[str]:
    """Every metric key of one summary.json ``metrics`` in the glossary's notation."""

    def walk(value: Any, path: str) -> Iterator[str]:
        if path in MAPS and not value:  # no port dropped, no error: still the map's key
            yield f"{path}.*"
        elif isinstance(value, Mapping) and value and not _is_distribution(value):
            for k, v in value.items():
                yield from walk(v, f"{path}.{'*' if path in MAPS else k}" if path else str(k))
        elif isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
            for v in value:  # an empty list of records holds no metric
                yield from walk(v, f"{path}[]")
        elif path:
            yield path

    yield from walk(metrics, "")


def matches(pattern: str, key: str) -> bool:
    """Does glossary key ``pattern`` (``*`` any one level) name ``key``?"""
    a, b = pattern.split("."), key.split(".")
    return len(a) == len(b) and all(x in ("*", y) for x, y in zip(a, b, strict=True))


def entry_of(key: str) -> Metric | None:
    """The glossary entry naming ``key``: its own, else a ``*`` pattern's."""
    exact = by_key().get(key)
    return exact or next((m for m in GLOSSARY if matches(m.key, key)), None)


def markdown() -> str:
    """docs/concepts/glossary.md."""
    head, _, rest = (__doc__ or "").partition("\n\n")
    lines = [
        "# Glossary of metrics",
        "",
        "Every number in a run's `summary.json` (`metrics`), with its formula, unit and",
        "basis; rendered from `experiments/analysis/glossary.py`, which a unit test checks",
        "against the committed references' summaries.",
        "",
        rest.split("``produced_by``")[0].rstrip(),
        "",
        "| key | unit | basis | formula |",
        "| --- | --- | --- | --- |",
    ]
    for m in GLOSSARY:
        formula = m.formula.replace("|", "\\|")
        lines.append(f"| `{m.key}` | {m.unit} | {m.basis} | {formula} |")
    return "\n".join(lines) + "\n"

"""The numbers a report shows first: the experiment's question, and each headline
measurement beside its analytic estimate.

    question("link-failure")                 # the handout's **Question.** paragraph, or None
    headline(summary["metrics"], summary["estimate"])
    # [Headline("TTFT", "ms", {"p50": 142.2, "p99": 178.1, "count": 512}, {"p50": 40.0, ...}), ...]

A :class:`Headline` is a distribution (``measured`` has ``p50``, ``p99`` and the sample
``count``) or a single value (``measured`` has ``value``); ``estimate`` has the same keys where
``summary.json.estimate`` predicts the quantity (``{}`` where it does not). Units are
real-equivalent: times as measured (the bandwidth scale shrinks message bytes and link
rates by one factor, so a transfer takes the time it would take at full size and rate),
rates divided by the scale. Only quantities the run measured are returned, in the order
of :data:`HEADLINES`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.spec.load import HANDOUTS_DIR


@dataclass(frozen=True)
class Headline:
    """One headline quantity: what was measured and what theory predicts."""

    label: str
    unit: str
    measured: dict[str, float]
    estimate: dict[str, float] = field(default_factory=dict)

    @property
    def distribution(self) -> bool:
        return "p50" in self.measured


def _get(m: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(m, Mapping):
            return None
        m = m.get(key)
    return m


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _quantiles(stats: Any, measured: bool = True) -> dict[str, float]:
    # a measured distribution needs samples; a predicted one may state no count
    # (a measured one keeps its count: the report prints only the percentiles it supports)
    if not isinstance(stats, Mapping) or (measured and not stats.get("count")):
        return {}
    out = {q: float(stats[q]) for q in ("p50", "p99") if _number(stats.get(q))}
    return out | ({"count": int(stats["count"])} if measured and out else {})


def _value(x: Any) -> dict[str, float]:
    return {"value": float(x)} if _number(x) else {}


def _only(entries: Any, *path: str) -> dict[str, float]:
    """The estimate of a workload that appears once (``estimate.incast`` is a list, one
    entry per workload); with several the prediction is ambiguous and not shown."""
    if not isinstance(entries, list) or len(entries) != 1:
        return {}
    return _value(_get(entries[0], *path))


Extract = Callable[[Mapping[str, Any]], dict[str, float]]

# (label, unit, measured from summary.metrics, estimate from summary.estimate)
HEADLINES: list[tuple[str, str, Extract, Extract]] = [
    (
        "TTFT",
        "ms",
        lambda m: _quantiles(m.get("ttft_ms")),
        lambda e: _quantiles(_get(e, "serving", "ttft_ms"), measured=False),
    ),
    (
        "ITL",
        "ms",
        lambda m: _quantiles(m.get("itl_ms")),
        lambda e: _quantiles(_get(e, "serving", "itl_ms"), measured=False),
    ),
    (
        "KV transfer",
        "ms",
        lambda m: _quantiles(m.get("kv_transfer_ms")),
        lambda e: _quantiles(_get(e, "serving", "kv_transfer_ms"), measured=False),
    ),
    (
        "FCT, kv_transfer flows",
        "ms",
        lambda m: {} if m.get("ttft_ms") else _quantiles(_get(m, "fct_ms_by_kind", "kv_transfer")),
        lambda e: _only(e.get("kv_transfer"), "collisions", "fct_ms_this_policy"),
    ),
    (
        "incast round",
        "ms",
        lambda m: _quantiles(_get(m, "incast", "round_ms")),
        lambda e: _only(e.get("incast"), "predicted_round_ms"),
    ),
    ("FCT, all flows", "ms", lambda m: _quantiles(m.get("fct_ms")), lambda e: {}),
    (
        "goodput",
        "Gbit/s real-equivalent",
        lambda m: _value(m.get("goodput_real_gbps")),
        lambda e: {},
    ),
    (
        "incast goodput per round, mean",
        "Gbit/s real-equivalent",
        lambda m: _value(_get(m, "incast", "goodput_real_gbps", "mean")),
        lambda e: _only(e.get("incast"), "predicted_goodput_real_gbps"),
    ),
    (
        "prefix-cache hit rate",
        "fraction of prompt tokens",
        lambda m: (
            _value(_get(m, "serving", "prefix_cache", "hit_rate"))
            if _get(m, "serving", "prefix_cache", "enabled")
            else {}
        ),
        lambda e: _value(_get(e, "serving", "prefix_cache", "hit_rate")),
    ),
    (
        "prefix-cache hit rate, infinite cache",
        "fraction of prompt tokens",
        lambda m: (
            _value(_get(m, "serving", "prefix_cache", "ideal_hit_rate"))
            if _get(m, "serving", "prefix_cache", "enabled")
            else {}
        ),
        lambda e: _value(_get(e, "serving", "prefix_cache", "ideal_hit_rate")),
    ),
    (
        "KV transfer hidden behind prefill",
        "fraction of its time",
        lambda m: _value(_get(m, "serving", "pipelining", "hidden_fraction")),
        lambda e: _value(_get(e, "serving", "pipelining", "hidden_fraction")),
    ),
    (
        "SLO attainment (TTFT and TPOT)",
        "fraction of requests",
        lambda m: _value(_get(m, "serving", "slo", "attainment")),
        lambda e: {},
    ),
    ("failed flows", "flows", lambda m: _value(_get(m, "flows", "failed")), lambda e: {}),
    ("drops", "packets", lambda m: _value(_get(m, "drops", "total")), lambda e: {}),
]


def headline(
    metrics: Mapping[str, Any] | None, estimate: Mapping[str, Any] | None
) -> list[Headline]:
    """The headline quantities the run measured, each with its estimate (if any)."""
    m, e = metrics or {}, estimate or {}
    out = []
    for label, unit, measured, predicted in HEADLINES:
        got = measured(m)
        if got:
            out.append(Headline(label, unit, got, predicted(e)))
    return out


def question(experiment: str | None, handouts: Path = HANDOUTS_DIR) -> str | None:
    """The ``**Question.**`` paragraph of the experiment's handout, on one line; ``None``
    when the experiment has no handout (a user's own spec)."""
    if not experiment or "/" in experiment:
        return None
    path = handouts / f"{experiment}.md"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    match = re.search(r"\*\*Question\.\*\*(.*?)(?:\n\s*\n|$)", text, flags=re.S)
    return " ".join(match.group(1).split()) if match else None

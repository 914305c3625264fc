"""Percentiles only where the sample supports them (#29): p99 needs n >= 100, p99.9 needs
n >= 1,000; reports print "n too small (n=K)" instead, summary.json keeps the numbers."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.analysis.metrics.stats import (
    latency_stats,
    percentile_supported,
    supported_percentiles,
)
from experiments.output.formatting import percentile_cell


@pytest.mark.parametrize(
    ("n", "printable"),
    [
        (0, ()),
        (3, ("p50",)),
        (9, ("p50",)),
        (10, ("p50", "p90")),
        (99, ("p50", "p90")),
        (100, ("p50", "p90", "p99")),
        (999, ("p50", "p90", "p99")),
        (1000, ("p50", "p90", "p99", "p999")),
    ],
)
def test_which_percentiles_n_samples_support(n, printable):
    assert supported_percentiles(n) == printable
    assert all(percentile_supported(q, n) == (q in printable) for q in ("p90", "p99", "p999"))


def test_a_prediction_without_a_count_and_other_keys_are_not_judged():
    assert percentile_supported("p99", None) and percentile_supported("mean", 1)


def test_the_report_cell_says_n_too_small_with_n():
    few = latency_stats([40.0, 60.0, 200.0])
    assert percentile_cell(few, "p50") == "60"
    assert percentile_cell(few, "p99") == "n too small (n=3)"
    assert percentile_cell(few, "p999") == "n too small (n=3)"
    many = latency_stats(np.arange(1, 201, dtype=float))
    assert percentile_cell(many, "p99") == "198"
    assert percentile_cell(many, "p999") == "n too small (n=200)"
    assert percentile_cell({"p50": 1.0, "p99": 2.0}, "p99") == "2"  # an estimate: no count
    assert percentile_cell(None, "p99") == "–"


def test_summary_json_keeps_the_numbers_and_n_beside_them():
    few = latency_stats([40.0, 60.0, 200.0])
    assert few["count"] == 3 and few["p99"] == pytest.approx(197.2)

"""Confidence intervals and the spread of repeats (#29), checked on synthetic data whose
truth is known: each interval covers the truth about 95 % of the time, seeded."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from experiments.analysis.intervals import (
    across_seeds,
    coefficient_of_variation,
    over_requests,
    ratio_over_requests,
    t_quantile,
)
from experiments.analysis.repeats import repeats_block
from experiments.orchestration.runner import Outcome, record_repeats
from experiments.output.ratios import ratio_lines


def _coverage(trials: int, covered) -> float:
    return sum(covered(np.random.default_rng(1000 + t), t) for t in range(trials)) / trials


def test_the_bootstrap_interval_of_a_median_covers_the_truth_95_percent_of_the_time():
    truth = math.log(2)  # median of the unit exponential

    def covered(rng, t):
        ci = over_requests(rng.exponential(1.0, 200), "p50", seed=t, n_boot=400)
        return ci.contains(truth)

    assert 0.90 <= _coverage(200, covered) <= 0.99


def test_the_bootstrap_interval_of_a_mean_narrows_with_n():
    rng = np.random.default_rng(3)
    small = over_requests(rng.normal(5, 1, 50), "mean", seed=1)
    large = over_requests(rng.normal(5, 1, 5000), "mean", seed=1)
    assert small.contains(5.0) and large.contains(5.0)
    assert (large.high - large.low) < (small.high - small.low) / 5
    assert large.method == "bootstrap over requests" and large.n == 5000


def test_the_interval_across_three_seeds_covers_the_mean_95_percent_of_the_time():
    def covered(rng, t):
        return across_seeds(rng.normal(10.0, 2.0, 3)).contains(10.0)

    assert 0.93 <= _coverage(3000, covered) <= 0.97


def test_t_quantiles():
    assert t_quantile(2) == pytest.approx(4.303)
    assert t_quantile(100) == pytest.approx(1.984, abs=1e-3)
    assert t_quantile(10_000) == pytest.approx(1.960, abs=1e-3)


def test_a_ratio_of_two_samples_of_one_distribution_includes_one():
    def covered(rng, t):
        a, b = rng.lognormal(0, 0.5, 300), rng.lognormal(0, 0.5, 300)
        return not ratio_over_requests(a, b, "p50", seed=t, n_boot=300).excludes_one

    assert _coverage(100, covered) >= 0.88


def test_a_ratio_of_one_and_a_half_is_detected_and_covered():
    rng = np.random.default_rng(5)
    a, b = 1.5 * rng.exponential(1.0, 500), rng.exponential(1.0, 500)
    ci = ratio_over_requests(a, b, "p50", seed=0)
    assert ci.excludes_one and ci.contains(1.5) and ci.low > 1.1


def test_intervals_repeat_with_the_seed():
    x = np.random.default_rng(9).exponential(1.0, 300)
    assert over_requests(x, "p99", seed=4) == over_requests(x, "p99", seed=4)
    assert over_requests(x, "p99", seed=4) != over_requests(x, "p99", seed=5)


def test_too_few_samples_give_no_interval():
    assert over_requests([1.0], "p50", 0) is None and across_seeds([2.0]) is None
    assert ratio_over_requests([1.0, 2.0], [0.0, 0.0], "p50", 0) is None
    with pytest.raises(ValueError, match="allowed mean"):
        over_requests([1.0, 2.0], "p42", 0)


def test_coefficient_of_variation():
    assert coefficient_of_variation([1.0, 2.0, 3.0]) == pytest.approx(0.5)
    assert coefficient_of_variation([4.0]) is None
    assert coefficient_of_variation([0.0, 0.0]) is None


# ---- repeats of a sweep point --------------------------------------------------------------


def _summary(seed: int, ttft_p50: float, partial: bool = False) -> dict:
    return {
        "run_id": f"run-{seed}",
        "seed": seed,
        "point": {"workloads.0.router": "least_loaded"},
        "partial": partial,
        "error": None,
        "metrics": {"ttft_ms": {"count": 50, "p50": ttft_p50, "p99": 2 * ttft_p50}},
    }


def test_the_repeats_block_gives_values_mean_cv_and_the_interval_across_seeds():
    block = repeats_block([_summary(1, 10.0), _summary(2, 12.0), _summary(3, 14.0)])
    ttft = block["metrics"]["ttft_ms.p50"]
    assert ttft["values"] == [10.0, 12.0, 14.0] and ttft["mean"] == pytest.approx(12.0)
    assert ttft["cv"] == pytest.approx(2.0 / 12.0)
    half = 4.303 * 2.0 / math.sqrt(3)
    assert ttft["ci95"]["low"] == pytest.approx(12.0 - half, rel=1e-3)
    assert ttft["ci95"]["method"] == "t over seeds"
    assert "itl_ms.p50" not in block["metrics"]  # not measured
    assert block["seeds"] == [1, 2, 3]


def test_partial_runs_are_left_out_of_the_repeats():
    block = repeats_block([_summary(1, 10.0), _summary(2, 12.0), _summary(3, 99.0, True)])
    assert block["runs"] == ["run-1", "run-2"] and block["left_out"] == ["run-3"]
    assert repeats_block([_summary(1, 10.0), _summary(2, 1.0, True)]) is None


def test_the_runner_writes_the_repeats_into_each_summary_of_the_point(tmp_path):
    outcomes = []
    for seed, ttft in ((1, 10.0), (2, 12.0), (3, 14.0)):
        path = tmp_path / f"run-{seed}"
        path.mkdir()
        outcomes.append(Outcome(path, _summary(seed, ttft)))
    other = tmp_path / "other"
    other.mkdir()
    alone = _summary(4, 5.0) | {"point": {"workloads.0.router": "topology_aware"}}
    outcomes.append(Outcome(other, alone))
    record_repeats(outcomes)
    for o in outcomes[:3]:
        written = json.loads((o.path / "summary.json").read_text())
        assert written["repeats"]["metrics"]["ttft_ms.p50"]["values"] == [10.0, 12.0, 14.0]
    assert not (other / "summary.json").exists()  # one run: no spread to record


# ---- the comparison's ratios ---------------------------------------------------------------


def test_the_comparison_states_each_ratio_with_its_interval_and_verdict():
    rng = np.random.default_rng(2)
    base = rng.exponential(1.0, 400)
    runs = [
        SimpleNamespace(label="baseline", ttft=base),
        SimpleNamespace(label="same", ttft=rng.exponential(1.0, 400)),
        SimpleNamespace(label="slower", ttft=2.0 * rng.exponential(1.0, 400)),
    ]
    lines = ratio_lines(runs, [("TTFT", lambda r: r.ttft)])
    text = "\n".join(lines)
    assert "## Ratios to the first run" in text and "**baseline**" in text
    same = next(line for line in lines if "| same |" in line)
    slower = next(line for line in lines if "| slower |" in line)
    assert same.endswith("| no difference detected |")
    assert slower.endswith("| differs |")
    assert lines == ratio_lines(runs, [("TTFT", lambda r: r.ttft)])  # seeded: same text

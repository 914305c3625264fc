"""KPIs derived across a test's points, seed by seed (experiments.bmwg.across)."""

from __future__ import annotations

import pytest

from experiments.bmwg.across import derived_by_test
from experiments.bmwg.report import _derived_table


def row(test: str, point: str, seed: int, faithful: bool = True) -> dict:
    return {"test": test, "point": point, "seed": seed, "faithful": faithful, "error": ""}


def ttft(test: str, point: str, seed: int, p99: float, **kw) -> dict:
    return row(test, point, seed, **kw) | {"TTFT p99 ms": p99}


def test_the_inflection_point_is_the_first_load_past_the_unloaded_band_in_each_seed():
    rows = [
        ttft("10.4", "bg0%", 1, 100.0),
        ttft("10.4", "bg50%", 1, 105.0),  # within 10 %
        ttft("10.4", "bg90%", 1, 300.0),  # the knee
        ttft("10.4", "bg0%", 2, 100.0),
        ttft("10.4", "bg50%", 2, 150.0),  # the knee comes earlier in this seed
        ttft("10.4", "bg90%", 2, 320.0),
    ]
    d = derived_by_test(rows)["10.4"]
    knee = d["Inflection_point TTFT p99 (load)"]
    assert knee["n"] == 2 and knee["estimate"] == pytest.approx(0.7)
    assert knee["low"] < 0.5 and knee["high"] > 0.9  # two seeds apart: a wide interval
    assert d["Degradation_factor TTFT p99 at 90%"]["estimate"] == pytest.approx(3.1)
    assert d["Degradation_factor TTFT p99 at 50%"]["estimate"] == pytest.approx(1.275)


def test_a_curve_that_never_leaves_its_band_is_not_reached_not_a_number():
    rows = [ttft("10.4", p, s, 100.0 + s) for s in (1, 2) for p in ("bg0%", "bg50%", "bg90%")]
    knee = derived_by_test(rows)["10.4"]["Inflection_point TTFT p99 (load)"]
    assert knee["n"] == 0 and knee["words"] == {"not reached": 2} and knee["estimate"] is None
    text = "\n".join(_derived_table({"Inflection_point TTFT p99 (load)": knee}))
    assert "| Inflection_point TTFT p99 (load) | not reached | – | not reached: 2 |" in text


def test_runs_judged_unfaithful_and_seeds_missing_a_point_are_left_out():
    rows = [
        ttft("10.3", "single", 1, 100.0),
        ttft("10.3", "+ep", 1, 130.0),
        ttft("10.3", "single", 2, 100.0),
        ttft("10.3", "+ep", 2, 900.0, faithful=False),  # not counted: no penalty for seed 2
        ttft("10.3", "+ep", 3, 120.0),  # seed 3 has no single-tenant run
    ]
    pen = derived_by_test(rows)["10.3"]["Interference_penalty +ep TTFT p99 %"]
    assert pen["n"] == 1 and pen["estimate"] == pytest.approx(30.0) and pen["low"] is None


def test_contention_penalty_pairs_each_mix_with_its_isolated_class():
    kv, ep = "KV_xfer_latency p99 ms", "EP_alltoall_latency p99 ms"
    rows = [
        row("7.4", "kv@50%", 1) | {kv: 10.0},
        row("7.4", "ep", 1) | {ep: 4.0},
        row("7.4", "kv+ep@50%", 1) | {kv: 15.0, ep: 8.0},
    ]
    d = derived_by_test(rows)["7.4"]
    assert d["Contention_penalty KV at 50%"]["estimate"] == pytest.approx(1.5)
    assert d["Contention_penalty EP at 50%"]["estimate"] == pytest.approx(2.0)


def test_the_scale_limit_is_the_first_size_where_a_kpi_is_over_ten_percent_worse():
    def size(point: str, seed: int, ttft_p99: float, tps: float) -> dict:
        return row("12.1", point, seed) | {"TTFT p99 ms": ttft_p99, "TPS_output tokens/s": tps}

    rows = [
        size("4gpus", 1, 100.0, 1000.0),
        size("8gpus", 1, 105.0, 850.0),  # throughput 15 % worse: the limit
        size("4gpus", 2, 100.0, 1000.0),
        size("8gpus", 2, 104.0, 950.0),  # within 10 % on both
    ]
    limit = derived_by_test(rows)["12.1"]["Scale_limit (GPUs)"]
    assert limit["n"] == 1 and limit["estimate"] == 8.0 and limit["words"] == {"not reached": 1}
    text = "\n".join(_derived_table({"Scale_limit (GPUs)": limit}))
    assert "| Scale_limit (GPUs) | 8 | – (one run) | 1 (+1 not reached) |" in text


def slo_row(test: str, point: str, seed: int, ttft: float, itl: float, tps: float = 0.0) -> dict:
    return row(test, point, seed) | {
        "TTFT p99 ms": ttft,
        "ITL p99 ms": itl,
        "TPS_output tokens/s": tps,
    }


def test_the_slo_bounded_rate_is_the_highest_rate_meeting_both_p99s():
    rows = [
        slo_row("11.1", "rate_per_s=1", 1, 200.0, 20.0),
        slo_row("11.1", "rate_per_s=4", 1, 450.0, 45.0),
        slo_row("11.1", "rate_per_s=8", 1, 900.0, 45.0),  # TTFT over 500 ms
        slo_row("11.1", "rate_per_s=1", 2, 600.0, 20.0),  # no rate meets it in seed 2
    ]
    got = derived_by_test(rows)["11.1"]["Request_Rate (req/s)"]
    assert got["estimate"] == 4.0 and got["n"] == 1 and got["words"] == {"none met the SLO": 1}


def test_the_best_xpyd_ratio_is_a_choice_counted_by_seed():
    rows = [
        slo_row("6.2", f"{r} rate_per_s=4", s, 300.0, 30.0, tps)
        for s in (1, 2, 3)
        for r, tps in (("2P6D", 900.0), ("4P4D", 1000.0 if s < 3 else 800.0))
    ] + [slo_row("6.2", "6P2D rate_per_s=4", 1, 700.0, 30.0, 5000.0)]  # misses the SLO
    got = derived_by_test(rows)["6.2"]["Pareto_xPyD at 4 req/s"]
    assert got["n"] == 0 and got["words"] == {"4P4D": 2, "2P6D": 1}
    text = "\n".join(_derived_table({"Pareto_xPyD at 4 req/s": got}))
    assert "| Pareto_xPyD at 4 req/s | 4P4D | – | 4P4D: 2, 2P6D: 1 |" in text


def test_ep_scaling_efficiency_and_tier_ratio_against_their_reference_points():
    ep = "EP_alltoall_latency p50 ms"
    rows = [row("7.3", f"EP{n}", 1) | {ep: lat} for n, lat in ((4, 1.0), (8, 2.0), (16, 5.0))]
    d = derived_by_test(rows)["7.3"]
    assert d["EP_scaling_efficiency EP16"]["estimate"] == pytest.approx(2.0 / 5.0 * 16 / 8)
    assert d["EP_scaling_efficiency EP4"]["estimate"] == pytest.approx(2.0 / 1.0 * 4 / 8)
    bw = "KV_xfer_bandwidth Gbit/s"
    rows = [
        row("5.4", "hbm-remote-hbm input_tokens=51", 1) | {bw: 40.0},
        row("5.4", "hbm-cxl input_tokens=51", 1) | {bw: 30.0},
        row("5.4", "hbm-flash input_tokens=819", 1) | {bw: 5.0},  # no GPU-to-GPU at 819
    ]
    tiers = derived_by_test(rows)["5.4"]
    assert list(tiers) == ["Tier_throughput_ratio hbm-cxl input_tokens=51"]
    assert tiers["Tier_throughput_ratio hbm-cxl input_tokens=51"]["estimate"] == pytest.approx(0.75)


def test_tests_without_a_derivation_or_without_rows_derive_nothing():
    assert derived_by_test([ttft("10.1", "4k", 1, 100.0)]) == {}
    assert derived_by_test([]) == {}

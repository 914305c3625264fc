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
    assert knee["n"] == 0 and knee["not_reached"] == 2 and knee["estimate"] is None
    text = "\n".join(_derived_table({"Inflection_point TTFT p99 (load)": knee}))
    assert "| Inflection_point TTFT p99 (load) | not reached | – | 0 (+2 not reached) |" in text


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
    assert limit["n"] == 1 and limit["estimate"] == 8.0 and limit["not_reached"] == 1


def test_tests_without_a_derivation_or_without_rows_derive_nothing():
    assert derived_by_test([ttft("10.1", "4k", 1, 100.0)]) == {}
    assert derived_by_test([]) == {}

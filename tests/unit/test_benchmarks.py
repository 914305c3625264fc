"""The pure parts of the benchmarks: the M/D/1 reference, the token-bucket queue
model against it, ratio/target logic and the shape of a result file."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest


def _benchmarks_package() -> None:
    """``benchmarks`` is a folder of the repository, not an installed package: under
    ``python -m pytest`` the working directory makes it importable, under the bare
    ``pytest`` script it is loaded from its path."""
    if importlib.util.find_spec("benchmarks") is not None:
        return
    folder = Path(__file__).resolve().parents[2] / "benchmarks"
    spec = importlib.util.spec_from_file_location(
        "benchmarks", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = module
    spec.loader.exec_module(module)


_benchmarks_package()

from benchmarks.common import (  # noqa: E402
    REQUIRED,
    clean,
    md1_lq,
    meets,
    ratio,
    result,
    shell_times_s,
    write,
)
from benchmarks.queue_theory import htb_bucket_bytes, token_bucket_backlog  # noqa: E402


def test_md1_lq_known_values():
    assert md1_lq(0.5) == pytest.approx(0.25)
    assert md1_lq(0.9) == pytest.approx(4.05)
    assert md1_lq(0.0) == 0.0
    with pytest.raises(ValueError, match="stable"):
        md1_lq(1.0)


def test_token_bucket_one_frame_deep_is_md1():
    # A FIFO in front of a token bucket one frame deep waits exactly like M/D/1's queue.
    rng = np.random.default_rng(1)
    rate_bps, frame = 5e6, 1514
    service = frame * 8 / rate_bps
    span = 400.0
    arrivals = np.cumsum(rng.exponential(service / 0.7, size=int(span / service)))
    arrivals = arrivals[arrivals < span]
    lq = token_bucket_backlog(arrivals, rate_bps, frame, frame, span)
    assert lq == pytest.approx(md1_lq(0.7), rel=0.1)
    # HTB's deeper bucket lets packets through back to back: a shorter queue.
    htb = token_bucket_backlog(arrivals, rate_bps, htb_bucket_bytes(int(rate_bps)), frame, span)
    assert htb < 0.8 * lq


def test_ratio_and_targets():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(1.0, 0.0) is None
    assert ratio(None, 2.0) is None
    assert meets(1.1, "<=", 1.15) is True
    assert meets(1.2, "<=", 1.15) is False
    assert meets(0.6, ">=", 0.6) is True
    assert meets(None, ">=", 0.6) is None
    with pytest.raises(ValueError):
        meets(1.0, "<", 2.0)


def test_result_shape_and_json(tmp_path):
    rec = result(
        "setup",
        value=np.float64(3.0),
        baseline=2.0,
        unit="s",
        target="ratio <= 1.15",
        target_met=np.bool_(False),
        quick=True,
        limit="process starts",
        sizes=[{"x": float("nan")}],
    )
    assert all(k in rec for k in REQUIRED)
    assert rec["ratio"] == 1.5 and rec["target_met"] is False
    assert rec["command"] == "sudo .venv/bin/kvfabric bench --quick setup"
    path = write(rec, tmp_path)
    back = json.loads(path.read_text())
    assert path.name == "setup.json" and back["sizes"] == [{"x": None}]


def test_a_missed_target_must_say_what_limits_it():
    with pytest.raises(ValueError, match="limit"):
        result("x", value=1.0, baseline=1.0, unit="", target="t", target_met=False, quick=False)


def test_write_refuses_a_record_without_the_required_keys(tmp_path):
    with pytest.raises(ValueError, match="lacks"):
        write({"name": "x"}, tmp_path)


def test_clean_and_shell_times():
    assert clean({"a": (np.int64(2), float("inf"))}) == {"a": [2, None]}
    assert shell_times_s("0m0.010s 0m0.000s\n1m2.500s 0m0.250s\n") == pytest.approx(62.75)


def test_the_dilation_benchmark_reads_headline_figures_and_judges_agreement_by_the_seeds():
    from benchmarks.dilation import agreement, figures

    summary = {
        "metrics": {
            "ttft_ms": {"p50": 100.0, "p99": 150.0},
            "incast": {"goodput_mbps": {"mean": 9.0}},
            "fct_ms": {"p50": 20.0, "p99": 40.0},
        }
    }
    got = figures(summary)
    assert got == {
        "ttft_ms_p50": 100.0,
        "ttft_ms_p99": 150.0,
        "incast_goodput_mbps": 9.0,
        "fct_ms_p50": 20.0,
        "fct_ms_p99": 40.0,
    }
    by_d = {
        1: [{"x": 10.0}, {"x": 12.0}, {"x": 11.0}],  # mean 11, sd 1, range 2
        2: [{"x": 12.5}, {"x": 13.5}],  # mean 13: within max(2 sd, range) = 2
        4: [{"x": 14.0}, {"x": 14.2}],  # mean 14.1: outside
    }
    rows = {r["d"]: r for r in agreement(by_d)}
    assert rows[2]["agrees"] and not rows[4]["agrees"]
    assert rows[2]["n_1"] == 3 and rows[4]["ratio"] == 14.1 / 11
    assert agreement({1: [{"x": 1.0}], 2: [{"x": 5.0}]}) == []  # one seed has no spread


def test_the_gate_benchmark_sorts_runs_into_the_four_cells_and_plans_the_scale_specs():
    from benchmarks.gate import CELLS, cell, confusion, judge, scale_spec

    rows = [
        {"cell": cell(True, True)},
        {"cell": cell(False, True)},
        {"cell": cell(False, True)},
        {"error": "a spec today's schema refuses"},
    ]
    assert confusion(rows) == dict.fromkeys(CELLS, 0) | {"fits, faithful": 1, "over, faithful": 2}
    # the 64-GPU serving plan is over the default envelope undilated and fits once dilated
    word = judge(scale_spec(64, "auto", auto=False), seed=1, d=1.0)
    assert not word["fits"] and word["over"] and "messages_per_s" in " ".join(word["over"])
    assert word["auto_d"] > 1 and not word["auto_refused"]
    assert judge(scale_spec(64, "auto", auto=True), seed=1, d=word["auto_d"])["fits"]


def test_the_fabric_size_benchmark_puts_one_load_on_ever_larger_fabrics():
    import pytest

    from benchmarks import fabric_size
    from experiments.orchestration.calibrate import (
        fabric_pairs,
        hop_schedule,
        host_gbps,
        peak_hop_mbps,
    )

    fabrics = fabric_size.fabrics()
    ports = [fabric_size.switch_ports(f) for _, f in fabrics]
    assert ports == sorted(ports) and ports[0] == 16  # the calibration's 3-switch fabric
    for _, fabric in fabrics:
        pairs = fabric_pairs(fabric, fabric_size.HOPS)
        rate = fabric_size.SWITCH_HOP_MBPS / (3 * fabric_size.HOPS)
        scale = rate * 1e6 / (host_gbps(fabric, pairs) * 1e9)
        peak = peak_hop_mbps(hop_schedule(pairs, rate, 2.0, scale), fabric, scale)
        assert peak == pytest.approx(fabric_size.SWITCH_HOP_MBPS, rel=0.1)

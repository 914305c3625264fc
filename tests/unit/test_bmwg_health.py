"""Where a suite's traffic went: the share of switch egress above the edge switches,
per run and in the report, so a test whose pairs share a leaf shows it."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.bmwg.execute import above_edge_pct
from experiments.bmwg.report import _above_edge
from topologies import spine_leaf
from topologies.dragonfly import dragonfly

FABRIC = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)


def sent(**bytes_by_node: int) -> pd.DataFrame:
    """A link table: each node's port 1 sent ``bytes`` between two samples."""
    rows = [
        {"t_ns": t, "node": node, "port": 1, "tx_bytes": t * b}
        for node, b in bytes_by_node.items()
        for t in (0, 1)
    ]
    return pd.DataFrame(rows)


def test_traffic_across_one_spine_is_a_third_and_traffic_under_one_leaf_none():
    across = sent(leaf0=1000, spine0=1000, leaf1=1000, h0=5000)  # a host's bytes not counted
    assert above_edge_pct(across, FABRIC) == pytest.approx(100 / 3)
    assert above_edge_pct(sent(leaf0=1000), FABRIC) == 0.0


def test_no_table_no_traffic_or_no_upper_tier_is_not_measured():
    assert above_edge_pct(None, FABRIC) is None
    assert above_edge_pct(sent(leaf0=0), FABRIC) is None
    direct = dragonfly()
    assert above_edge_pct(sent(**{direct.switches[0].name: 1000}), direct) is None


def test_the_report_names_tests_whose_traffic_never_left_the_edge():
    rows = [
        {"test": "5.3", "above_edge_pct": 30.0},
        {"test": "5.3", "above_edge_pct": 35.0},
        {"test": "7.1", "above_edge_pct": 0.2},
        {"test": "9.4", "above_edge_pct": None},
    ]
    text = "\n".join(_above_edge(rows))
    assert "5.3 30-35" in text and "7.1 0.2" in text and "9.4" not in text
    assert "Under 1 % in every run of 7.1: their traffic stayed on edge" in text
    assert _above_edge([{"test": "5.3"}]) == []


def test_a_rows_run_is_found_where_it_was_run_or_inside_its_moved_suite(tmp_path, monkeypatch):
    from experiments.bmwg.execute import run_dir_of

    suite = tmp_path / "moved" / "bmwg-20261204-152002"
    recorded = "results/bmwg-datasheet/bmwg-20261204-152002/runs/5.1/bmwg-5-1/20261204-1"
    inside = suite / "runs/5.1/bmwg-5-1/20261204-1"
    monkeypatch.chdir(tmp_path)
    assert run_dir_of(suite, recorded) is None  # neither here
    inside.mkdir(parents=True)
    (inside / "summary.json").write_text("{}")
    assert run_dir_of(suite, recorded) == inside
    (tmp_path / recorded).mkdir(parents=True)
    (tmp_path / recorded / "summary.json").write_text("{}")
    assert run_dir_of(suite, recorded) == type(inside)(recorded)  # where it was run first
    assert run_dir_of(suite, None) is None

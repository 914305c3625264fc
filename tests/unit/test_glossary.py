"""The glossary is the contract: every metric a committed summary.json holds has one
entry (formula, unit, basis), and every entry names a metric some committed summary
holds or that a named code path writes."""

from __future__ import annotations

import importlib
import json

import pytest

from experiments.analysis.glossary import GLOSSARY, MAPS, entry_of, markdown, matches, metric_keys
from experiments.spec.load import REFERENCE_DIR

BASES = {"time", "real-equivalent", "emulated", "count", "ratio", "identity"}


@pytest.fixture(scope="module")
def committed_keys() -> set[str]:
    keys: set[str] = set()
    for path in sorted(REFERENCE_DIR.glob("*/runs/*/summary.json")):
        keys |= set(metric_keys(json.loads(path.read_text()).get("metrics") or {}))
    assert len(keys) > 100  # the references are there
    return keys


def test_every_metric_of_a_committed_summary_has_an_entry(committed_keys):
    missing = sorted(k for k in committed_keys if entry_of(k) is None)
    assert not missing, f"metrics with no glossary entry: {missing}"


def test_every_entry_is_a_metric_a_summary_holds_or_a_named_code_path_writes(committed_keys):
    for m in GLOSSARY:
        if any(matches(m.key, k) for k in committed_keys):
            continue
        assert m.produced_by, f"{m.key}: in no committed summary and no producer named"
        module, _, function = m.produced_by.rpartition(".")
        assert callable(getattr(importlib.import_module(module), function)), m.produced_by


def test_one_entry_per_key_each_with_a_basis_and_a_formula():
    keys = [m.key for m in GLOSSARY]
    assert len(keys) == len(set(keys))
    for m in GLOSSARY:
        assert m.basis in BASES and m.formula, m
        # a rate's name says its basis: *_mbps emulated, *_real_gbps real-equivalent
        if m.key.endswith("_mbps"):
            assert (m.unit, m.basis) == ("Mbit/s", "emulated"), m
        if m.key.endswith("_real_gbps"):
            assert (m.unit, m.basis) == ("Gbit/s", "real-equivalent"), m


def test_keys_are_written_in_the_glossary_notation():
    metrics = {
        "drops": {"total": 3, "by_port": {"leaf0:1": 3}},
        "flows": {"errors": {}},
        "ttft_ms": {"count": 2, "mean": 1.0, "p50": 1.0, "p99": 1.0, "max": 1.0},
        "queue_pkts": {"hottest": [{"node": "leaf0", "port": "1"}]},
        "links": {"busiest": []},
    }
    assert sorted(metric_keys(metrics)) == [
        "drops.by_port.*",
        "drops.total",
        "flows.errors.*",
        "queue_pkts.hottest[].node",
        "queue_pkts.hottest[].port",
        "ttft_ms",
    ]
    assert "drops.by_port" in MAPS and entry_of("drops.by_port.*").unit == "packets"
    assert entry_of("no.such.metric") is None


def test_the_glossary_page_lists_every_key_with_its_unit():
    page = markdown()
    for m in GLOSSARY:
        assert f"| `{m.key}` | {m.unit} | {m.basis} |" in page

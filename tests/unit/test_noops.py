"""Specs that would do nothing, or not what they say, are named by their key
(``experiments.orchestration.noops``), and the bundled experiments that mean what
they say are not."""

from __future__ import annotations

import pytest

from experiments.orchestration.noops import noop_warnings
from experiments.spec.load import expand, find_bundled, load_spec


def warnings_of(source, *sets: str) -> list[str]:
    spec = load_spec(source, list(sets))
    return [line for run in expand(spec) for line in noop_warnings(run.config, run.fabric())]


def test_an_empty_workload_list_is_named():
    text = "name: idle\nduration_s: 10\nfabric: {kind: spine_leaf}\nworkloads: []\n"
    (line,) = warnings_of(text)
    assert line.startswith("workloads: empty: the run sends no traffic for its 10 s")


def test_kv_affinity_without_a_prefix_cache_is_named_and_with_one_is_not():
    base = find_bundled("serving-basic")  # kv_affinity over a prefix cache
    assert warnings_of(base) == []
    (line,) = warnings_of(base, "workloads.0.prefix_cache={enabled: false}")
    assert line.startswith("workloads.0.router: kv_affinity with workloads.0.prefix_cache")
    assert "routes exactly as least_loaded" in line


def test_an_expert_parallel_group_on_serving_gpus_is_named():
    # noisy-neighbour: A serves on h0 (prefill) and h1 + h4 (decode); B's group is apart
    source = find_bundled("noisy-neighbour")
    assert warnings_of(source, "sweep={}") == []
    (line,) = warnings_of(source, "sweep={}", "workloads.1.group=[h1, h2, h3, h6]")
    assert line.startswith("workloads.1.group: h1 (workloads.0 decode) also serve a model")


@pytest.mark.parametrize("name", ["topology-aware-placement", "incast-collapse", "noisy-neighbour"])
def test_bundled_experiments_that_mean_what_they_say_are_quiet(name):
    assert warnings_of(find_bundled(name)) == []

"""The typed run configuration: generated from the schema (never stale), built from every
bundled spec's runs and back without loss, frozen, and the one real/emulated conversion."""

from __future__ import annotations

import ast
import dataclasses
import types
from pathlib import Path

import pytest
import yaml

from experiments.spec import config as generated
from experiments.spec.config import (
    Distribution,
    Fault,
    IncastWorkload,
    RunConfig,
    ServingWorkload,
    SessionsArrivals,
)
from experiments.spec.load import bundled_names, expand, find_bundled, load_spec
from experiments.spec.typed import ConfigError, config_of, resolved_of
from experiments.spec.typegen import config_source
from topologies.fabric import FabricError
from topologies.scale import DEFAULT_BANDWIDTH_SCALE, DEFAULT_MTU, Scale

INCAST = """
name: t
duration_s: 2
fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2}
workloads:
  - {kind: incast, receiver: h0, senders: 3, sru_bytes: 100000, rounds: 2}
faults:
  - {at_s: 1, link_down: [leaf0, spine0], detect_ms: 20}
  - {at_s: 1.5, link_up: [leaf0, spine0]}
"""


def test_the_committed_module_is_what_the_schema_generates() -> None:
    """Regenerate with: kvfabric spec types --out experiments/spec/config.py"""
    assert generated.__file__ is not None
    with open(generated.__file__) as f:
        assert f.read() == config_source()


@pytest.mark.parametrize("name", bundled_names())
def test_every_bundled_run_round_trips_through_its_config(name: str) -> None:
    for run in expand(load_spec(find_bundled(name))):
        config = run.config
        assert isinstance(config, RunConfig)
        back = resolved_of(config)
        # the same data and the same YAML: ints stay ints, null keys stay left out
        assert yaml.safe_dump(back) == yaml.safe_dump(run.resolved)


def test_sections_are_typed_and_frozen() -> None:
    run = expand(load_spec(INCAST))[0]
    c = run.config
    assert c.scale == Scale(DEFAULT_BANDWIDTH_SCALE, DEFAULT_MTU)
    assert c.fabric.kind == "spine_leaf" and c.fabric.spines == 1
    (incast,) = c.workloads
    assert isinstance(incast, IncastWorkload) and incast.senders == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.duration_s = 3  # type: ignore[misc]
    assert isinstance(c.controller.tenants, types.MappingProxyType)
    with pytest.raises(TypeError):
        c.controller.tenants["x"] = ("h0",)  # type: ignore[index]


def test_a_sparse_fault_reads_its_defaults_and_writes_only_what_was_given() -> None:
    run = expand(load_spec(INCAST))[0]
    down, up = run.config.faults
    assert isinstance(down, Fault)
    assert down.link_down == ("leaf0", "spine0") and down.detect_ms == 20.0
    assert up.link_up == ("leaf0", "spine0") and up.detect_ms == 0.0 and not up.controller_down
    assert resolved_of(up) == {"at_s": 1.5, "link_up": ["leaf0", "spine0"]}


def test_a_union_is_told_apart_by_kind_or_by_keys() -> None:
    spec = load_spec(find_bundled("agentic-sessions"))
    serving = spec.config.workloads[0]
    assert isinstance(serving, ServingWorkload)
    assert isinstance(serving.arrivals, SessionsArrivals)
    tool = serving.arrivals.sessions.tool_ms
    assert isinstance(tool, Distribution | float)


def test_keys_that_do_not_fit_name_the_path_and_the_fix() -> None:
    resolved = dict(expand(load_spec(INCAST))[0].resolved)
    resolved["sampler"] = dict(resolved["sampler"], rate_hzz=3)
    match = r"sampler: keys do not match Sampler.*rate_hzz.*spec types"
    with pytest.raises(ConfigError, match=match):
        config_of(resolved)


def test_scale_converts_both_ways_and_states_its_grain() -> None:
    s = Scale(1e-4, 1500)
    assert s.emulated_bps(400) == 40_000_000
    assert s.emulated_mbps(400) == pytest.approx(40.0)
    assert s.real_gbps(40.0) == pytest.approx(400.0)
    assert s.emulated_bytes(2.6e9) == pytest.approx(260_000)
    assert s.real_bytes(260_000) == pytest.approx(2.6e9)
    assert s.wall_s(1.5) == 1.5 and s.real_s(1.5) == 1.5  # no time dilation yet
    assert s.real_bytes_per_packet == pytest.approx(15.14e6)
    assert "15.1 MB" in s.describe()
    assert Scale(1e-2, 9000).real_bytes_per_packet == pytest.approx(901_400)


@pytest.mark.parametrize(
    ("bandwidth", "mtu", "message"),
    [
        (0, 1500, "scale.bandwidth=0"),
        (2, 1500, "scale.bandwidth=2"),
        (float("nan"), 1500, "scale.bandwidth=nan"),
        (1e-4, 1400, "scale.mtu=1400"),
        (1e-4, 9001, "scale.mtu=9001"),
        (1e-4, True, "scale.mtu=True"),
    ],
)
def test_scale_refuses_what_it_cannot_honour(bandwidth: float, mtu: int, message: str) -> None:
    with pytest.raises(FabricError, match=message):
        Scale(bandwidth, mtu)


# ---- no code outside the spec room reads the spec by string key -----------------------

ROOT = Path(__file__).resolve().parents[2]
SPEC_ROOM = ("experiments", "spec")
PACKAGES = ("topologies", "controller", "traffic", "experiments", "benchmarks")


def spec_reads(source: str) -> list[tuple[int, str]]:
    """Where ``source`` reaches into a spec as a dict: the resolved spec of a run
    (``run.resolved``, a name or parameter ``resolved``/``resolved_spec``) or the stored
    spec.yaml of a results folder indexed by key (``run.spec[...]``, ``run.spec.get(...)``).
    Everything else reads the typed ``RunConfig`` (``run.config.scale.mtu``), whose
    sections have no string keys to index."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "resolved":
            found.append((node.lineno, ".resolved"))
        elif isinstance(node, ast.Name) and node.id in ("resolved", "resolved_spec"):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.arg) and node.arg in ("resolved", "resolved_spec"):
            found.append((node.lineno, f"parameter {node.arg}"))
        elif isinstance(node, ast.Subscript) and _is_spec_attr(node.value):
            found.append((node.lineno, ".spec[...]"))
        elif isinstance(node, ast.Attribute) and node.attr == "get" and _is_spec_attr(node.value):
            found.append((node.lineno, ".spec.get(...)"))
    return found


def _is_spec_attr(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "spec"


def _outside_spec_room() -> list[Path]:
    return sorted(
        p
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if p.relative_to(ROOT).parts[:2] != SPEC_ROOM
    )


def test_no_code_outside_the_spec_room_reads_the_spec_by_key() -> None:
    reads = [
        f"{p.relative_to(ROOT)}:{line}: {what}"
        for p in _outside_spec_room()
        for line, what in spec_reads(p.read_text())
    ]
    assert not reads, "read run.config instead:\n" + "\n".join(reads)


@pytest.mark.parametrize(
    "source",
    [
        "x = run.resolved['scale']['mtu']",
        "def f(resolved):\n    return 1",
        "mtu = run.spec['scale']['mtu']",
        "fabric = run.spec.get('fabric')",
        "r = p.run.resolved",
    ],
)
def test_the_walk_finds_a_string_key_read(source: str) -> None:
    assert spec_reads(source)


def test_the_walk_lets_typed_reads_pass() -> None:
    assert not spec_reads("mtu = run.config.scale.mtu\nfor w in config.workloads: w.kind")


def test_a_section_s_default_is_what_a_spec_that_leaves_it_out_gets() -> None:
    from experiments.spec.typed import default_section

    run = expand(load_spec(INCAST))[0]
    for key in ("scale", "agents", "sampler", "fidelity", "capture", "controller"):
        assert default_section(key) == getattr(run.config, key), key
    assert default_section("scale") == Scale()

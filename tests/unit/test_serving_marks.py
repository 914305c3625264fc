"""Per-message-kind DSCP of a serving workload: the per-token collective can be marked
apart from the bulk KV, in the spec (a mark or a QoS class name per kind), in the
driver's messages, and refused with the key named when it cannot be honoured."""

from __future__ import annotations

import copy

import pytest
import yaml

from experiments.spec.load import SpecError, load_spec
from topologies import rail_optimized
from traffic.serving import ServingError, build_serving, fabric_rate, simulate
from traffic.serving.marks import message_dscp
from traffic.traces import bundled_azure_trace

GPUS = [f"gpu{s}_{g}" for s in range(4) for g in range(4)]
SPEC = {
    "name": "marks",
    "duration_s": 30,
    "fabric": {"kind": "rail_optimized", "servers": 4, "gpus_per_server": 4},
    "controller": {
        "policy": "ecmp",
        "tenants": {"serve": GPUS},
        "qos": {
            "classes": [
                {"name": "token", "dscp": 46, "priority": 0},
                {"name": "kv", "dscp": 26, "rate_share": 0.6},
                {"name": "bulk", "dscp": 0, "rate_share": 0.3},
            ],
            "tenant_class": {"serve": ["kv", "token", "bulk"]},
        },
    },
    "workloads": [
        {
            "kind": "serving",
            "model": "llama-3-70b",
            "prefill": {"servers": [0, 1], "tp": 4},
            "decode": {"servers": [2, 3], "tp": 4},
            "arrivals": {"trace": str(bundled_azure_trace()), "format": "azure", "limit": 4},
            "tenant": "serve",
            "dscp": {"kv_transfer": "kv", "collective": "token", "cache_fetch": 26},
        }
    ],
}


def _load(spec: dict):
    return load_spec(yaml.safe_dump(spec, sort_keys=False))


def _with_dscp(dscp, **controller) -> dict:
    spec = copy.deepcopy(SPEC)
    spec["workloads"][0]["dscp"] = dscp
    spec["controller"] |= controller
    return spec


# ---- the pure mapping ---------------------------------------------------------------------


def test_one_mark_marks_every_kind_and_a_mapping_marks_each_kind_its_own():
    assert set(message_dscp(10).values()) == {10}
    marks = message_dscp({"kv_transfer": 26, "collective": 46})
    assert marks["kv_transfer"] == marks["kv_layer"] == 26  # pipelined KV too
    assert marks["collective"] == 46
    assert marks["cache_fetch"] == marks["tier_fetch"] == 0  # left out: unmarked


@pytest.mark.parametrize(
    ("dscp", "fragments"),
    [
        ({"token": 46}, ["dscp.token", "unknown message kind", "kv_transfer, collective"]),
        ({"kv_layer": 26}, ["dscp.kv_layer", "cache_fetch, tier_fetch"]),
        ({"collective": 64}, ["dscp.collective=64", "0 to 63"]),
        ({"collective": True}, ["dscp.collective=True"]),
        (-1, ["dscp=-1", "0 to 63"]),
    ],
)
def test_the_mapping_refuses_unknown_kinds_and_bad_marks_naming_the_key(dscp, fragments):
    with pytest.raises(ServingError) as info:
        message_dscp(dscp)
    for fragment in fragments:
        assert fragment in str(info.value)


# ---- the spec -----------------------------------------------------------------------------


def test_class_names_resolve_to_their_marks_and_the_resolved_spec_loads_again():
    spec = _load(SPEC)
    dscp = spec.resolved["workloads"][0]["dscp"]
    assert dscp == {"kv_transfer": 26, "collective": 46, "cache_fetch": 26, "tier_fetch": 0}
    again = copy.deepcopy(SPEC)
    again["workloads"][0]["dscp"] = dscp
    assert _load(again).resolved["workloads"][0]["dscp"] == dscp


def test_one_mark_stays_one_mark():
    assert _load(_with_dscp(26)).resolved["workloads"][0]["dscp"] == 26
    assert _load(_with_dscp("token")).resolved["workloads"][0]["dscp"] == 46


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        (
            _with_dscp({"token": 46}),
            ["workloads.0.dscp.token", "unknown key", "kv_transfer, collective, cache_fetch"],
        ),
        (
            _with_dscp({"collective": "gold"}),
            ["workloads.0.dscp.collective", "'gold'", "controller.qos.classes: token, kv, bulk"],
        ),
        (_with_dscp({"collective": 70}), ["workloads.0.dscp.collective", "70"]),
        (
            # the tenant may keep only kv and bulk: its switch ports re-mark 46 as kv's 26
            _with_dscp(
                {"collective": "token"},
                qos=SPEC["controller"]["qos"] | {"tenant_class": {"serve": ["kv", "bulk"]}},
            ),
            [
                "workloads.0.dscp.collective",
                "46",
                "re-marks it 26",
                "controller.qos.tenant_class.serve (kv, bulk): 0, 26",
            ],
        ),
        (
            # hosts of no tenant get the default class whatever they mark
            _with_dscp(
                {"kv_transfer": "kv"},
                tenants={},
                qos=SPEC["controller"]["qos"] | {"tenant_class": {}},
            ),
            ["workloads.0.dscp.kv_transfer", "26", "the default class", "bulk"],
        ),
    ],
    ids=["unknown kind", "unknown class", "mark out of range", "re-marked", "no tenant"],
)
def test_bad_marks_are_refused_naming_the_key(spec, fragments):
    with pytest.raises(SpecError) as info:
        _load(spec)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {info.value}"


def test_per_kind_marks_need_no_qos_classes():
    spec = _with_dscp({"collective": 46}, qos={})
    assert _load(spec).resolved["workloads"][0]["dscp"]["collective"] == 46


# ---- the driver's messages ----------------------------------------------------------------


def test_collectives_and_kv_leave_with_their_own_marks():
    fabric = rail_optimized(servers=4, gpus_per_server=4)
    driver = build_serving(_load(SPEC).config.workloads[0], fabric, 1, 0, None)
    result = simulate(driver, fabric_rate(fabric), t0_ns=10**12)
    assert result.finished
    by_kind = result.flows.groupby("kind")["dscp"].unique().to_dict()
    assert {k: list(v) for k, v in by_kind.items()} == {"collective": [46], "kv_transfer": [26]}

"""A run's demand on the machine (peaks over 100 ms windows, not means), the envelope it
is judged against, the flow-size scale that fits background traffic into it, and the
refusal a user sees before anything is built."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from experiments.orchestration.demand import WINDOW_NS, demand_of, message_table, schedule_demand
from experiments.orchestration.envelope import DEFAULT, Envelope, exceeded, figures, load, save
from experiments.orchestration.plan import traffic_plan
from experiments.orchestration.runner import EnvelopeExceeded, prepare
from experiments.spec.config import ServingWorkload
from experiments.spec.load import expand, find_bundled, load_spec
from experiments.spec.workloads import workload_seed
from topologies import spine_leaf
from topologies.scale import Scale
from traffic.flowsizes import mean_flow_bytes
from traffic.workloads import background, incast
from traffic.workloads.schedule import build_schedule

FABRIC = spine_leaf(2, 2, 4)  # 100 Gbit/s hosts: h0-h3 on leaf0, h4-h7 on leaf1


def burst(n: int, at_ns: int, src: str = "h0", dst: str = "h4", nbytes: int = 10_000_000):
    return build_schedule(
        {
            "kind": ["background"] * n,
            "tenant": ["t"] * n,
            "src": [src] * n,
            "dst": [dst] * n,
            "bytes": np.full(n, nbytes),
            "t_sched_ns": np.full(n, at_ns, dtype=np.int64),
        }
    )


def test_the_demand_is_the_busiest_window_not_the_mean():
    # 100 messages in one 100 ms window, then nothing for 9.9 s: mean 10/s, peak 1,000/s
    rows = pd.concat([burst(100, 0), burst(1, 10_000_000_000)], ignore_index=True)
    d = schedule_demand(rows.assign(flow_id=range(101)), FABRIC, 1e-4)
    assert d.peak_messages_per_s() == pytest.approx(100 * 3 / (WINDOW_NS / 1e9))  # 3 switches
    assert d.mean_messages_per_s() < d.peak_messages_per_s() / 50


def test_a_long_transfer_spreads_its_bits_over_its_duration():
    # one 1.25 MB emulated transfer at a 10 Mbit/s host link lasts ~1 s: ~10 Mbit/s
    # of payload x 3 switches in each window, not 30 Mbit/s x 10 in the first one
    table = message_table(
        pd.DataFrame(
            {
                "src": ["h0"],
                "dst": ["h4"],
                "bytes": [12_500_000_000],
                "scaled": [True],
                "proto": ["tcp"],
                "dscp": [0],
                "t_start_ns": [0],
            }
        ),
        FABRIC,
        1e-4,
    )
    d = demand_of(table)
    assert d.peak_switch_hop_mbps() == pytest.approx(30.0, rel=0.02)
    total_bits = sum(b.sum() for b in d.hop_bits.values())
    assert total_bits == pytest.approx(1_250_000 * 8 * 3, rel=1e-6)


def test_flow_size_scale_keeps_the_load_and_the_shape_of_the_sizes():
    hosts = [f"h{i}" for i in range(8)]
    one = background(hosts, 0.6, 100.0, 20.0, seed=1)
    k8 = background(hosts, 0.6, 100.0, 20.0, seed=1, flow_size_scale=8)
    assert len(k8) == pytest.approx(len(one) / 8, rel=0.05)
    offered = k8["bytes"].sum() * 8 / 20.0 / (8 * 100e9)
    assert offered == pytest.approx(0.6, rel=0.15)  # heavy-tailed sizes: a loose bound
    # the same distribution, k times larger: quantiles agree after dividing by k
    q = [0.1, 0.25, 0.5, 0.75, 0.9]
    assert np.allclose(np.quantile(k8["bytes"] / 8, q), np.quantile(one["bytes"], q), rtol=0.2)
    assert mean_flow_bytes("web_search") > 0
    with pytest.raises(ValueError, match="flow_size_scale"):
        background(hosts, 0.6, 100.0, 1.0, flow_size_scale=0.5)


SPEC = """
name: bg
duration_s: 20
fabric: {kind: spine_leaf, spines: 4, leaves: 2, hosts_per_leaf: 4, host_gbps: 100,
         uplink_gbps: 400}
controller: {policy: ecmp}
workloads: [{kind: background, load: 0.6}]
"""


def test_auto_flow_size_scale_is_the_smallest_that_fits(tmp_path):
    spec = load_spec(SPEC, base_dir=tmp_path)
    run = expand(spec)[0]
    plan = traffic_plan(run.config, run.fabric(), tmp_path)
    k = plan.flow_size_scale[0]
    assert k > 1 and not plan.exceeded
    smaller = load_spec(SPEC, [f"workloads.0.flow_size_scale={k / 2:g}"], base_dir=tmp_path)
    p2 = traffic_plan(expand(smaller)[0].config, run.fabric(), tmp_path)
    assert p2.exceeded and "messages_per_s" in p2.exceeded[0]


def test_the_serving_driver_is_built_once_per_plan_and_numbered_after_the_schedule(
    monkeypatch,
):
    import traffic.serving as serving
    from traffic.serving import fabric_rate, simulate

    spec = load_spec(find_bundled("link-failure"))
    run, built = expand(spec)[0], []
    fabric, config, build = run.fabric(), run.config, serving.build_serving
    monkeypatch.setattr(serving, "build_serving", lambda *a, **k: built.append(a) or build(*a, **k))
    plan = traffic_plan(config, fabric, spec.base_dir)
    assert len(built) == 1  # the demand's simulation ran a copy
    first = int(plan.schedule["flow_id"].max()) + 1
    i, w = next((i, w) for i, w in enumerate(config.workloads) if isinstance(w, ServingWorkload))
    fresh = build(w, fabric, workload_seed(config.seed, i), first, spec.base_dir)
    flows = simulate(plan.driver, fabric_rate(fabric, 1.0)).flows
    assert flows["flow_id"].min() == first
    assert flows.equals(simulate(fresh, fabric_rate(fabric, 1.0)).flows)  # as if built with it
    spare = simulate(plan.spare_driver(), fabric_rate(fabric, 1.0)).flows
    assert spare.equals(flows)  # a spare sends what the run's driver sent, whatever it did
    assert len(built) == 1


def test_an_over_envelope_plan_is_refused_with_the_figure_the_limit_and_the_fixes(tmp_path):
    spec = load_spec(SPEC, ["workloads.0.flow_size_scale=1"], base_dir=tmp_path)
    with pytest.raises(EnvelopeExceeded) as err:
        prepare(spec, expand(spec), envelope=(DEFAULT, "test"))
    line = err.value.lines[0]  # "messages_per_s peaks at 2.3e+04 message-hops/s ... 5,000"
    assert "messages_per_s peaks at" in line and "5,000" in line and "flow_size_scale" in line
    forced = prepare(spec, expand(spec), force=True, envelope=(DEFAULT, "test"))
    record = forced[0].envelope_record()
    assert record["forced"] and not record["fits"] and record["exceeded"]


def test_slowdown_is_one_for_a_flow_that_met_its_ideal_and_grows_with_queueing():
    from experiments.analysis.metrics.flows import fct_slowdown, ideal_fct_ms

    flows = pd.DataFrame(
        {
            "src": ["h0", "h0"],
            "dst": ["h4", "h1"],
            "bytes": [144_800, 1448],
            "proto": ["tcp", "tcp"],
            "ok": [True, True],
            "error": [None, None],
        }
    )
    ideal = ideal_fct_ms(flows, FABRIC, Scale(1e-4))
    # 100 full frames at the 10 Mbit/s host link: 121 ms, plus a frame at the others
    assert ideal[0] == pytest.approx(100 * 1514 * 8 / 10e6 * 1e3, rel=0.02)
    stats = fct_slowdown(flows.assign(fct_ms=ideal * [1.0, 3.0]), FABRIC, Scale(1e-4))
    assert stats["p50"] == pytest.approx(2.0) and stats["max"] == pytest.approx(3.0)


def test_a_small_incast_fits_and_its_figures_are_reported():
    d = schedule_demand(incast("h0", ["h1", "h2"], 1_000_000, 2), FABRIC, 1e-4)
    assert not exceeded(d, DEFAULT)
    names = [f.name for f in figures(d, DEFAULT)]
    assert names == ["switch_hop_mbps", "messages_per_s", "connections", "machine_load"]


def test_a_stored_envelope_judges_only_the_machine_it_was_measured_on(tmp_path, monkeypatch):
    path = tmp_path / "envelope.json"
    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(path))
    env, why = load({"kernel": "6.1"})
    assert env is DEFAULT and "no calibration" in why
    machine = {"kernel": "6.1", "ovs": "3.1", "cpu_model": "x", "cpu_count": 2}
    mine = Envelope(
        {1: 900.0, 3: 800.0}, {"small": 9000.0, "bulk": 8000.0}, 5000, "measured", True, machine
    )
    save(mine, path)
    here = {"kernel": "6.1", "ovs": "3.1", "cpu_model": "x", "cpu_count": 2}
    got, why = load(here)
    assert got.calibrated and got.capacity_mbps(2) == pytest.approx(850.0)
    other, why = load(here | {"kernel": "6.2"})
    assert other is DEFAULT and "kernel" in why
    path.write_text(json.dumps({"switch_hop_mbps": {}}))
    assert load(here)[0] is DEFAULT


def test_a_jumbo_frame_run_is_judged_only_by_a_calibration_at_its_mtu(tmp_path, monkeypatch):
    from experiments.orchestration.envelope import envelope_path

    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(tmp_path / "envelope.json"))
    assert envelope_path(9000) == tmp_path / "envelope-mtu9000.json"
    here = {"kernel": "6.1", "ovs": "3.1", "cpu_model": "x", "cpu_count": 2}
    save(
        Envelope({3: 450.0}, {"small": 5000.0}, 4000, "at 1500", True, here | {"mtu": 1500}),
        envelope_path(1500),
    )
    env, why = load(here | {"mtu": 9000})
    assert env is DEFAULT and "no calibration" in why and "mtu9000" in why
    save(
        Envelope({3: 450.0}, {"small": 5000.0}, 4000, "at 1500", True, here | {"mtu": 1500}),
        envelope_path(9000),
    )  # a 1500 calibration copied to the jumbo file
    env, why = load(here | {"mtu": 9000})
    assert env is DEFAULT and "mtu 1500" in why
    save(
        Envelope({3: 1500.0}, {"small": 5000.0}, 4000, "at 9000", True, here | {"mtu": 9000}),
        envelope_path(9000),
    )
    assert load(here | {"mtu": 9000})[0].capacity_mbps(3) == 1500.0
    assert load(here | {"mtu": 1500})[0].capacity_mbps(3) == 450.0


def test_the_ideal_fct_of_jumbo_frames_carries_fewer_header_bytes():
    from experiments.analysis.metrics.flows import ideal_fct_ms

    flows = pd.DataFrame({"src": ["h0"], "dst": ["h4"], "bytes": [894_800]})
    at_1500 = ideal_fct_ms(flows, FABRIC, Scale(1e-4))
    at_9000 = ideal_fct_ms(flows, FABRIC, Scale(1e-4, 9000))
    assert at_1500[0] == pytest.approx(618 * 1514 * 8 / 10e6 * 1e3, rel=0.02)
    assert at_9000[0] == pytest.approx(100 * 9014 * 8 / 10e6 * 1e3, rel=0.05)
    assert at_9000[0] < at_1500[0]


@pytest.mark.parametrize("fits_from", [1, 2, 8, 64, 1024, 2048])
def test_the_ladder_is_bisected_to_the_smallest_k_that_fits(fits_from):
    from experiments.orchestration.plan import FLOW_SIZE_LADDER, smallest_fitting

    asked = []

    def over(k):
        asked.append(k)
        return [] if k >= fits_from else [f"k={k} over"]

    k = smallest_fitting(FLOW_SIZE_LADDER, over)
    linear = next((k for k in FLOW_SIZE_LADDER if k >= fits_from), FLOW_SIZE_LADDER[-1])
    assert k == linear and k in asked
    assert len(asked) <= 6  # the linear walk asked up to 11


def test_a_fabric_measured_on_its_own_is_judged_by_its_figures_and_others_by_the_machines(
    tmp_path, monkeypatch
):
    from experiments.orchestration.envelope import fabric_envelope_path, fabric_key
    from topologies import rail_optimized, spine_leaf

    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(tmp_path / "envelope.json"))
    here = {"kernel": "6.1", "ovs": "3.1", "cpu_model": "x", "cpu_count": 2, "mtu": 1500}
    rail, small = rail_optimized(4, 4, 2), spine_leaf(2, 2, 4)
    save(Envelope({3: 450.0}, {"small": 5000.0}, 4000, "machine", True, here), None)
    save(
        Envelope({1: 200.0, 3: 150.0}, {"small": 4000.0}, 4000, "on rail", True, here),
        fabric_envelope_path(rail),
    )
    env, why = load(here, rail)
    assert env.capacity_mbps(3) == 150.0 and why.startswith("calibrated on this fabric")
    assert load(here, small)[0].capacity_mbps(3) == 450.0  # another shape: the machine's
    assert load(here)[0].capacity_mbps(3) == 450.0
    # the key is the shape: the same fabric at other rates or buffers shares it
    assert fabric_key(rail_optimized(4, 4, 2, rail_gbps=100, buffer_pkts=16)) == fabric_key(rail)
    assert fabric_key(rail_optimized(4, 4, 1)) != fabric_key(rail)
    # measured on another machine: not this one's, so the machine's applies
    save(
        Envelope({3: 150.0}, {"small": 4000.0}, 4000, "on rail", True, here | {"kernel": "6.2"}),
        fabric_envelope_path(rail),
    )
    assert load(here, rail)[0].capacity_mbps(3) == 450.0


def test_each_lane_of_a_pair_is_a_connection_open_at_once():
    """Persistent connections are one per source, destination, DSCP and lane: eight
    parallel streams between one pair hold eight connections, not one."""
    from traffic.workloads import concat_schedules

    one = concat_schedules([incast("h0", ["h1"], 1_000_000, 2) for _ in range(8)])
    eight = concat_schedules([incast("h0", ["h1"], 1_000_000, 2, lane=i) for i in range(8)])
    assert schedule_demand(one, FABRIC, 1e-4).connections == 1
    assert schedule_demand(eight, FABRIC, 1e-4).connections == 8

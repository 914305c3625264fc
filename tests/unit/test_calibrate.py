"""kvfabric calibrate's pure parts: the loads it steps through ask exactly the figure
they are meant to measure (as a run's plan is judged: peak over 100 ms windows), the
figure is the largest faithful step below the first failure, and what it stores is the
envelope later runs are judged by."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from experiments.analysis.fidelity import switch_counter
from experiments.orchestration import envelope
from experiments.orchestration.calibrate import (
    INCAST_PAIRS,
    MESSAGE_BYTES,
    MESSAGE_SCALE,
    Step,
    hop_schedule,
    largest_faithful,
    make_fabric,
    message_schedule,
    peak_hop_mbps,
    peak_message_hops,
    search,
)
from experiments.orchestration.demand import SMALL_BYTES
from topologies import FabricError, spine_leaf
from topologies.scale import Scale


def _step(planned: float, ok: bool) -> Step:
    return Step("switch_hop_mbps:3", planned, planned * 1.05, None, ok)


def test_the_figure_is_the_largest_faithful_step_below_the_first_failure():
    steps = [_step(100, True), _step(200, True), _step(300, False), _step(400, True)]
    assert largest_faithful(steps) == pytest.approx(210.0)  # 400 passed by luck: not trusted
    assert largest_faithful([_step(100, False)]) is None
    assert largest_faithful([]) is None


@pytest.mark.parametrize(
    ("guess", "tried"),
    [
        (450.0, [450, 675, 562, 506, 478]),  # up by half, then halve the gap three times
        (1200.0, [1200, 600, 300, 450, 525, 487]),  # down by half until faithful, then refine
    ],
)
def test_the_search_brackets_the_limit_then_narrows_it(guess, tried):
    seen = []

    def run(load):
        seen.append(load)
        return _step(load, load < 500)

    steps = search(guess, "full", run)
    assert [int(t) for t in seen] == tried
    best = largest_faithful(steps)
    assert 0.9 * 500 < best / 1.05 < 500  # within a tenth of the limit, from below
    assert len(search(guess, "quick", lambda load: _step(load, load < 500))) == len(tried) - 2


def test_a_search_that_never_finds_a_faithful_step_ends():
    steps = search(450.0, "full", lambda load: _step(load, False))
    assert len(steps) == 6 and largest_faithful(steps) is None


@pytest.mark.parametrize("hops", [1, 3, 5])
def test_each_path_length_load_crosses_that_many_switches_at_the_planned_work(hops):
    section, pairs = INCAST_PAIRS[hops]
    fabric = make_fabric(section)
    count = switch_counter(fabric)
    assert {count(a, b) for a, b in pairs} == {hops}
    assert pairs[2][1] == pairs[3][1] and len({d for _, d in pairs}) == 3  # one 2-to-1 incast
    planned = 450.0
    rate = planned / (3 * hops)
    scale = rate * 1e6 / 100e9
    peak = peak_hop_mbps(hop_schedule(pairs, rate, 2.0, scale), fabric, scale)
    assert peak == pytest.approx(planned, rel=0.1)


@pytest.mark.parametrize("cls", ["small", "bulk"])
def test_message_loads_are_of_their_size_class_at_the_planned_rate(cls):
    fabric = spine_leaf(2, 2, 4)
    hosts = [h.name for h in fabric.hosts]
    schedule = message_schedule(hosts, 2000.0, MESSAGE_BYTES[cls], 5.0, MESSAGE_SCALE)
    emulated = schedule["bytes"] * MESSAGE_SCALE
    assert ((emulated <= SMALL_BYTES) if cls == "small" else (emulated > SMALL_BYTES)).all()
    assert (schedule["src"] != schedule["dst"]).all()
    hops = peak_message_hops(schedule, fabric, MESSAGE_SCALE, cls)
    mean = 15 / 7  # a random pair: same leaf (1 switch) 3 times in 7, else 3 switches
    assert 2000 * mean <= hops <= 2000 * mean * 1.6  # the peak window, above the mean


def test_a_stored_calibration_keeps_how_it_was_measured_and_replaces_the_old_whole(tmp_path):
    path = tmp_path / "envelope.json"
    path.write_text("the old calibration")
    figures = {1: 900.0, 3: 600.0, 5: 500.0}, {"small": 7000.0, "bulk": 3000.0}
    env = envelope.Envelope(*figures, 4000, "kvfabric calibrate (quick)", True, {"kernel": "6.18"})
    envelope.save(env, path, record={"steps": [{"figure": "switch_hop_mbps:1"}]})
    doc = json.loads(path.read_text())
    assert doc["measured"]["steps"][0]["figure"] == "switch_hop_mbps:1"
    assert doc["switch_hop_mbps"] == {"1": 900.0, "3": 600.0, "5": 500.0}
    assert [p.name for p in tmp_path.iterdir()] == ["envelope.json"]  # no temporary left


def test_a_step_beyond_what_one_emulated_link_honours_is_not_run_and_the_search_goes_lower(
    monkeypatch,
):
    from experiments.orchestration import calibrate as cal

    def never(*a, **k):
        raise AssertionError("a step the fabric cannot shape must not be built")

    monkeypatch.setattr(cal, "run_trial", never)
    step = cal.hop_step(3, 30_000.0, 1.0)  # 3,333 Mbit/s host links: above 1 Gbit/s
    assert not step.faithful and step.failed == [cal.BEYOND_LINK_RATE]
    assert step.planned == 30_000.0 and step.peak > 0


# ---- a refusal is explained by measured load, or it is not --------------------------------

QUIET = {"steal_pct": 2.0, "busy_core_outside_s": 0.0}
STOLEN = {"steal_pct": 35.0, "busy_core_outside_s": 0.0}
BUSY_OUTSIDE = {"steal_pct": 0.0, "busy_core_outside_s": 1.0}


def _refused(monkeypatch, load: dict[str, float]) -> Exception:
    """A quick calibration whose every trial fails the cpu check under ``load`` (a faked
    trial: nothing is built), and the refusal it raises."""
    from experiments.orchestration import calibrate as cal

    def trial(section, schedule, scale, seconds, mtu=1500, fabric=None):
        judged = {"ok": False, "checks": {"cpu": {"ok": False, "value": 97.0}}}
        return None, judged, dict(load)

    monkeypatch.setattr(cal, "run_trial", trial)
    said: list[str] = []
    with pytest.raises(cal.CalibrationError) as refused:
        cal.calibrate(quick=True, say=said.append)
    assert len(said) == len(refused.value.steps) == 6  # halved six times, every step logged
    assert all(s.load == load and s.failed == ["cpu"] for s in refused.value.steps)
    return refused.value


@pytest.mark.parametrize(
    ("load", "named"),
    [(STOLEN, "the host took 35% of the CPU (steal"), (BUSY_OUTSIDE, "before the run started")],
)
def test_a_refusal_on_a_loaded_machine_names_the_load_that_explains_it(monkeypatch, load, named):
    refusal = _refused(monkeypatch, load)
    assert named in refusal.cause
    assert "explained by measured load" in str(refusal) and "NOT" not in str(refusal)


def test_a_refusal_on_a_quiet_machine_is_unexplained(monkeypatch):
    refusal = _refused(monkeypatch, QUIET)
    assert refusal.cause is None
    assert "NOT explained by measured load" in str(refusal)


def test_a_refusal_is_decided_by_the_load_at_its_lowest_step():
    from experiments.orchestration.calibrate import refusal_cause

    def step(planned, load, ok=False):
        return Step("messages_per_s:small", planned, planned, None, ok, ["lateness"], {}, load)

    assert refusal_cause([step(400, STOLEN), step(200, BUSY_OUTSIDE)]).startswith("at 200: ")
    # the search starts above the machine's capacity: a quiet failure up there is expected
    assert refusal_cause([step(400, QUIET), step(200, STOLEN)]).startswith("at 200: ")
    assert refusal_cause([step(400, STOLEN), step(200, QUIET)]) is None  # 200 was quiet
    assert refusal_cause([step(400, STOLEN), step(200, {})]) is None  # load not measured
    assert refusal_cause([step(400, {"steal_pct": 19.9})]) is None  # below the steal rule
    assert refusal_cause([step(400, QUIET, ok=True)]) is None  # nothing refused


STALLED = QUIET | {
    "stalls": 40.0,
    "stall_ms_max": 7.2,
    "stalled_flows": 3.0,
    "unstalled_flows": 117.0,
    "lateness_limit_ms": 2.0,
}


@pytest.mark.parametrize(
    ("failed", "load", "explained"),
    [
        (["lateness"], STALLED | {"lateness_p99_unstalled_ms": 0.4}, True),
        # the flows no stall touched were late too: the emulation's own lateness
        (["lateness"], STALLED | {"lateness_p99_unstalled_ms": 2.6}, False),
        # another check failed as well: stalls do not explain a cpu or rate failure
        (["cpu", "lateness"], STALLED | {"lateness_p99_unstalled_ms": 0.4}, False),
        # stalls not measured (no cyclictest): nothing is explained by them
        (["lateness"], QUIET, False),
    ],
)
def test_a_lateness_refusal_is_the_machines_when_only_stalled_flows_were_late(
    failed, load, explained
):
    from experiments.orchestration.calibrate import refusal_cause

    cause = refusal_cause([Step("switch_hop_mbps:1", 14, 14, None, False, failed, {}, load)])
    assert (cause is not None) == explained, cause
    if explained:
        assert "40 machine stalls" in cause and "7.2 ms" in cause and "117 were on time" in cause


@pytest.mark.parametrize(
    "fabric", ["rail-optimized", "spine-leaf-1to1", "spine-leaf-2to1"], ids=str
)
def test_a_fabrics_own_loads_cross_each_of_its_path_lengths_as_the_machines_do(fabric):
    """And never overfill an uplink: the links run faster where a hash could stack the
    streams on one."""
    from experiments.bmwg.suite import read_fabric
    from experiments.orchestration.calibrate import (
        fabric_pairs,
        host_gbps,
        link_factor,
        path_lengths,
    )

    built = make_fabric(read_fabric(fabric).raw["fabric"])
    count = switch_counter(built)
    assert path_lengths(built) == [1, 3]
    for hops in path_lengths(built):
        pairs = fabric_pairs(built, hops)
        assert pairs is not None and {count(a, b) for a, b in pairs} == {hops}
        receivers = [d for _, d in pairs]
        assert receivers[2] == receivers[3] and len(set(receivers)) == 3  # one 2-to-1 incast
        senders = [s for s, _ in pairs]
        assert len(set(senders + receivers[:3])) == 7  # no host in two streams
        assert not any(built.same_server(a, b) for a, b in pairs)  # rail, not NVLink
        rate = 450.0 / (3 * hops)
        factor = link_factor(built, pairs)
        scale = rate * 1e6 * factor / (host_gbps(built, pairs) * 1e9)
        peak = peak_hop_mbps(hop_schedule(pairs, rate, 2.0, scale), built, scale)
        assert peak == pytest.approx(450.0, rel=0.1)
        # three host links' worth over one 200 Gbit/s uplink if the hash stacks them
        assert factor == (1.5 if fabric == "spine-leaf-2to1" and hops == 3 else 1.0)


def test_a_fabric_without_four_pairs_of_a_length_has_none():
    from experiments.orchestration.calibrate import fabric_pairs

    assert fabric_pairs(spine_leaf(1, 1, 3), 1) is None  # three hosts: no 2-to-1 beside two
    assert fabric_pairs(spine_leaf(1, 2, 4), 5) is None


def test_message_loads_on_a_fabric_with_nvlink_keep_its_fastest_link_shapeable():
    from experiments.bmwg.suite import read_fabric
    from experiments.orchestration.calibrate import message_scale
    from topologies.shaping import max_rate_bps

    rail = make_fabric(read_fabric("rail-optimized").raw["fabric"])  # NVLink at 3.6 Tbit/s
    assert 3600e9 * message_scale(rail) <= max_rate_bps()
    assert message_scale(spine_leaf(2, 2, 4)) == MESSAGE_SCALE  # 400 Gbit/s: 400 Mbit/s


def _rail():
    from experiments.bmwg.suite import read_fabric

    section = read_fabric("rail-optimized").raw["fabric"]
    return section, make_fabric(section)


def test_a_steps_idle_links_run_no_faster_than_its_busiest_so_nvlink_sets_no_ceiling():
    """The rail fabric's 3.6 Tbit/s NVLink links carry nothing between rail-switch pairs:
    slowed to the host links' rate, a step's scale is bound by the links it loads, and
    the fabric (and so its envelope's key) keeps its switches and links."""
    from experiments.orchestration.calibrate import fabric_pairs, host_gbps, trial_fabric
    from topologies.shaping import egress_plan, max_rate_bps

    _, rail = _rail()
    pairs = fabric_pairs(rail, 1)
    trial = trial_fabric(rail, pairs)
    assert envelope.fabric_key(trial) == envelope.fabric_key(rail)
    before = {lk.ends(): lk.real_gbps for lk in rail.links}
    after = {lk.ends(): lk.real_gbps for lk in trial.links}
    nvlink = [e for e, lk in zip(before, rail.links, strict=True) if lk.kind == "nvlink"]
    assert nvlink and all(before[e] > after[e] == host_gbps(rail, pairs) for e in nvlink)
    on_paths = {hop for a, b in pairs for p in rail.shortest_paths(a, b) for hop in pairwise(p)}
    assert all(after[e] == before[e] for e in before if e in on_paths or e[::-1] in on_paths)
    host_at_limit = Scale(max_rate_bps() / (host_gbps(rail, pairs) * 1e9))
    egress_plan(trial, host_at_limit)  # every link shapeable with the host links at the limit
    with pytest.raises(FabricError):
        egress_plan(rail, host_at_limit)  # NVLink was not


def test_a_figure_stopped_by_link_rate_is_said_and_stored_as_a_lower_bound(monkeypatch):
    """A faked calibration on the rail fabric where every step that can be shaped is
    faithful: the switch-hop searches end where the loaded links reach the fastest rate
    one emulated hop honours (here 200 Mbit/s), far above NVLink's old ceiling, and the
    figures are said, recorded and sourced as lower bounds; the message figures, never
    refused, are not."""
    from experiments.orchestration import calibrate as cal

    monkeypatch.setenv("KVFABRIC_MAX_RATE_MBPS", "200")
    monkeypatch.setattr(envelope, "load", lambda *a, **k: (envelope.DEFAULT, "default"))

    def trial(section, schedule, scale, seconds, mtu=1500, fabric=None):
        return None, {"ok": True, "checks": {}}, {"steal_pct": 0.0}

    monkeypatch.setattr(cal, "run_trial", trial)
    monkeypatch.setattr(cal, "offered_switching_mbps", lambda flows, fabric: (0.0, None))
    section, _ = _rail()
    said: list[str] = []
    env, record = cal.calibrate(quick=True, say=said.append, fabric_section=section)
    hops = ["switch_hop_mbps:1", "switch_hop_mbps:3"]
    assert record["link_rate_ceilings"] == hops  # the message figures' searches: not
    assert "lower bounds: switch_hop_mbps:1, switch_hop_mbps:3" in env.source
    assert sum("a lower bound" in line for line in said) == 2
    # 1 switch: three 200 Mbit/s host links' worth is 600; NVLink alone stopped it at 67
    assert 450 <= env.switch_hop_mbps[1] <= 600 * 1.05

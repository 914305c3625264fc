"""The time dilation a run is emulated at: a spec's number kept, ``auto`` the smallest
power of two at which the plan fits this machine, bounded by the link rates and by
``--max-dilation``; and what ``kvfabric run --dry-run`` says of it (no root)."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.cli.main import main
from experiments.orchestration.demand import WINDOW_NS, Demand
from experiments.orchestration.dilation import choose_dilation, ladder, shaped_rates
from experiments.orchestration.envelope import DEFAULT, exceeded, figures
from experiments.orchestration.runner import EnvelopeExceeded, prepare
from experiments.spec.load import expand, load_spec
from topologies import spine_leaf
from topologies.scale import Scale
from topologies.shaping import MIN_RATE_BPS

LIMIT = DEFAULT.messages_per_s["small"]  # message-hops/s
HOSTS = {"link h0-leaf0": 100.0, "link leaf0-spine0": 400.0}  # real Gbit/s
AUTO = Scale(1e-4, time_dilation="auto")


def messages(times_the_limit: float, windows: int = 50) -> Demand:
    """A demand whose busiest 100 ms window starts ``times_the_limit`` x the envelope's
    message-hops, the others a tenth of it."""
    per_window = LIMIT * WINDOW_NS / 1e9
    starts = np.full(windows, per_window / 10)
    starts[windows // 2] = per_window * times_the_limit
    return Demand(starts={"small": starts}, connections=10, messages=int(starts.sum()))


def choose(demand: Demand, scale: Scale = AUTO, rates=HOSTS, **kw):
    return choose_dilation(demand, DEFAULT, scale, rates, 10.0, **kw)


def test_a_dilated_run_does_a_dth_of_the_work_per_wall_second_with_the_same_connections():
    demand = messages(2.2)
    at_1 = {f.name: f.peak for f in figures(demand, DEFAULT)}
    at_4 = {f.name: f.peak for f in figures(demand, DEFAULT, dilation=4)}
    assert at_1["messages_per_s"] == pytest.approx(2.2 * LIMIT)
    assert at_4["messages_per_s"] == pytest.approx(at_1["messages_per_s"] / 4)
    assert at_4["machine_load"] == pytest.approx(at_1["machine_load"] / 4)
    assert at_4["connections"] == at_1["connections"]
    line = exceeded(demand, DEFAULT, dilation=2)[0]  # 1.1x at d = 2
    assert "per wall second" in line and "200 ms of wall time at time dilation 2" in line


@pytest.mark.parametrize("times, d", [(0.5, 1), (1.0, 1), (1.3, 2), (2.2, 4), (7.9, 8), (8.1, 16)])
def test_auto_is_the_smallest_power_of_two_at_which_the_plan_fits(times, d):
    chosen = choose(messages(times))
    assert (chosen.d, chosen.auto, chosen.fits) == (d, True, True)
    assert chosen.wall_s == 10.0 * d  # the wall time it costs
    assert chosen.record()["wall_s"] == 10.0 * d


def test_beyond_the_cap_auto_refuses_with_the_dilation_and_wall_time_that_would_fit():
    chosen = choose(messages(10.0), max_dilation=8)
    assert not chosen.fits and chosen.needed == 16 and chosen.d == 8  # --force runs at 8
    why = chosen.exceeded[0]
    assert "time dilation 16" in why and "160 s of wall time" in why
    assert "--max-dilation 16" in why
    assert any(line.startswith("messages_per_s") for line in chosen.exceeded[1:])
    assert choose(messages(10.0), max_dilation=16).d == 16


def test_a_cap_between_powers_of_two_is_tried_itself():
    assert ladder(10) == [1, 2, 4, 8, 10] and ladder(1) == [1] and ladder(64)[-1] == 64
    assert choose(messages(9.5), max_dilation=10).d == 10


def test_auto_never_shapes_a_link_below_the_minimum_rate_and_names_the_slowest():
    # 1 Gbit/s at scale 1e-4 is 100 kbit/s: the floor at d = 1, below it at d = 2
    rates = {**HOSTS, "link h9-leaf1": 1.0}
    assert Scale(1e-4).link_bps(1.0) == MIN_RATE_BPS
    chosen = choose(messages(2.2), rates=rates)
    assert not chosen.fits and chosen.d == 1
    assert "link h9-leaf1" in chosen.exceeded[0] and "below the 0.1 Mbit/s" in chosen.exceeded[0]
    assert choose(messages(0.5), rates=rates).fits  # no dilation needed: no refusal


def test_a_degraded_rate_counts_as_a_link_of_its_own():
    fabric = spine_leaf(1, 2, 2)

    class Degrade:  # what the spec's faults[].link_degrade is made of
        link_degrade = type("LinkDegrade", (), {"link": ("h0", "leaf0"), "gbps": 2.0})()

    rates = shaped_rates(fabric, [Degrade()])
    assert rates["faults.0.link_degrade (h0-leaf0)"] == 2.0
    assert len(rates) == len(fabric.links) + 1
    # 2 Gbit/s at 1e-4 is 200 kbit/s: d = 2 is the most it allows
    assert choose(messages(1.5), rates=rates).d == 2
    assert not choose(messages(3.0), rates=rates).fits


def test_auto_slows_a_run_whose_fastest_link_one_hop_cannot_carry():
    # scale 1e-2: a 400 Gbit/s link would be shaped to 4,000 Mbit/s; one hop carries 1,000
    chosen = choose(messages(0.1), Scale(1e-2, time_dilation="auto"), max_rate_bps=1_000_000_000)
    assert chosen.d == 4 and chosen.fits


def test_a_number_is_kept_as_given_and_judged_there():
    fixed = choose(messages(2.2), Scale(1e-4, time_dilation=2))
    assert (fixed.d, fixed.auto) == (2, False)
    assert not fixed.fits and fixed.exceeded[0].startswith("messages_per_s")  # 1.1x
    assert not any("time_dilation auto" in line for line in fixed.exceeded)
    assert choose(messages(2.2), Scale(1e-4, time_dilation=3)).fits


def test_what_no_dilation_lowers_is_refused_at_the_smallest_d_that_fits_the_rest():
    demand = messages(2.2)
    demand.connections = DEFAULT.connections + 1
    chosen = choose(demand)
    assert chosen.d == 4 and not chosen.fits
    assert [line.split()[0] for line in chosen.exceeded] == ["connections"]


# ---- prepare and --dry-run ------------------------------------------------------------------

SPEC = """
name: bg
duration_s: 20
fabric: {kind: spine_leaf, spines: 4, leaves: 2, hosts_per_leaf: 4, host_gbps: 100,
         uplink_gbps: 400}
controller: {policy: ecmp}
workloads: [{kind: background, load: 0.6, flow_size_scale: 1}]
"""


def test_prepare_resolves_auto_into_the_deployment_the_run_and_the_record(tmp_path):
    spec = load_spec(SPEC, ["scale.time_dilation=auto"], base_dir=tmp_path)
    [p] = prepare(spec, expand(spec), envelope=(DEFAULT, "test"))
    d = p.deployment.scale.d
    assert d > 1 and not p.plan.exceeded and p.dilation.auto
    assert exceeded(p.plan.demand, DEFAULT, d / 2)  # the smallest that fits
    assert p.run.resolved["scale"]["time_dilation"] == d and p.config.scale.d == d
    host_link = next(e for e in p.deployment.plan if e.link.real_gbps == 100)
    assert host_link.rate_bps == round(100e9 * 1e-4 / d)  # shaped in wall time
    record = p.envelope_record()
    assert record["fits"] and record["time_dilation"]["auto"]
    assert record["time_dilation"]["d"] == d and record["time_dilation"]["wall_s"] == 20 * d
    with pytest.raises(EnvelopeExceeded) as err:
        prepare(spec, expand(spec), envelope=(DEFAULT, "test"), max_dilation=d / 2)
    assert f"--max-dilation {d:g}" in err.value.lines[0]
    assert f"{20 * d:g} s of wall time" in err.value.lines[0]
    [forced] = prepare(spec, expand(spec), True, (DEFAULT, "test"), max_dilation=d / 2)
    assert forced.forced and forced.deployment.scale.d == d / 2


def test_a_number_over_the_envelope_is_still_refused(tmp_path):
    spec = load_spec(SPEC, ["scale.time_dilation=2"], base_dir=tmp_path)
    with pytest.raises(EnvelopeExceeded) as err:
        prepare(spec, expand(spec), envelope=(DEFAULT, "test"))
    assert "at time dilation 2" in err.value.lines[0]
    assert "time_dilation auto" not in " ".join(err.value.lines)


@pytest.fixture
def default_envelope(monkeypatch, tmp_path):
    """This machine judged by ``envelope.DEFAULT``; nothing is built."""
    import experiments.orchestration.runner as runner

    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(tmp_path / "no-envelope.json"))

    def built(*args, **kwargs):
        raise AssertionError("something was built")

    monkeypatch.setattr(runner, "run_spec", built)
    monkeypatch.setattr(runner, "fabric_up", built)


def test_dry_run_exits_3_when_the_run_would_be_refused(default_envelope, capsys):
    # serving-basic's layer-pipelined KV peaks at 1.4x the default envelope's messages
    at_1 = ["--set", "scale.time_dilation=1"]  # as written it is auto, and fits at 2
    assert main(["run", "serving-basic", "--dry-run", *at_1]) == 3
    out, err = capsys.readouterr()
    assert "time dilation 1: 60 s of real-equivalent traffic take 60 s of wall time" in out
    assert "would be refused" in err and "--force" in err
    assert main(["run", "serving-basic", "--dry-run", "--force", *at_1]) == 0  # it would run


def test_dry_run_shows_the_dilation_auto_chose_and_its_wall_time(default_envelope, capsys):
    argv = ["run", "serving-basic", "--dry-run", "--set", "scale.time_dilation=auto"]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())  # a line may wrap
    assert "time dilation 2 (auto, at most 64): 60 s of real-equivalent traffic take 120 s" in out
    assert main([*argv, "--max-dilation", "1.2"]) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "--max-dilation 2" in out and "120 s of wall time" in out


def test_max_dilation_out_of_range_is_bad_input(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "serving-basic", "--dry-run", "--max-dilation", "0.5"])
    assert exit_.value.code == 2 and "--max-dilation" in capsys.readouterr().err


# ---- --min-dilation: one d for runs compared across fabrics ---------------------------------


def test_a_floor_starts_auto_there_and_the_powers_of_two_above_follow():
    assert ladder(64, 4) == [4, 8, 16, 32, 64] and ladder(10, 3) == [3, 4, 8, 10]
    assert ladder(8, 8) == [8] and ladder(64, 1) == ladder(64)
    chosen = choose(messages(0.5), min_dilation=4)  # fits at 1, runs at 4
    assert (chosen.d, chosen.fits, chosen.wall_s) == (4, True, 40.0)
    assert chosen.record()["min_dilation"] == 4
    assert "(auto, at least 4, at most 64)" in chosen.describe()
    assert choose(messages(7.9), min_dilation=4).d == 8  # above the floor, as before
    assert choose(messages(0.5), scale=Scale(1e-4, time_dilation=2), min_dilation=4).d == 2


def test_a_floor_that_would_shape_a_link_below_the_minimum_rate_says_so():
    rates = {**HOSTS, "link h9-leaf1": 2.0}  # 200 kbit/s at d = 1, 50 at d = 4
    chosen = choose(messages(0.5), rates=rates, min_dilation=4)
    assert not chosen.fits and chosen.d == 4
    assert "--min-dilation 4" in chosen.exceeded[0] and "link h9-leaf1" in chosen.exceeded[0]


@pytest.mark.parametrize("floor", [0.5, 65.0, float("nan")])
def test_a_floor_out_of_range_is_refused(floor):
    with pytest.raises(ValueError, match="--min-dilation"):
        choose(messages(0.5), min_dilation=floor)


def test_dry_run_with_a_floor_runs_auto_there_and_a_floor_above_the_cap_is_bad_input(
    default_envelope, capsys
):
    argv = ["run", "serving-basic", "--dry-run", "--set", "scale.time_dilation=auto"]
    assert main([*argv, "--min-dilation", "8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "time dilation 8 (auto, at least 8, at most 64)" in out
    assert main([*argv, "--min-dilation", "8", "--max-dilation", "4"]) == 2
    assert "--min-dilation 8 is above --max-dilation 4" in capsys.readouterr().err

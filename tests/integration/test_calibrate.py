"""``kvfabric calibrate`` on this machine: it measures every figure with steps judged
faithful and not, stores the envelope with the machine it was measured on, and later
runs are judged by it (what ``kvfabric run --dry-run`` reports as the envelope).

A refusal is a skip only when the measured load explains it (every unfaithful step ran
under steal or beside a core saturated outside the run: ``calibrate.refusal_cause``);
a refusal on a quiet machine fails, since it is what a regression that makes every step
unfaithful looks like."""

from __future__ import annotations

import json

import pytest

from experiments.cli.main import EXIT_OK, main
from experiments.orchestration import calibrate, envelope

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _recorded_refusals(monkeypatch: pytest.MonkeyPatch) -> list[calibrate.CalibrationError]:
    """The refusals ``calibrate.calibrate`` raises from now on, as they are raised."""
    refusals: list[calibrate.CalibrationError] = []
    measure = calibrate.calibrate

    def recorded(*args, **kwargs):
        try:
            return measure(*args, **kwargs)
        except calibrate.CalibrationError as exc:
            refusals.append(exc)
            raise

    monkeypatch.setattr(calibrate, "calibrate", recorded)
    return refusals


def test_calibrate_stores_the_envelope_later_runs_are_judged_by(tmp_path, monkeypatch, capsys):
    path = tmp_path / "envelope.json"
    refusals = _recorded_refusals(monkeypatch)
    code = main(["calibrate", "--quick", "--out", str(path)])
    if code != EXIT_OK:  # a figure unfaithful even at its lowest step: a refusal, not a guess
        err = " ".join(capsys.readouterr().err.split())  # however the console wrapped it
        assert "not calibrated:" in err and "not faithful even at" in err, err
        assert "is unchanged" in err and not path.exists()  # nothing half-measured is stored
        (refusal,) = refusals
        loads = [(s.planned, s.failed, s.load) for s in refusal.steps]
        assert refusal.cause, f"refused on a machine not measurably loaded: {err}; {loads}"
        pytest.skip(f"this VM was too busy to calibrate ({refusal.cause}): {err}")
    doc = json.loads(path.read_text())
    steps = doc["measured"]["steps"]
    figures = {f"switch_hop_mbps:{n}": v for n, v in doc["switch_hop_mbps"].items()}
    figures |= {f"messages_per_s:{c}": v for c, v in doc["messages_per_s"].items()}
    for figure, value in figures.items():
        mine = [s for s in steps if s["figure"] == figure]
        ok = [s for s in mine if s["faithful"]]
        assert value == max(s["peak"] for s in ok), (figure, mine)  # a step judged faithful
        failed = [s["planned"] for s in mine if not s["faithful"]]
        if failed:  # nothing is trusted above the first load that failed
            assert all(s["planned"] < min(failed) for s in ok), (figure, mine)
    assert set(doc["switch_hop_mbps"]) == {"1", "3", "5"}
    assert doc["machine"]["cpu_count"] and doc["machine"]["ovs"]
    assert doc["measured"]["sampler_us_per_port"] > 0

    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(path))
    env, why = envelope.load(envelope.machine_identity())
    assert env.calibrated, why
    capsys.readouterr()
    # judged by it (--force: a dry run exits 1 when the envelope would refuse the run;
    # whether this machine's quick envelope refuses incast-basic is not the question)
    assert main(["run", "incast-basic", "--dry-run", "--force"]) == EXIT_OK
    assert "envelope: kvfabric calibrate (quick)" in capsys.readouterr().out


FABRIC_SPEC = """\
name: own-fabric
duration_s: 2
fabric: {kind: spine_leaf, spines: 2, leaves: 2, hosts_per_leaf: 4,
         host_gbps: 100, uplink_gbps: 200}
workloads:
  - {kind: incast, receiver: h4, senders: [h0, h1], sru_bytes: 1000000, rounds: 2}
"""


def test_calibrate_on_a_fabric_stores_its_own_envelope_that_runs_on_it_are_judged_by(
    tmp_path, monkeypatch, capsys
):
    spec = tmp_path / "own-fabric.yaml"
    spec.write_text(FABRIC_SPEC)
    monkeypatch.setenv("KVFABRIC_ENVELOPE", str(tmp_path / "envelope.json"))
    refusals = _recorded_refusals(monkeypatch)
    code = main(["calibrate", "--quick", "--fabric", str(spec)])
    if code != EXIT_OK:
        (refusal,) = refusals
        assert refusal.cause, f"refused on a machine not measurably loaded: {refusal}"
        pytest.skip(f"this VM was too busy to calibrate ({refusal.cause}): {refusal}")
    (stored,) = tmp_path.glob("envelope-fabric-*.json")
    doc = json.loads(stored.read_text())
    assert set(doc["switch_hop_mbps"]) == {"1", "3"}  # the path lengths its hosts have
    assert set(doc["measured"]["pairs"]) == {"1", "3"}
    assert "on this fabric (spine_leaf, 4 switches" in doc["source"]
    assert not (tmp_path / "envelope.json").exists()  # the machine's is left alone
    capsys.readouterr()
    assert main(["run", str(spec), "--dry-run", "--force"]) == EXIT_OK
    assert "kvfabric calibrate --fabric (quick)" in capsys.readouterr().out

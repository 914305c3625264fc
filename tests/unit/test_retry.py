"""``orchestration.retry``: the rule by which the references and the BMWG suite run an
unfaithful run again, on hand-made outcomes (no root, no emulation)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.orchestration.retry import failed_checks, kept, until_kept

LATE = {"ok": False, "checks": {"lateness": {"ok": False, "detail": "p99 5 ms"}}}
FAITHFUL = {"ok": True, "checks": {"lateness": {"ok": True, "detail": "p99 0.4 ms"}}}


@dataclass
class Done:
    path: Path
    summary: dict[str, Any]


def runner(verdicts: dict[int, list[dict[str, Any]]], cut: set[tuple[int, int]] = frozenset()):
    """A fake ``run``: seed n's k-th attempt gets ``verdicts[n][k]`` (the last one
    again once they run out); ``cut`` holds the (seed, attempt)s a Ctrl-C cut short."""
    calls: list[list[int]] = []
    tries: dict[int, int] = {}

    def run(seeds: list[int]) -> list[Done]:
        calls.append(list(seeds))
        out = []
        for seed in seeds:
            k = tries.get(seed, 0)
            tries[seed] = k + 1
            fidelity = verdicts[seed][min(k, len(verdicts[seed]) - 1)]
            summary = {"seed": seed, "fidelity": fidelity, "error": None}
            if (seed, k) in cut:
                summary |= {"interrupted": True, "error": "InterruptedError: stopped"}
            out.append(Done(Path(f"run-{seed}-{k}"), summary))
        return out

    return run, calls


def test_only_the_unfaithful_run_is_run_again_with_its_seed():
    run, calls = runner({1: [FAITHFUL], 2: [LATE, LATE, FAITHFUL]})
    done = until_kept(run, [1, 2], retries=2)
    assert calls == [[1, 2], [2], [2]]
    assert [o.path.name for o in done.outcomes] == ["run-1-0", "run-2-2"]
    assert [o.path.name for o in done.discarded] == ["run-2-0", "run-2-1"]
    assert not done.stopped and all(kept(o.summary) for o in done.outcomes)


def test_retries_run_out_and_the_last_attempt_stands():
    run, calls = runner({1: [LATE]})
    done = until_kept(run, [1], retries=2)
    assert len(calls) == 3 and not kept(done.outcomes[0].summary)
    assert len(done.discarded) == 2


def test_a_run_cut_short_by_ctrl_c_stops_everything_and_is_not_run_again():
    # the last run of the batch, stopped before its traffic: nothing else tells the
    # caller (no run was left unstarted), and its error does not start "interrupted"
    run, calls = runner({1: [FAITHFUL], 2: [LATE]}, cut={(2, 0)})
    done = until_kept(run, [1, 2], retries=2)
    assert done.stopped and calls == [[1, 2]] and not done.discarded


def test_a_run_not_started_stops_everything():
    def run(seeds: list[int]) -> list[Done]:
        return [Done(Path("run-1"), {"fidelity": LATE})][: len(seeds) - 1]

    done = until_kept(run, [1, 2], retries=2)
    assert done.stopped and len(done.outcomes) == 1


def test_a_round_that_raises_leaves_the_first_attempts_standing():
    calls = []

    def run(seeds: list[int]) -> list[Done]:
        calls.append(seeds)
        if len(calls) > 1:
            raise RuntimeError("another run holds the machine")
        return [Done(Path("first"), {"fidelity": LATE})]

    done = until_kept(run, [1], retries=2)
    assert [o.path.name for o in done.outcomes] == ["first"] and not done.stopped


def test_failed_checks_name_the_error_when_there_is_one():
    assert failed_checks({"fidelity": LATE}) == {"lateness": "p99 5 ms"}
    assert failed_checks({"fidelity": LATE, "error": "partial"}) == {
        "lateness": "p99 5 ms",
        "error": "partial",
    }
    judged_nothing = {"fidelity": {"ok": False, "checks": {}, "error": "could not judge"}}
    assert failed_checks(judged_nothing) == {"error": "could not judge"}
    assert not kept({"fidelity": FAITHFUL, "error": "partial"})

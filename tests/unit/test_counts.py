"""The counts the README, the docs and the handouts index state about the committed
references are the references' own (``experiments.output.counts``): a stale "34 runs
and nine experiments" fails here; ``kvfabric references`` restamps them."""

from __future__ import annotations

import pytest

from experiments.output.counts import ROOT, STAMPED, counts_of, read_counts, stamp
from experiments.spec.load import REFERENCE_DIR


def test_every_stated_count_is_the_committed_references():
    counts = read_counts(REFERENCE_DIR)
    stale = [
        rel
        for rel in STAMPED
        if stamp((ROOT / rel).read_text(), counts) != (ROOT / rel).read_text()
    ]
    assert not stale, (
        f"{stale} state counts other than the committed references' {counts}:"
        " run `python -c 'from experiments.output.counts import stamp_files;"
        " from experiments.spec.load import REFERENCE_DIR; stamp_files(REFERENCE_DIR)'`"
    )


def test_every_stamped_file_states_a_count():
    for rel in STAMPED:
        assert "<!-- count:" in (ROOT / rel).read_text(), rel


def test_the_counts_of_references():
    ok, bad = {"fidelity": {"ok": True}}, {"fidelity": {"ok": False}}
    counts = counts_of({"incast-collapse": [ok, ok, bad], "scale-out": [ok]})
    assert counts == {
        "experiments": "2",
        "other-experiments": "1",
        "runs": "4",
        "faithful-runs": "3 of 4",
    }


def test_a_stale_count_is_rewritten_and_an_unknown_one_refused():
    text = "over <!-- count:runs -->34<!-- /count --> runs, nine experiments"
    assert (
        stamp(text, {"runs": "54"})
        == "over <!-- count:runs -->54<!-- /count --> runs, nine experiments"
    )
    with pytest.raises(ValueError, match="unknown count 'rnus'"):
        stamp("<!-- count:rnus -->34<!-- /count -->", {"runs": "54"})

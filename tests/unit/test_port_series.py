"""The dequeue-rate evidence of many ports judged at once (``port_series``): a run's
queue table interleaves every port's samples, sometimes out of time order; each port's
standing-queue stretches must be its own, as if it had been sampled alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.analysis import fidelity as fd
from tests.unit.test_fidelity import RATE, at_rate, port_rows


def test_interleaved_ports_keep_their_own_stretches():
    fast = port_rows("leaf0", 1, [5] * 101 + [0] * 5 + [6] * 50, at_rate(1.0))
    slow = port_rows("leaf1", 3, [4] * 80 + [0] * 3 + [9] * 60, at_rate(0.5))
    other_port = port_rows("leaf0", 2, [6] * 60, at_rate(0.9))
    rates = {("leaf0", 1): RATE, ("leaf1", 3): RATE, ("leaf0", 2): RATE}
    alone = pd.concat([fd.busy_dequeue(q, rates_bps=rates) for q in (fast, other_port, slow)])
    mixed = pd.concat([fast, slow, other_port]).sample(frac=1.0, random_state=7)  # shuffled
    together = fd.busy_dequeue(mixed, rates_bps=rates)
    assert list(zip(together["node"], together["port"], strict=True)) == [
        ("leaf0", 1),
        ("leaf0", 2),
        ("leaf1", 3),
    ]
    pd.testing.assert_frame_equal(together, alone.reset_index(drop=True), check_dtype=False)
    by_port = together.set_index(["node", "port"])
    assert by_port.loc[("leaf0", 1), "stretches"] == 2  # a gap ends a stretch
    assert by_port.loc[("leaf1", 3), "bps"] == pytest.approx(RATE * 0.5, rel=0.01)


def test_a_stretch_never_spans_two_ports():
    # each port stands 15 ms (under the 20 ms a stretch needs), one right after the other
    a = port_rows("leaf0", 1, [5] * 4, at_rate(1.0))
    b = port_rows("leaf0", 2, [5] * 4, at_rate(1.0), t0=4 * 5_000_000, sent0=4 * at_rate(1.0))
    assert fd.busy_dequeue(pd.concat([a, b])).empty


def test_no_samples_no_stretches():
    empty = port_rows("leaf0", 1, [1], 0).iloc[:0]
    assert fd.busy_dequeue(empty).empty
    one = fd.busy_dequeue(port_rows("leaf0", 1, [1], 0))
    assert one.empty and list(one.columns) == [
        "node",
        "port",
        "stretches",
        "busy_s",
        "busy_bytes",
        "bps",
    ]
    assert np.isfinite(fd.busy_dequeue(port_rows("leaf0", 1, [2] * 10, 100))["bps"]).all()

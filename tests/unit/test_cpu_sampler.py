"""CpuSampler's arithmetic on hand-made /proc/stat deltas (no thread, no root)."""

from __future__ import annotations

import pytest

from experiments.measurement import samplers


def _feed(monkeypatch: pytest.MonkeyPatch, ticks: list[list[tuple[float, float, float]]]):
    it = iter(ticks)
    monkeypatch.setattr(samplers, "_core_times", lambda: next(it))
    cpu = samplers.CpuSampler(20.0)
    cpu._open()
    for _ in ticks[1:]:
        cpu._sample()
    return cpu.table()


def test_steal_never_exceeds_busy_when_busy_is_a_cancelled_difference(monkeypatch):
    # busy = total - idle - iowait: over ~1e5 s counters its delta loses ~1e-11 s, so a
    # tick whose only busy time is steal came out with steal_pct 1e-8 above cpu_pct (CI)
    t0 = [(54321.07, 98765.43, 120.0), (40000.0, 98765.43, 80.0)]
    t1 = [(54321.08 - 1e-11, 98765.54, 120.01), (40000.0, 98765.54, 80.0)]
    c = _feed(monkeypatch, [t0, t1])
    assert c["steal_pct"].iloc[0] <= c["cpu_pct"].iloc[0]
    assert c["steal_pct"].iloc[0] == pytest.approx(100 * 0.01 / 0.22, rel=1e-6)


def test_cpu_is_busy_over_total_across_cores_and_the_busiest_core_apart(monkeypatch):
    t0 = [(0.0, 0.0, 0.0), (0.0, 0.0, 0.0)]
    t1 = [(0.9, 1.0, 0.1), (0.1, 1.0, 0.0)]
    c = _feed(monkeypatch, [t0, t1])
    row = c.iloc[0]
    assert (row["cpu_pct"], row["max_core_pct"]) == pytest.approx((50.0, 90.0))
    assert row["steal_pct"] == pytest.approx(5.0)

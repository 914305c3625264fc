"""Clock offsets of a server: recovered from timed exchanges, the fastest exchange
wins, the stated uncertainty always contains the true offset; on this machine
(localhost) the offset is nil."""

from __future__ import annotations

import random

import pytest

from topologies.cluster.clock import ClockError, measure_offset, offset_estimate
from topologies.cluster.ssh import Server

SKEW_NS = 7_345_000_123  # the server's clock is ahead of ours by this much


def _sample(t_send: int, out_ns: int, back_ns: int, skew: int = SKEW_NS):
    """What an exchange records when the request takes ``out_ns`` and the answer
    ``back_ns``: the server reads its clock on arrival."""
    return (t_send, t_send + out_ns + skew, t_send + out_ns + back_ns)


def test_a_symmetric_exchange_gives_the_exact_offset():
    est = offset_estimate([_sample(1_000, 40_000, 40_000)])
    assert est.offset_ns == SKEW_NS
    assert (est.rtt_ns, est.uncertainty_ns, est.samples) == (80_000, 40_000, 1)


def test_the_fastest_exchange_wins_over_slower_asymmetric_ones():
    samples = [
        _sample(0, 900_000, 100_000),  # a slow request: alone it would be 400 us off
        _sample(2_000_000, 30_000, 30_000),  # the fastest, symmetric
        _sample(4_000_000, 100_000, 2_000_000),
    ]
    est = offset_estimate(samples)
    assert est.offset_ns == SKEW_NS
    assert est.rtt_ns == 60_000 and est.samples == 3
    assert abs(offset_estimate(samples[:1]).offset_ns - SKEW_NS) == 400_000


def test_tied_fastest_exchanges_are_averaged():
    est = offset_estimate([_sample(0, 10_000, 30_000), _sample(10**6, 30_000, 10_000)])
    assert est.offset_ns == SKEW_NS  # -10 us and +10 us of asymmetry cancel


@pytest.mark.parametrize("seed", range(20))
def test_the_uncertainty_always_contains_the_true_offset(seed):
    rng = random.Random(seed)
    skew = rng.randint(-(10**12), 10**12)
    samples, t = [], rng.randint(0, 10**15)
    for _ in range(rng.randint(1, 16)):
        out, back = rng.randint(0, 5_000_000), rng.randint(0, 5_000_000)
        samples.append(_sample(t, out, back, skew))
        t += out + back + rng.randint(0, 10**6)
    est = offset_estimate(samples)
    assert abs(est.offset_ns - skew) <= est.uncertainty_ns
    assert est.rtt_ns == min(r - s for s, _, r in samples)


def test_no_samples_or_a_sample_received_before_it_was_sent_is_refused():
    with pytest.raises(ValueError, match="no clock samples"):
        offset_estimate([])
    with pytest.raises(ValueError, match="before it was sent"):
        offset_estimate([_sample(0, 10, 10), (500, 600, 499)])


@pytest.mark.parametrize("clock", ["monotonic", "realtime"])
def test_this_machine_measured_through_one_session_is_not_offset(clock):
    est = measure_offset(Server("localhost"), n=16, clock=clock)
    assert est.samples == 16
    assert abs(est.offset_ns) <= est.uncertainty_ns + 1_000_000
    assert 0 < est.rtt_ns < 50_000_000  # one session: no process start-up in a sample


class _WithoutPython(Server):
    def command(self, args):
        return ["sh", "-c", "echo 'sh: 1: python3: not found' >&2; exit 127"]


def test_an_unknown_clock_and_a_server_that_cannot_answer_are_refused_with_why():
    with pytest.raises(ValueError, match="monotonic, realtime"):
        measure_offset(Server("localhost"), clock="tai")
    with pytest.raises(ClockError, match="session ended: sh: 1: python3: not found"):
        measure_offset(_WithoutPython("localhost"), n=2)

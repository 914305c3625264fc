"""The classic incast at real packet sizes (``scale.bandwidth: 1``), dilated: the kernel's
200 ms minimum RTO collapses goodput, a 1 ms one (``transport.rto_min_ms``, set x d on
every host route) keeps it; the round times read in real-equivalent milliseconds; and
the switch losing more frames than its full queue counted is not held against the run
(``fidelity.batch_losses``)."""

from __future__ import annotations

import pytest

from .runs import run_spec, summary

pytestmark = pytest.mark.root

SPEC = """
name: incast-real-packets
seed: 3
duration_s: 3
scale: {bandwidth: 1, time_dilation: 8}
fabric: {kind: spine_leaf, spines: 1, leaves: 1, hosts_per_leaf: 9,
         host_gbps: 1, uplink_gbps: 1, buffer_pkts: 21}
controller: {policy: shortest_path}
transport: {rto_min_ms: RTO, delayed_ack: false, tail_loss_probe: false}
agents: {cc: reno}
workloads:
  - {kind: incast, receiver: h0, senders: 8, sru_bytes: 131072, rounds: 3}
"""


def _incast(tmp_path, rto_ms: int) -> dict:
    s = summary(run_spec(tmp_path, f"rto{rto_ms}", SPEC.replace("RTO", str(rto_ms))))
    incast = s["metrics"]["incast"]
    assert incast["failed_rounds"] == 0
    return s


def test_real_packets_collapse_with_a_200_ms_minimum_rto_and_recover_with_1_ms(tmp_path):
    runs = {"200": _incast(tmp_path, 200), "1": _incast(tmp_path, 1)}
    good = {k: s["metrics"]["incast"]["goodput_mbps"]["mean"] for k, s in runs.items()}
    rounds = {k: s["metrics"]["incast"]["round_ms"]["p50"] for k, s in runs.items()}
    # measured (dilation-grain, 8 senders, d = 16): 40 vs 950 Mbit/s, rounds 210 vs 8.8 ms
    assert good["200"] < 0.25 * good["1"], good
    assert good["1"] > 400, good  # most of the 1 Gbit/s link
    # a round that waited for a timeout lasts at least the real-equivalent 200 ms
    # (1.6 s of wall time at d = 8), one that did not a few milliseconds
    assert rounds["200"] >= 190 and rounds["1"] < 60, rounds
    for s in runs.values():
        loss = s["fidelity"]["checks"]["unmodelled_loss"]
        assert loss["ok"], loss["detail"]

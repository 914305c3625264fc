"""The analytic estimates (experiments.analysis.estimates) against numbers computed by hand."""

from __future__ import annotations

import textwrap

import pytest

from experiments.analysis.estimates import (
    collision_odds,
    estimate,
    pipelined_exposed_s,
    transfer_numbers,
)
from experiments.spec.load import expand, load_spec


def runs(tmp_path, text):
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return expand(load_spec(path))


def only(tmp_path, text):
    (run,) = runs(tmp_path, text)
    return estimate(run.config, run.fabric())


INCAST = """
    name: t
    duration_s: 5
    fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 4,
             host_gbps: 100, uplink_gbps: 400, buffer_pkts: 16}
    workloads:
      - {kind: incast, receiver: h0, senders: 4, sru_bytes: 3.2e+8, rounds: 2}
"""


def test_incast_round_time_and_overflow_by_hand(tmp_path):
    est = only(tmp_path, INCAST)["incast"][0]
    # 4 × 320 MB × 8 bit over 100 Gbit/s × 1448/1514 = 1.024e10 / 9.5641e10 s
    assert est["ideal_round_ms"] == pytest.approx(107.067, abs=1e-3)
    assert est["ideal_goodput_mbps"] == pytest.approx(9.5641, abs=1e-4)  # 10 Mbit/s × 0.9564
    # 32 000 emulated bytes = 23 segments; windows of 10; 3 × 10 = 30 > 16 packets
    assert est["sru_pkts_emulated"] == 23
    assert est["peak_queue_pkts"] == 30 and est["overflow"] is True
    assert est["predicted_round_ms"] == pytest.approx(307.067, abs=1e-3)  # + 200 ms RTO
    assert est["predicted_goodput_real_gbps"] == pytest.approx(33.348, abs=1e-3)


def test_incast_with_a_deep_buffer_does_not_overflow(tmp_path):
    est = only(tmp_path, INCAST.replace("buffer_pkts: 16", "buffer_pkts: 64"))["incast"][0]
    assert est["overflow"] is False
    assert est["predicted_round_ms"] == est["ideal_round_ms"]


def test_pipelined_exposure_link_bound_and_compute_bound():
    # per layer: transfer 2 s, compute 1 s; the link finishes 8 s after start, prefill at 4
    # s, but layer 0 only starts at 1 s: exposed = 8 - 3 × 1 = 5 s
    assert pipelined_exposed_s(8.0, 4.0, 4) == pytest.approx(5.0)
    # link faster than compute: only the last layer (2 / 4 = 0.5 s) is exposed
    assert pipelined_exposed_s(2.0, 8.0, 4) == pytest.approx(0.5)


def test_transfer_numbers_llama_8b_2000_tokens_over_25_gbps():
    est = transfer_numbers("llama-3-8b", "h100", 2000, 2, 2, "fp16", 25.0)
    # rank pair: 4 KV heads × 2000 tokens × 128 × 2 (K, V) × 2 B × 32 layers
    assert est["rank_pair_bytes"] == 131_072_000
    assert est["transfer_ms"] == pytest.approx(41.943, abs=1e-3)  # 1.048576e9 bit / 25e9
    # 2 × 8.03e9 × 2000 FLOP / (2 × 989e12 × 0.5)
    assert est["prefill_ms"] == pytest.approx(32.477, abs=1e-3)
    # 41.943 - 31/32 × 32.477
    assert est["exposed_ms_layer_pipelined"] == pytest.approx(10.481, abs=1e-3)
    assert est["hidden_fraction_layer_pipelined"] == pytest.approx(0.7501, abs=1e-4)


def test_collision_odds_by_hand():
    four = collision_odds(4, 4)
    assert four["p_no_collision"] == pytest.approx(24 / 256)  # 4! / 4^4
    assert four["mean_others_on_my_spine"] == pytest.approx(0.75)
    two = collision_odds(2, 4)
    assert two["p_pair_shares"] == 0.25 and two["p_no_collision"] == pytest.approx(0.75)
    assert collision_odds(5, 4)["p_no_collision"] == 0.0


ECMP = """
    name: t
    duration_s: 5
    fabric: {kind: spine_leaf, spines: 4, leaves: 2, hosts_per_leaf: 4,
             host_gbps: 400, uplink_gbps: 400}
    controller: {policy: POLICY}
    workloads:
      - {kind: kv_transfer, prefill_hosts: [h0, h1, h2, h3], decode_hosts: [h4, h5, h6, h7],
         prefill_tp: 1, decode_tp: 1, model: llama-3-8b, tokens: [16000, 16000, 16000, 16000]}
"""


@pytest.mark.parametrize(
    ("policy", "fct_ms"),
    [
        ("shortest_path", 4 * 41.94304),  # all four share one 400 Gbit/s uplink
        ("ecmp", 1.75 * 41.94304),  # 1 + 3/4 flows on a flow's spine on average
        ("adaptive", 41.94304),  # one per spine
    ],
)
def test_ecmp_collision_fct_by_policy(tmp_path, policy, fct_ms):
    est = only(tmp_path, ECMP.replace("POLICY", policy))["kv_transfer"][0]
    # 16 000 tokens × 131 072 B = 2.097 GB over 400 Gbit/s = 41.943 ms alone
    assert est["transfer_ms"] == pytest.approx(41.94304)
    col = est["collisions"]
    assert col["elephants_per_wave"] == 4 and col["spines"] == 4
    assert col["fct_ms_this_policy"] == pytest.approx(fct_ms)


def test_alltoall_step_bound_by_hand(tmp_path):
    est = only(
        tmp_path,
        """
        name: t
        duration_s: 5
        fabric: {kind: spine_leaf, spines: 2, leaves: 2, hosts_per_leaf: 2,
                 host_gbps: 400, uplink_gbps: 400}
        workloads:
          - {kind: moe_alltoall, group: [h0, h1, h2, h3], model: mixtral-8x7b, steps: 3,
             tokens_per_step: 16384, tenant: b}
        """,
    )["alltoall"][0]
    # a message: 16384 tokens × top-2 × 4096 × 2 B / 4 ranks = 67 108 864 B; each host
    # sends 3 peers × 2 phases (dispatch, combine) of them per step: 402.65 MB at 400 Gbit/s
    assert est["step_ms_lower_bound"] == pytest.approx(8.053, abs=1e-3)
    assert est["step_bytes"] == 4 * 6 * 67_108_864


def test_serving_ttft_from_the_fluid_simulator_by_hand(tmp_path):
    est = only(
        tmp_path,
        """
        name: t
        duration_s: 5
        fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2,
                 host_gbps: 100, uplink_gbps: 100}
        workloads:
          - kind: serving
            model: llama-3-8b
            prefill: {servers: [0], tp: 1}
            decode: {servers: [3], tp: 1}
            arrivals: {synthetic: {n: 1, rate_per_s: 1, input_tokens: 1000, output_tokens: 2}}
        """,
    )
    sv = est["serving"]
    # prefill 2 × 8.03e9 × 1000 / (989e12 × 0.5) = 32.477 ms; KV 1000 × 131 072 B over
    # 100 Gbit/s = 10.486 ms; first decode step (16.06e9 + 1.31e8 B) / (3350e9 × 0.5) =
    # 9.666 ms: TTFT 52.63 ms
    assert sv["ttft_ms"]["p50"] == pytest.approx(52.63, abs=0.01)
    assert sv["kv_transfer_ms"]["p50"] == pytest.approx(10.486, abs=1e-3)
    assert sv["served"] == 1
    assert est["buffer"]["host"]["full_buffer_ms_emulated"] == pytest.approx(
        64 * 1514 * 8 / 10e6 * 1e3
    )


def test_no_estimate_without_a_modelled_workload(tmp_path):
    assert (
        only(
            tmp_path,
            """
            name: t
            duration_s: 5
            fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2}
            workloads:
              - {kind: probe, pairs: [[h0, h2]], rate_hz: 10, size_bytes: 200}
            """,
        )
        is None
    )


def test_the_run_s_spare_driver_gives_the_estimate_a_fresh_build_gives():
    """The runner simulates an unused copy of the plan's driver instead of building a
    third one: the same prediction."""
    from experiments.orchestration.plan import traffic_plan
    from experiments.spec.load import find_bundled
    from traffic.serving.instances import ServingError

    run = expand(load_spec(find_bundled("serving-basic")))[0]
    fabric = run.fabric()
    plan = traffic_plan(run.config, fabric, None)
    assert estimate(run.config, fabric, plan.spare_driver()) == estimate(run.config, fabric)
    used = plan.spare_driver()
    sent = used.start(0)
    while not sent and used.next_timer_ns() is not None:  # until its first message
        sent = used.on_timer(used.next_timer_ns())
    assert sent
    with pytest.raises(ServingError, match="already numbered"):
        used.number_flows_from(5)

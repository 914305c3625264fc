"""The bundled experiment library, shortened: each experiment on a small fabric for a few
seconds, asserting the qualitative outcome its handout tells a user to check.

These are the experiments' claims as tests: when one fails, the emulation disagrees with
the claim and the handout must say why (experiments/handouts/<name>.md), not the test be
tuned until it passes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments.cli.main import main

pytestmark = pytest.mark.root


def run(tmp_path: Path, name: str, *sets: str) -> dict[str, dict[str, Any]]:
    """Run bundled experiment ``name`` with ``--set`` overrides; label → run info."""
    args = ["run", name, "--out", str(tmp_path), "--quiet"]
    for s in sets:
        args += ["--set", s]
    code = main(args)
    out = {}
    for path in sorted(tmp_path.glob(f"{name}/2*/summary.json")):
        summary = json.loads(path.read_text())
        assert summary["partial"] is False, summary.get("error")
        key = ",".join(p for p in summary["label"].split(",") if not p.startswith("seed="))
        out[key or "base"] = {"summary": summary, "dir": path.parent}
    assert code == 0, {k: v["summary"].get("error") for k, v in out.items()}
    return out


def metric(info: dict[str, Any], key: str, stat: str = "p50") -> float:
    return info["summary"]["metrics"][key][stat]


def test_incast_goodput_collapses_with_many_senders_and_a_shallow_buffer(tmp_path):
    runs = run(
        tmp_path,
        "incast-collapse",
        "duration_s=6",
        "workloads.0.rounds=10",
        "sweep.fabric.buffer_pkts=[16]",
        "sweep.workloads.0.senders=[2, 14]",
    )
    ceiling_mbps = 10 * 1448 / 1514  # the receiver's 10 Mbit/s link, TCP/IP headers off

    def rto_rounds(label: str) -> int:
        """Rounds that waited out a minimum RTO: 150 ms (of the 200) past the ideal."""
        rounds = runs[label]["summary"]["metrics"]["incast"]["per_round"]
        return sum(r["round_ms"] > r["bytes"] * 8 / ceiling_mbps / 1e3 + 150 for r in rounds)

    few, many = "buffer_pkts=16,senders=2", "buffer_pkts=16,senders=14"
    goodput = {k: runs[k]["summary"]["metrics"]["incast"]["goodput_mbps"]["mean"] for k in runs}
    # The collapse is rounds that pay a timeout, not a lower mean against a measured
    # 2-sender baseline: a busy CI machine once slowed the 2-sender rounds from 16 to 24 ms
    # (6.56 Mbit/s) while the 14-sender run paid timeouts in about 2 of 6 rounds (6.65);
    # alone, 14 senders pay one in 3-6 of 6 rounds (4.3-6.9 Mbit/s), 2 senders in none.
    assert rto_rounds(few) == 0, runs[few]["summary"]["metrics"]["incast"]["per_round"]
    assert rto_rounds(many) >= 2, runs[many]["summary"]["metrics"]["incast"]["per_round"]
    assert goodput[many] < 0.85 * ceiling_mbps, goodput


def test_layer_pipelined_kv_transfer_gives_a_lower_ttft_for_long_prompts(tmp_path):
    runs = run(
        tmp_path,
        "kv-pipelining",
        "duration_s=3",
        "workloads.0.arrivals.synthetic.n=2",
        "sweep.workloads.0.arrivals.synthetic.input_tokens=[16000]",
    )
    mono = metric(runs["input_tokens=16000,transfer=monolithic"], "ttft_ms")
    piped = metric(runs["input_tokens=16000,transfer=layer_pipelined"], "ttft_ms")
    assert piped < mono, (piped, mono)


def test_topology_aware_placement_shortens_kv_transfers(tmp_path):
    runs = run(
        tmp_path, "topology-aware-placement", "duration_s=4", "workloads.0.arrivals.synthetic.n=30"
    )
    blind = metric(runs["router=least_loaded"], "kv_transfer_ms")
    aware = metric(runs["router=topology_aware"], "kv_transfer_ms")
    assert aware < blind, (aware, blind)


def test_cache_affinity_moves_fewer_prefix_bytes_over_the_fabric(tmp_path):
    runs = run(
        tmp_path,
        "cache-affinity-vs-load",
        "duration_s=3",
        "workloads.0.arrivals.synthetic.n=50",
        "sweep.workloads.0.router_weight=[0, 16]",
    )

    def fetched(info: dict[str, Any]) -> int:
        flows = pd.read_parquet(info["dir"] / "flows.parquet")
        return int(flows.loc[flows["kind"] == "cache_fetch", "bytes"].sum())

    balance, affinity = runs["router_weight=0"], runs["router_weight=16"]
    assert fetched(affinity) < fetched(balance)
    assert metric(affinity, "ttft_ms") <= metric(balance, "ttft_ms") * 1.1


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("noisy")
    # shortest_path: A's all-reduce and B's all-to-all certainly share the one spine path
    # (under ecmp whether they share a queue is up to the hash, so the damage without
    # isolation varies from run to run: see the handout)
    runs = run(
        tmp,
        "noisy-neighbour",
        "duration_s=4",
        "workloads.1.steps=15",
        "workloads.0.arrivals.synthetic.n=6",
        "sweep.controller.policy=[shortest_path]",
    )
    return runs["policy=shortest_path,tenant_class={}"], runs[
        'policy=shortest_path,tenant_class={"a":"gold","b":"bronze"}'
    ]


def test_qos_lowers_tenant_a_median_itl_under_the_all_to_all(noisy):
    none, qos = noisy
    assert metric(qos, "itl_ms", "p50") < metric(none, "itl_ms", "p50")


# No assertion on ITL p99 here: in these runs it is set by ~200 ms stalls from packets lost
# outside the modelled queues (the unmodelled_loss check fails in 3 of the 4 reference runs;
# the handout compares the configurations at p50 only), and it failed 2 of today's runs.


def test_adaptive_routing_finishes_elephants_faster_than_a_single_path(tmp_path):
    runs = run(
        tmp_path,
        "ecmp-collisions",
        "duration_s=3",
        "workloads.0.tokens=[16000, 16000, 16000, 16000, 16000, 16000, 16000, 16000]",
        "sweep.controller.policy=[shortest_path, adaptive]",
    )

    def fct(info: dict[str, Any]) -> float:
        return info["summary"]["metrics"]["fct_ms_by_kind"]["kv_transfer"]["p50"]

    assert fct(runs["policy=adaptive"]) < fct(runs["policy=shortest_path"])


def test_a_slower_spine_raises_ttft(tmp_path):
    runs = run(
        tmp_path,
        "bandwidth-sweep",
        "duration_s=5",
        "workloads.0.arrivals.limit=20",
        "sweep.fabric.spine_gbps=[10, 400]",
    )
    assert metric(runs["spine_gbps=10"], "ttft_ms") > metric(runs["spine_gbps=400"], "ttft_ms")


def test_traffic_recovers_after_a_spine_link_fails(tmp_path):
    runs = run(
        tmp_path,
        "link-failure",
        "duration_s=5",
        "sweep={}",
        "faults=[{at_s: 1.5, link_down: [rail1, spine0]}]",
        "workloads.0.arrivals.synthetic.duration_s=4.5",
    )
    info = runs["base"]
    events = json.loads((info["dir"] / "events.json").read_text())
    assert any(e["event"] == "reroute" for e in events["controller"])
    requests = pd.read_parquet(info["dir"] / "requests.parquet")
    t0 = events["t0_ns"]
    after = requests[requests["arrival_ns"] > t0 + 2.5e9]
    assert len(after) > 0
    assert after["ttft_ms"].notna().all(), after[["request_id", "error"]]


def test_colocated_serving_moves_no_kv_and_stalls_decode(tmp_path):
    runs = run(
        tmp_path,
        "colocated-vs-disaggregated",
        "duration_s=4",
        "workloads.0.arrivals.synthetic.n=30",
    )
    dis, col = runs["mode=disaggregated"], runs["mode=colocated"]
    kinds = (
        col["summary"]["metrics"]["flows"]["by_kind"]
        if "flows" in col["summary"]["metrics"]
        else {}
    )
    assert "kv_transfer" not in kinds and "kv_layer" not in kinds
    assert "kv_transfer" in dis["summary"]["metrics"]["flows"]["by_kind"]
    assert metric(col, "itl_ms", "p99") > metric(dis, "itl_ms", "p99")


def test_hbm_pressure_recomputes_without_a_tier_and_offloads_over_the_fabric_with_flash(tmp_path):
    runs = run(
        tmp_path,
        "kv-tiering",
        "duration_s=6",
        "workloads.0.arrivals.synthetic.n=10",
        "sweep.workloads.0.kv_tiers=[{hbm_gb: 0.6},"
        " {hbm_gb: 0.6, flash: {capacity_gb: 4000, latency_us: 100}}]",
    )
    tiers = {
        "flash" if "flash" in label else "hbm": info["summary"]["metrics"]["serving"]["kv_tiers"]
        for label, info in runs.items()
    }
    assert tiers["hbm"]["requests_recomputed"] > 0
    assert tiers["hbm"]["tier_fetch_bytes_on_wire"] == 0
    assert tiers["flash"]["evictions"] > 0 and tiers["flash"]["recomputed_tokens"] == 0
    moved = tiers["flash"]["bytes_by_tier"]["flash"]["moved"]
    assert tiers["flash"]["tier_fetch_bytes_on_wire"] == moved > 0

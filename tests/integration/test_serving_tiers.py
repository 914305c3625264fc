"""Tiered KV storage over real packets: a decode instance whose HBM holds two requests
evicts members to flash on a storage node, and that KV crosses the storage node's own
link both ways (read from the switch-side counters of that link); with HBM alone every
victim is recomputed and the storage link stays quiet."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli.main import main
from topologies import rail_optimized

pytestmark = pytest.mark.root

FABRIC = {
    "servers": 2,
    "gpus_per_server": 4,
    "spines": 1,
    "rail_gbps": 400,
    "spine_gbps": 400,
    "nvlink_gbps": 900,
    "buffer_pkts": 64,
    "storage_nodes": 1,
    "storage_attach": "spine0",
    "storage_gbps": 400,
}
# One tp-1 decode instance on gpu1_0 with 0.6 GB of HBM for KV: 4,577 tokens of Llama 3 8B,
# two requests of 2,000 + 100 tokens. 16 requests at 6/s keep about four in decode, so
# arriving KV evicts members. A 2,050-token victim is 269 MB: 11 ms out and back at
# 400 Gbit/s against a ~50 ms recompute, so the flash arm offloads every victim.
SPEC = textwrap.dedent(
    """
    name: serving-tiers-test
    seed: 3
    duration_s: 8
    scale: {bandwidth: 1.0e-4}
    fabric: {kind: rail_optimized, FABRIC}
    controller: {policy: ecmp}
    workloads:
      - kind: serving
        model: llama-3-8b
        gpu: h100
        prefill: {servers: [0], tp: 1}
        decode: {servers: [1], gpus: [0], tp: 1}
        router: least_loaded
        transfer: monolithic
        dscp: {tier_fetch: 10}
        arrivals:
          synthetic: {n: 16, rate_per_s: 6, input_tokens: 2000, output_tokens: 100}
        kv_tiers: KV_TIERS
    """
).replace("FABRIC", ", ".join(f"{k}: {v}" for k, v in FABRIC.items()))
FLASH = "{hbm_gb: 0.6, flash: {capacity_gb: 1000, latency_us: 100}}"
HBM_ONLY = "{hbm_gb: 0.6}"
# What the storage link may carry with nothing routed to it (IPv6 off, ARP static).
STRAY_BYTES = 3000


def run(tmp_path: Path, tiers: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    spec = tmp_path / "tiers.yaml"
    spec.write_text(SPEC.replace("KV_TIERS", tiers))
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out), "--quiet"]) == 0
    (summary_path,) = out.glob("*/*/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["partial"] is False, summary.get("error")
    run_dir = summary_path.parent
    return tuple(
        pd.read_parquet(run_dir / f"{name}.parquet") for name in ("requests", "flows", "links")
    )


def storage_link_bytes(links: pd.DataFrame) -> tuple[int, int]:
    """Bytes spine0 sent to and received from storage0 during the run."""
    port = rail_optimized(**FABRIC).port("spine0", "storage0")
    at = links[(links["node"] == "spine0") & (links["port"] == port)]
    assert len(at) > 1, "the sampler did not record the storage link"
    return (
        int(at["tx_bytes"].max() - at["tx_bytes"].min()),
        int(at["rx_bytes"].max() - at["rx_bytes"].min()),
    )


def test_flash_tier_fetches_cross_the_storage_nodes_link(tmp_path):
    requests, flows, links = run(tmp_path, FLASH)
    assert requests["served"].all(), requests["error"].dropna().tolist()
    victims = requests[requests["evicted"] > 0]
    assert len(victims) >= 2 and (victims["recomputed_tokens"] == 0).all()
    tier = flows[flows["kind"] == "tier_fetch"]
    assert len(tier) and tier["ok"].all() and (tier["dscp"] == 10).all()
    down, up = tier[tier["dst"] == "storage0"], tier[tier["src"] == "storage0"]
    assert set(down["src"]) == {"gpu1_0"} and set(up["dst"]) == {"gpu1_0"}
    # every offload came back (emulated bytes on the wire, real bytes in the request rows)
    assert up["bytes"].sum() == down["bytes"].sum() > 0
    assert victims["tier_fetch_bytes_flash"].sum() == up["bytes_real"].sum()
    # ... over the storage node's own link: the counters add headers and ACKs
    to_storage, from_storage = storage_link_bytes(links)
    assert to_storage >= down["bytes"].sum(), (to_storage, down["bytes"].sum())
    assert from_storage >= up["bytes"].sum(), (from_storage, up["bytes"].sum())


def test_hbm_alone_recomputes_and_leaves_the_storage_link_quiet(tmp_path):
    requests, flows, links = run(tmp_path, HBM_ONLY)
    assert requests["served"].all(), requests["error"].dropna().tolist()
    victims = requests[requests["evicted"] > 0]
    assert len(victims) >= 2 and (victims["recomputed_tokens"] > 0).all()
    assert "tier_fetch" not in set(flows["kind"])
    to_storage, from_storage = storage_link_bytes(links)
    assert to_storage <= STRAY_BYTES and from_storage <= STRAY_BYTES

"""Agentic sessions over real packets: each later turn arrives tool_ms after the
previous turn's last token, its prompt's blocks are found in the prefix cache (mostly on
the server that served the session: kv_affinity), and so its TTFT is shorter than the
same sessions' without a cache."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest

from .runs import run_spec, summary, tables

pytestmark = pytest.mark.root

SPEC = textwrap.dedent(
    """
    name: sessions-test
    seed: 5
    duration_s: 10
    scale: {bandwidth: 1.0e-4}
    fabric: {kind: rail_optimized, servers: 4, gpus_per_server: 4, spines: 2,
             rail_gbps: 400, spine_gbps: 400, nvlink_gbps: 3600, buffer_pkts: 64}
    controller: {policy: ecmp}
    workloads:
      - kind: serving
        model: llama-3-70b
        gpu: h100
        prefill: {servers: [0, 1], tp: 4}
        decode: {servers: [2, 3], tp: 4}
        router: kv_affinity
        transfer: monolithic
        prefix_cache: {enabled: true, capacity_blocks: 4096}
        arrivals:
          sessions: {n: 3, rate_per_s: 1, turns: 4, context_tokens: 4000,
                     growth_tokens: 300, output_tokens: 16, tool_ms: 200}
    """
)


def run(tmp_path: Path, name: str, *sets: str) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    run_dir = run_spec(tmp_path, name, SPEC, *sets)
    return (summary(run_dir), *tables(run_dir, "requests", "tokens"))


def test_later_turns_of_a_session_hit_the_cache(tmp_path):
    summary, requests, tokens = run(tmp_path, "cached")
    assert len(requests) == 12 and requests["served"].all(), requests["error"].dropna().tolist()
    later = requests[requests["turn"] > 0]
    assert (later["cached_tokens"] > 0).all()
    # kv_affinity keeps a session on its server unless load outweighs the hit: most later
    # turns hit locally (a live run once sent one of nine to the other prefill server)
    assert (later["remote_hit_blocks"] == 0).mean() >= 0.75, later["remote_hit_blocks"].tolist()
    assert (requests.loc[requests["turn"] == 0, "cached_tokens"] == 0).all()
    # the closed loop: a turn arrives tool_ms after its predecessor's last token
    last = tokens.groupby("request_id")["t_ns"].max()
    for _, turns in requests.sort_values("turn").groupby("session_id"):
        ids, arrivals = turns["request_id"].tolist(), turns["arrival_ns"].tolist()
        for before, t in zip(ids, arrivals[1:], strict=False):
            assert t >= last[before] + 200_000_000
    sessions = summary["metrics"]["serving"]["sessions"]
    assert sessions["sessions"] == sessions["completed"] == 3
    assert sessions["hit_rate"]["later_turns"] > 0.8

    cold, cold_requests, _ = run(tmp_path, "cold", "workloads.0.prefix_cache.enabled=false")
    assert cold_requests["served"].all() and (cold_requests["cached_tokens"] == 0).all()
    cold_later = cold["metrics"]["serving"]["sessions"]["ttft_ms"]["later_turns"]["p50"]
    assert sessions["ttft_ms"]["later_turns"]["p50"] < 0.6 * cold_later, (sessions, cold_later)

"""The numbers users quote, over real packets: per-message-kind DSCP marks survive the
controller's trust boundary on the wire (the per-token collective in its own class, the
KV in another), and a layer-pipelined run with a shared prefix reports the hidden
fraction and the prefix-cache hit rates its own tables give."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.cli.main import main
from experiments.spec.load import find_bundled

pytestmark = pytest.mark.root

PLUGIN = Path(__file__).resolve().parents[2] / "traffic" / "wireshark" / "kvfabric.lua"
DECODE_HOST = "gpu2_0"  # serving-basic: decode instances on servers 2 and 3
GPUS = [f"gpu{s}_{g}" for s in range(4) for g in range(4)]
# 8 prompts of 4 blocks, the first 3 a prefix they share; round robin over two prefill
# servers, so some hits are fetched from the other server
ARRIVALS = {
    "synthetic": {
        "n": 8,
        "rate_per_s": 2,
        "input_tokens": 2048,
        "output_tokens": 16,
        "shared_prefix_blocks": 3,
        "n_prefixes": 1,
    }
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    spec = yaml.safe_load(find_bundled("serving-basic").read_text())
    spec["duration_s"] = 8
    spec["controller"] = {
        "policy": "ecmp",
        "tenants": {"serve": GPUS},
        "qos": {
            "classes": [
                {"name": "token", "dscp": 46, "priority": 0},
                {"name": "kv", "dscp": 26, "rate_share": 0.6},
                {"name": "bulk", "dscp": 0, "rate_share": 0.3},
            ],
            "tenant_class": {"serve": ["kv", "token", "bulk"]},
        },
    }
    marks = {"kv_transfer": "kv", "collective": "token", "cache_fetch": "kv"}
    serving = spec["workloads"][0]
    serving |= {"tenant": "serve", "router": "round_robin", "arrivals": ARRIVALS, "dscp": marks}
    tmp = tmp_path_factory.mktemp("numbers")
    path = tmp / "numbers.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    args = ["run", str(path), "--out", str(tmp), "--quiet", "--force", "--capture", DECODE_HOST]
    assert main(args) == 0
    (summary,) = tmp.glob("*/*/summary.json")
    return summary.parent


def test_each_message_kind_reaches_the_decode_host_with_its_own_mark(run_dir):
    tshark = shutil.which("tshark")
    assert tshark, "tshark is installed by make setup"
    pcap = run_dir / "captures" / f"{DECODE_HOST}.pcap"
    out = subprocess.run(
        [
            tshark,
            "-X",
            f"lua_script:{PLUGIN}",
            "-r",
            str(pcap),
            "-Y",
            "kvfabric",
            "-T",
            "fields",
            "-e",
            "ip.dsfield",
            "-e",
            "kvfabric.flow_id",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen: dict[int, set[int]] = {}
    for line in out.splitlines():
        tos, ids = line.split("\t")
        for fid in ids.split(","):
            seen.setdefault(int(fid), set()).add(int(tos, 16) >> 2)  # DSCP: TOS bits 7-2
    flows = pd.read_parquet(run_dir / "flows.parquet")
    into = flows[(flows["dst"] == DECODE_HOST) & flows["ok"]]
    kinds = into.groupby("kind")["dscp"].unique().map(list).to_dict()
    assert kinds.get("collective") == [46] and kinds.get("kv_layer") == [26], kinds
    wire = {k: set() for k in kinds}
    for fid, kind in zip(into["flow_id"], into["kind"], strict=True):
        wire[kind] |= seen.get(int(fid), set())
    # what the sender marked is what crossed the switches: the trust boundary kept it
    assert wire["collective"] == {46} and wire["kv_layer"] == {26}, wire


def test_the_summary_quotes_the_hidden_fraction_and_hit_rates_of_its_tables(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    serving = summary["metrics"]["serving"]
    req = pd.read_parquet(run_dir / "requests.parquet")
    assert req["served"].all(), req["error"].dropna().tolist()
    busy, exposed = req["kv_busy_ms"], req["kv_exposed_ms"]
    hidden = serving["pipelining"]["hidden_fraction"]
    assert hidden == pytest.approx(1 - exposed.sum() / busy.sum())
    assert 0.5 < hidden <= 1, "most of a pipelined transfer hides behind prefill"
    assert req["kv_hidden_fraction"].between(0, 1).all()
    cache = serving["prefix_cache"]
    # an infinite cache: requests 1..7 find the 3 shared blocks of their 4
    assert cache["ideal_hit_rate"] == pytest.approx(7 * 3 * 512 / (8 * 2048))
    assert 0 < cache["hit_rate"] <= cache["ideal_hit_rate"]
    assert cache["remote_hit_rate"] > 0
    assert cache["local_hit_rate"] + cache["remote_hit_rate"] == pytest.approx(cache["hit_rate"])
    report = (run_dir / "report.md").read_text()
    assert "prefix-cache hit rate, infinite cache" in report
    assert "KV transfer hidden behind prefill" in report

"""``kvfabric run --capture``: a serving run's capture holds the KV messages its flows
table lists, decoded by tshark with the Lua dissector."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli.main import main
from experiments.spec.load import find_bundled

pytestmark = pytest.mark.root

PLUGIN = Path(__file__).resolve().parents[2] / "traffic" / "wireshark" / "kvfabric.lua"


DECODE_HOST = "gpu2_0"  # serving-basic: decode instances on servers 2 and 3


def test_a_serving_capture_decodes_to_the_messages_the_flows_table_lists(tmp_path):
    tshark = shutil.which("tshark")
    assert tshark, "tshark is installed by make setup"
    args = [
        "run",
        str(find_bundled("serving-basic")),
        "--out",
        str(tmp_path),
        "--quiet",
        "--set",
        "duration_s=6",
        "--set",
        "workloads.0.arrivals.limit=6",
        "--force",
        "--capture",
        DECODE_HOST,
        "--capture",
        "rail0:spine0",
    ]
    assert main(args) == 0
    (run,) = [p.parent for p in tmp_path.glob("*/*/summary.json")]
    events = json.loads((run / "events.json").read_text())
    caps = {c["where"]: c for c in events["captures"]}
    assert DECODE_HOST in caps and len(caps) == 2, caps
    assert all(not c["error"] and c["bytes"] > 0 for c in caps.values()), caps
    assert f"captures/{DECODE_HOST}.pcap" in (run / "report.md").read_text()
    pcap = run / "captures" / f"{DECODE_HOST}.pcap"
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
            "kvfabric.flow_id",
            "-e",
            "kvfabric.length",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen = {}
    for line in out.splitlines():
        ids, lengths = line.split("\t")
        for fid, length in zip(ids.split(","), lengths.split(","), strict=True):
            seen[int(fid)] = int(length)
    flows = pd.read_parquet(run / "flows.parquet")
    into = flows[(flows["dst"] == DECODE_HOST) & flows["ok"]]
    assert (into["kind"] == "kv_layer").any(), "the decode host receives KV layers"
    missing = set(into["flow_id"]) - set(seen)
    dropped = caps[DECODE_HOST]["dropped"]
    assert dropped is not None, "tcpdump reports what its buffer dropped"
    # a packet tcpdump's buffer lost (a busy machine) is said; nothing else may be missing
    assert not missing or dropped > 0, f"{len(missing)} of {len(into)} messages not captured"
    assert len(missing) < len(into) / 2, f"{len(missing)} of {len(into)} messages not captured"
    sizes = into.set_index("flow_id")["bytes"]
    wrong = [
        f for f in sizes.index if f in seen and seen[f] + 44 != sizes[f] and seen[f] != sizes[f]
    ]
    assert not wrong, f"decoded lengths differ from flows.parquet for flows {wrong[:5]}"

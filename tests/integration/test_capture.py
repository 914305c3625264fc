"""``kvfabric run --capture``: a real run's captures hold the KV messages its flows table
lists, decoded by tshark with the Lua dissector, and link failures are timed from the
fault."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli import main
from experiments.spec import find_bundled

pytestmark = pytest.mark.root

PLUGIN = Path(__file__).resolve().parents[2] / "traffic" / "wireshark" / "kvfabric.lua"


def test_a_host_capture_decodes_to_the_messages_the_flows_table_lists(tmp_path):
    tshark = shutil.which("tshark")
    assert tshark, "tshark is installed by make setup"
    args = ["run", str(find_bundled("incast-basic")), "--out", str(tmp_path), "--quiet",
            "--set", "duration_s=4", "--set", "workloads.0.rounds=2",
            "--set", "sweep={}", "--capture", "h0", "--capture", "leaf0:h0"]  # fmt: skip
    assert main(args) == 0
    (run,) = [p.parent for p in tmp_path.glob("*/*/summary.json")]
    events = json.loads((run / "events.json").read_text())
    caps = {c["where"]: c for c in events["captures"]}
    assert set(caps) == {"h0", "leaf0-1"} and all(not c["error"] for c in caps.values())
    assert "captures/h0.pcap" in (run / "report.md").read_text()
    out = subprocess.run([tshark, "-X", f"lua_script:{PLUGIN}", "-r", str(run / "captures/h0.pcap"),
                          "-Y", "kvfabric", "-T", "fields", "-e", "kvfabric.flow_id",
                          "-e", "kvfabric.length"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    seen = {}
    for line in out.splitlines():
        ids, lengths = line.split("\t")
        for fid, length in zip(ids.split(","), lengths.split(","), strict=True):
            seen[int(fid)] = int(length)
    flows = pd.read_parquet(run / "flows.parquet")
    into_h0 = flows[(flows["dst"] == "h0") & flows["ok"]]
    assert len(into_h0) > 0
    missing = set(into_h0["flow_id"]) - set(seen)
    assert not missing, f"{len(missing)} of {len(into_h0)} messages into h0 not in the capture"
    sizes = into_h0.set_index("flow_id")["bytes"]
    wrong = [f for f in sizes.index if seen[f] + 44 != sizes[f] and seen[f] != sizes[f]]
    assert not wrong, f"decoded lengths differ from flows.parquet for flows {wrong[:5]}"

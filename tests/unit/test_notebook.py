"""examples/analysis.ipynb runs from top to bottom on the committed reference runs, and
shows what it promises: a TTFT breakdown per request in which the slow spine's requests
spend far longer in KV transfer than the fast spine's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "analysis.ipynb"
# Appended by the test: the notebook's own result table, as JSON.
PROBE = "import json; print(json.dumps(summary.drop(columns=summary.columns[0]).to_dict('index')))"


def test_notebook_executes_and_draws_the_breakdown(monkeypatch):
    # the kernel is a separate process: it must import this checkout's packages
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    resources = {"metadata": {"path": str(NOTEBOOK.parent)}}
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", resources=resources)
    client.execute()  # raises CellExecutionError, naming the cell, on any failure

    outputs = [o for cell in nb.cells[:-1] if cell.cell_type == "code" for o in cell.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no figure drawn"
    means = json.loads(nb.cells[-1].outputs[0]["text"])
    slow = next(v for k, v in means.items() if k.startswith("spine_gbps=10,"))
    fast = next(v for k, v in means.items() if k.startswith("spine_gbps=400,"))
    assert slow["prefill"] == fast["prefill"] > 0  # same prompts, same compute model
    assert slow["kv_transfer"] > 10 * fast["kv_transfer"]
    for row in (slow, fast):  # the parts add up to the measured TTFT
        parts = row["queueing"] + row["prefill"] + row["kv_transfer"] + row["decode_start"]
        assert abs(parts - row["ttft_ms"]) < 0.05

"""``kvfabric run --live`` on the flagship, shortened, under a pseudo-terminal: the screen
shows the hottest queues (named by their neighbour) and a TTFT so far while the run goes,
and the run writes what the same run without ``--live`` writes (issue 31).

The run is a subprocess whose standard streams are the slave side of a pty (stdlib
``pty.openpty``, 50 rows × 160 columns), so rich sees a terminal as a user's would; the
test reads everything drawn on the master side and strips the escape sequences.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli.main import main

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
FLAGSHIP = "topology-aware-placement"
SHORT = (  # one sweep point, a few seconds of requests: what test_experiments runs, halved
    "duration_s=4",
    "workloads.0.arrivals.synthetic.n=30",
    "sweep.workloads.0.router=[topology_aware]",
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r")


def run_in_pty(args: list[str], timeout_s: float = 600.0) -> tuple[int, str]:
    """Run ``python -m experiments.cli.main args`` on a pseudo-terminal; (exit code,
    everything it drew, escape sequences removed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", PYTHONIOENCODING="utf-8")
    for name in ("NO_COLOR", "COLUMNS", "LINES"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.cli.main", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every slave end is closed, the run is over
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        os.close(master)
    return code, ANSI.sub("", out.decode("utf-8", errors="replace"))


def the_run(out: Path) -> Path:
    (summary,) = out.glob(f"{FLAGSHIP}/2*/summary.json")
    return summary.parent


def shape(run_dir: Path) -> dict:
    """What a reader of a run relies on: the tables and their columns, the summary's
    keys, the metrics and fidelity checks it has, the requests it judged."""
    summary = json.loads((run_dir / "summary.json").read_text())
    tables = {p.stem: sorted(pd.read_parquet(p).columns) for p in sorted(run_dir.glob("*.parquet"))}
    return {
        "tables": tables,
        "summary": sorted(summary),
        "metrics": sorted(summary["metrics"]),
        "checks": sorted(summary["fidelity"]["checks"]),
        "requests": len(pd.read_parquet(run_dir / "requests.parquet")),
        "partial": summary["partial"],
    }


def test_the_flagship_runs_live_and_writes_what_it_writes_without(tmp_path):
    live_out, plain_out = tmp_path / "live", tmp_path / "plain"
    sets = [a for s in SHORT for a in ("--set", s)]
    code, screen = run_in_pty(["run", FLAGSHIP, "--live", "--out", str(live_out), *sets])
    assert code == 0, screen[-3000:]
    assert "Hottest queues" in screen, screen[-3000:]
    assert "Fidelity as it stands" in screen
    named = [line for line in screen.splitlines() if re.search(r"\w+→\w+\s+\d+\s+\d+", line)]
    assert named, "no queue row with a port named by its neighbour on the screen"
    ttft = [
        line for line in screen.splitlines() if re.search(r"TTFT.*p50 [\d.]+ ms.*n=[1-9]", line)
    ]
    assert ttft, "no TTFT so far on the screen: " + screen[-3000:]
    assert "cannot be drawn" not in screen  # it did see a terminal

    assert main(["run", FLAGSHIP, "--quiet", "--out", str(plain_out), *sets]) == 0
    live, plain = shape(the_run(live_out)), shape(the_run(plain_out))
    assert live["partial"] is False
    assert live == plain


def test_without_a_terminal_live_says_so_and_runs_with_the_progress_bar(tmp_path):
    sets = [a for s in SHORT for a in ("--set", s)]
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.cli.main", "run", FLAGSHIP, "--live"]
        + ["--out", str(tmp_path), *sets],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "not a terminal" in proc.stderr
    assert "Hottest queues" not in proc.stdout
    assert json.loads((the_run(tmp_path) / "summary.json").read_text())["partial"] is False

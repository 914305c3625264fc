"""Chaos: the same short run, interrupted 20 times with SIGINT, SIGTERM or SIGKILL at a
random moment (build, traffic or teardown). After each, nothing of the run remains: no
bridge, interface, process or lock, at once after SIGINT/SIGTERM and once ``kvfabric
clean`` has run after SIGKILL; and what it wrote reads back, marked partial."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from experiments.orchestration.runtime import RunLock
from experiments.output.results import load_run
from topologies.cleanup import bridges, interfaces, records, stale_scratch
from topologies.naming import owned

pytestmark = pytest.mark.root

SPEC = textwrap.dedent(
    """
    name: chaos
    duration_s: 5
    fabric: {kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 2}
    controller: {policy: ecmp}
    workloads:
      - {kind: probe, pairs: [[h0, h2]], rate_hz: 50, size_bytes: 200}
      - {kind: background, load: 0.2}
    """
)
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
INTERRUPTIONS = 20


def _kvfabric(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.cli.main", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(" ".join(p.cmdline())[:120])
        except psutil.Error:
            continue
    return out


def _foreign() -> set[str]:
    """Prefixes of runs another live process owns (another test session's): not ours."""
    return {r.prefix for r in records() if r.owner_pid != os.getpid() and r.owner_alive()}


def _leftovers() -> list[str]:
    """kvfabric's bridges and interfaces no other live process owns, and scratch
    folders no live run owns."""
    foreign = _foreign()
    names = [n for n in bridges() + interfaces() if owned(n) and owned(n) not in foreign]
    return names + [str(p) for p in stale_scratch()]


def _whose(names: list[str]) -> str:
    """Who recorded each leftover prefix, to name the test that leaked it."""
    recs = {r.prefix: r for r in records()}
    out = []
    for prefix in sorted({owned(n) for n in names if owned(n)}):
        r = recs.get(prefix)
        if r is None:
            out.append(f"{prefix}: no run record")
            continue
        try:
            who = " ".join(psutil.Process(r.owner_pid).cmdline())[:160]
        except psutil.Error:
            who = "gone"
        out.append(f"{prefix}: owner pid {r.owner_pid} alive={r.owner_alive()} ({who})")
    return "; ".join(out)


def test_twenty_interruptions_leave_nothing_behind(tmp_path):
    spec = tmp_path / "chaos.yaml"
    spec.write_text(SPEC)
    rng = random.Random(20)
    start = _leftovers()
    assert not start, f"the machine must start clean: {start[:8]}; {_whose(start)}"
    for i in range(INTERRUPTIONS):
        sig = SIGNALS[i % len(SIGNALS)]
        delay = rng.uniform(0.3, 11.0)  # build ~2-3 s, 5 s of traffic, drain and teardown
        out = tmp_path / f"run{i}"
        proc = _kvfabric("run", str(spec), "--out", str(out), "--quiet")
        seen: list[psutil.Process] = []
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and proc.poll() is None:
            seen += [p for p in _descendants(proc.pid) if p not in seen]
            time.sleep(0.1)
        what = f"interruption {i}: {sig.name} after {delay:.1f} s"
        if proc.poll() is None:
            seen += [p for p in _descendants(proc.pid) if p not in seen]
            proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"{what}: the runner did not exit")
        if sig == signal.SIGKILL:
            clean = subprocess.run(
                [sys.executable, "-m", "experiments.cli.main", "clean"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert clean.returncode == 0, f"{what}: clean failed: {clean.stderr}"
        elif proc.returncode == -sig:  # importing (1-4 s here) or finalizing: no handler
            unfinished = [
                p
                for p in out.glob("chaos/*/summary.json")
                if "ended" not in json.loads(p.read_text())
            ]
            assert not unfinished, f"{what}: died of the signal in the middle of a run"
        else:
            assert proc.returncode in (0, 1), f"{what}: exit {proc.returncode}: {err}"
        time.sleep(0.5)  # processes signalled at their parent's death are reaped
        assert not _leftovers(), f"{what}: left {_leftovers()}"
        assert not _alive(seen), f"{what}: processes left: {_alive(seen)}"
        with RunLock("chaos-check"):  # the run's lock is free again
            pass
        for summary in out.glob("chaos/*/summary.json"):
            doc = json.loads(summary.read_text())
            if doc.get("partial") is False:  # the run ended before the signal
                continue
            assert doc["partial"] is True, f"{what}: {summary}"
            run = load_run(Path(summary).parent)  # what it wrote reads back
            assert run.summary["experiment"] == "chaos"

"""The processes a run starts and records: a command run without raising, a helper
process that dies with its parent, and a recorded process told apart from a reused
pid (pid *and* start time). ``STATE_DIR`` is where runs (``cleanup``) and local
clusters (``cluster.local``) record what they own."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from pathlib import Path

import psutil

STATE_DIR = Path(os.environ.get("KVFABRIC_STATE_DIR", "/run/kvfabric"))
PR_SET_PDEATHSIG = 1


def run(args: list[str], timeout: float = 20, **kw) -> subprocess.CompletedProcess[str]:
    """Run a command, capture text output (bytes that are not UTF-8 replaced), never
    raise on non-zero exit."""
    return subprocess.run(
        args, capture_output=True, text=True, errors="replace", timeout=timeout, **kw
    )


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent (the thread that
    started it) exits: a helper process never outlives a runner killed with SIGKILL.
    Call it in the child, or pass it as ``preexec_fn``; it survives ``exec``."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")


def alive(pid: int, started: float) -> bool:
    """Is process ``pid`` still the one that started at ``started`` (psutil's
    ``create_time``), not another that reuses its pid?"""
    try:
        return abs(psutil.Process(pid).create_time() - started) < 0.01
    except psutil.Error:
        return False

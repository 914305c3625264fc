"""The effects of ``kvfabric doctor --cluster``: probe every server at once (a
thread each) and gather what ``topologies.cluster.doctor.diagnose`` judges.

One ssh session runs ``probe_script``; two more measure the monotonic and the
realtime clock offsets (``topologies.cluster.clock``).
"""

from __future__ import annotations

import re
import socket
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from ..processes import run
from .clock import ClockError, measure_offset
from .doctor import Check, ServerProbe, diagnose, parse_sections, probe_script
from .ssh import Server

PROGRESS_AFTER_S = 1.5
PROBE_TIMEOUT_S = 60.0


def code_location() -> tuple[str, str]:
    """This interpreter and the checkout it runs: what remote agents will start from."""
    import topologies

    return sys.executable, str(Path(topologies.__file__).resolve().parents[1])


def coordinator_address(server: Server) -> str:
    """This machine's source address towards ``server`` (its route's ``src``)."""
    if server.is_local:
        return "127.0.0.1"
    try:
        address = socket.getaddrinfo(server.host, 22, socket.AF_INET)[0][4][0]
    except OSError:
        return server.host
    m = re.search(r"\bsrc (\S+)", run(["ip", "-o", "route", "get", address]).stdout)
    return m.group(1) if m else address


def probe(server: Server, interpreter: str, repo: str) -> ServerProbe:
    coordinator = coordinator_address(server)
    script = probe_script(coordinator, interpreter, repo)
    proc = server.run(["sh", "-c", script], timeout=PROBE_TIMEOUT_S)
    found = ServerProbe(
        str(server), coordinator, proc.returncode, proc.stderr, parse_sections(proc.stdout)
    )
    if found.sections:
        for clock in ("monotonic", "realtime"):
            try:
                found.clocks[clock] = measure_offset(server, clock=clock)
            except ClockError as exc:
                found.clocks[clock] = str(exc)
    return found


def check_cluster(servers: Sequence[Server], progress: Callable[[str], None]) -> list[Check]:
    """Every server probed in parallel, diagnosed in the order given; ``progress``
    hears about the servers still pending once it takes longer than a moment."""
    interpreter, repo = code_location()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        futures = {pool.submit(probe, s, interpreter, repo): s for s in servers}
        pending, told = set(futures), False
        while pending:
            done, pending = wait(pending, timeout=PROGRESS_AFTER_S, return_when=FIRST_COMPLETED)
            if not told and pending:
                told = True
                progress(f"probing {len(servers)} servers over ssh ...")
            if told:
                for f in done:
                    progress(f"  {futures[f]}: probed in {time.monotonic() - started:.1f} s")
        probes = {futures[f]: f.result() for f in futures}
    return [row for s in servers for row in diagnose(probes[s], interpreter, repo)]

"""Packet captures of a run: tcpdump on chosen ports, inside the right namespace.

A spec's ``capture:`` section (or ``kvfabric run --capture WHERE``, repeatable) names
where to listen: a host (``gpu0_0``: all its NICs, ``tcpdump -i any`` in its namespace)
or a switch port (``leaf0:3`` by number, ``leaf0:spine1`` by the neighbour it faces: in the root
namespace, where the switch ports live). Each becomes ``captures/<where>.pcap`` in the
run directory, cut at ``snaplen`` bytes per packet (default whole packets: on a
persistent connection a message's header may start anywhere in a segment, and the
dissector needs the bytes to find it), bounded at ``max_mb`` (tcpdump's ``-C`` with a
ring of one file: a long run keeps its latest packets) and taken over ``window_s`` of
the traffic if given. Read them with Wireshark and the KV dissector
(``traffic/wireshark/kvfabric.lua``).

Where ``where`` points is the spec room's (``experiments.spec.capture.targets``, pure);
``Captures`` owns its tcpdump processes and stops them (SIGINT, so
each flushes its file) on every way out.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from experiments.spec.capture import Target
from topologies.processes import die_with_parent

SNAPLEN, MAX_MB = 65535, 20
DRAIN_S = 0.5  # before stopping tcpdump: it reads what its buffer still holds
CAPTURE_BUFFER_KIB = 16384  # tcpdump's kernel buffer (default 2 MiB): a busy run overflows it


def kernel_drops(tcpdump_stderr: str) -> int | None:
    """Packets tcpdump's kernel buffer dropped (its "N packets dropped by kernel")."""
    for line in tcpdump_stderr.splitlines():
        words = line.split()
        if len(words) >= 5 and words[1:5] == ["packets", "dropped", "by", "kernel"]:
            return int(words[0])
    return None


class Captures:
    """tcpdump on each target of a running ``FabricNetwork``, over ``window_s``
    (``(start, end)`` from the traffic's t0; None: from ``start()`` until ``stop()``)."""

    def __init__(
        self,
        net: Any,
        out_dir: Path,
        where: list[Target],
        snaplen: int = SNAPLEN,
        max_mb: float = MAX_MB,
        window_s: tuple[float, float] | None = None,
    ) -> None:
        self.net, self.out_dir, self.where = net, Path(out_dir), where
        self.snaplen, self.max_mb, self.window_s = snaplen, max_mb, window_s
        self.procs: dict[str, subprocess.Popen] = {}
        self.errors: dict[str, str] = {}
        self.kernel_drops: dict[str, int] = {}
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, t0_ns: int | None = None) -> None:
        """Without a window: capture from now on (call it before the agents connect, so
        every TCP stream is seen from its first byte and the dissector finds every
        header). With one: from ``t0_ns + start`` to ``t0_ns + end``."""
        if not self.where:
            return
        if self.window_s is None:
            self._open()
            self._wait_listening()
            return
        assert t0_ns is not None, "a windowed capture needs the traffic's t0"
        self._thread = threading.Thread(target=self._windowed, args=(t0_ns,), daemon=True)
        self._thread.start()

    def _windowed(self, t0_ns: int) -> None:
        start, end = self.window_s  # type: ignore[misc]
        if self._cancel.wait(max(0.0, (t0_ns + start * 1e9 - time.monotonic_ns()) / 1e9)):
            return
        self._open()
        if not self._cancel.wait(max(0.0, (t0_ns + end * 1e9 - time.monotonic_ns()) / 1e9)):
            self._close()

    def _open(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for t in self.where:
                # a host on all its NICs (a rail-optimized GPU has a rail and an NVLink one)
                dev = "any" if t.is_host else self.net.intf(t.node, t.port)
                path = self.out_dir / f"{t.name}.pcap"
                # --immediate-mode: libpcap's TPACKET_V3 ring otherwise hands packets over
                # a block at a time, a block on a quiet port only after its 1 s timeout,
                # and SIGINT discards the block not yet handed over (the run's last second)
                cmd = [
                    "tcpdump",
                    "-i",
                    dev,
                    "--immediate-mode",
                    "-s",
                    str(self.snaplen),
                    "-U",
                    "-n",
                    "-q",
                    "-w",
                    str(path),
                    "-C",
                    f"{self.max_mb:g}",
                    "-W",
                    "1",
                    "-Z",
                    "root",
                    "-B",
                    str(CAPTURE_BUFFER_KIB),
                ]
                kw = {
                    "stdout": subprocess.DEVNULL,
                    "stderr": subprocess.PIPE,
                    "preexec_fn": die_with_parent,
                }
                try:
                    self.procs[t.name] = (
                        self.net.mn(t.node).popen(cmd, **kw)
                        if t.is_host
                        else subprocess.Popen(cmd, **kw)
                    )
                except OSError as exc:
                    self.errors[t.name] = str(exc)

    def _wait_listening(self, timeout_s: float = 3.0) -> None:
        """tcpdump creates its file once it is capturing."""
        deadline = time.monotonic() + timeout_s
        for t in self.where:
            path = self.out_dir / f"{t.name}.pcap"
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.02)

    def _close(self) -> None:
        with self._lock:
            if self.procs:
                # tcpdump stops reading at SIGINT: what its buffer still holds is lost
                time.sleep(DRAIN_S)
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)  # tcpdump flushes and exits
            for name, proc in self.procs.items():
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                self.kernel_drops[name] = kernel_drops(err)
                if proc.returncode not in (0, -signal.SIGINT) and name not in self.errors:
                    self.errors[name] = (
                        err.strip().splitlines()[-1]
                        if err.strip()
                        else (f"tcpdump exited {proc.returncode}")
                    )
                if proc.stderr:
                    with contextlib.suppress(OSError):
                        proc.stderr.close()
            self.procs = {}

    def stop(self) -> list[dict[str, Any]]:
        """Stop every capture; what each wrote: ``{where, file, bytes, dropped, error}``
        (``dropped``: packets tcpdump's buffer lost, None if it did not say)."""
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._close()
        out = []
        for t in self.where:
            path = self.out_dir / f"{t.name}.pcap"
            size = path.stat().st_size if path.exists() else 0
            out.append(
                {
                    "where": t.name,
                    "file": f"captures/{path.name}",
                    "bytes": size,
                    "dropped": self.kernel_drops.get(t.name),
                    "error": self.errors.get(t.name, ""),
                }
            )
        return out

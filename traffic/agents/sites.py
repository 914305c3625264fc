"""Workers started elsewhere: through a server's command prefix
(``topologies.cluster.ssh.Server.command``: ssh for another machine, nothing for this
one), controlled over the authenticated TCP channel (``channel``, ``auth``).

A ``WorkerSite`` names the server and the cluster address of that server the
worker's control channel binds. The worker's stdin carries the run's secret and then
stays open as its lifeline: closing it, or the ssh process ending however it ends,
ends the worker (``channel.end_on_stdin_eof``); between the two, one line names its
hosts (``--hosts -``). Its stdout announces the port; its
stderr (which ssh forwards) goes to the worker's log on this machine. The local
process (ssh, or the worker itself) dies with the launcher (``PR_SET_PDEATHSIG``).

The worker's paths (interpreter, the repository, its hosts file) are those of this
machine unless the site names others.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Protocol

from topologies.processes import die_with_parent

from .channel import parse_bind, read_announcement, secret_line

ANNOUNCE_MAX = 4096  # an announcement is one short line; more is not a worker talking


class CommandPrefix(Protocol):
    def command(self, args: Sequence[str]) -> list[str]: ...


@dataclass(frozen=True)
class WorkerSite:
    """Where a worker runs: ``server.command`` wraps its argv, and its control channel
    binds ``address`` (an IP of that server on the cluster's network, never 0.0.0.0)."""

    server: CommandPrefix
    address: str
    python: str | None = None  # None: this interpreter's path
    root: str | None = None  # the repository there; None: this one's path
    clock_offset_ns: int = 0  # that machine's monotonic clock minus this one's (timebase)
    folder: str | None = None  # where its workers spill their records; None: no spilling

    def __post_init__(self) -> None:
        parse_bind(self.bind)  # refuses a name, 0.0.0.0 and ::

    @property
    def bind(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:0"

    def argv(self, worker_args: Sequence[str], root: str) -> list[str]:
        """The command that runs ``python -m traffic.agents.worker worker_args`` there,
        in TCP control mode, its hosts on stdin after the secret, on the coordinator's
        clock (``env``: ssh passes no environment)."""
        return self.server.command(
            [
                "env",
                f"PYTHONPATH={self.root or root}",
                self.python or sys.executable,
                "-m",
                "traffic.agents.worker",
                *worker_args,
                "--hosts",
                "-",
                "--control-tcp",
                self.bind,
                "--clock-offset-ns",
                str(int(self.clock_offset_ns)),
            ]
        )

    def spill_path(self, name: str) -> str | None:
        """Where worker ``name`` spills its records there, or None (no folder)."""
        return f"{self.folder}/{name}.spill.jsonl" if self.folder else None


class SiteProcess:
    """A worker started through a site's command, until it announced its address."""

    def __init__(
        self, argv: list[str], log_file: IO[bytes], secret: bytes, hosts: list[dict]
    ) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            preexec_fn=die_with_parent,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._out = b""
        os.set_blocking(self.proc.stdout.fileno(), False)
        try:
            self.proc.stdin.write(secret_line(secret) + json.dumps(hosts).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # it exited already: the launcher reports its code and log
            pass

    def address(self) -> tuple[str, int] | None:
        """The control address once announced, else None; raises ValueError on a line
        that is not an announcement."""
        assert self.proc.stdout is not None
        with contextlib.suppress(BlockingIOError):
            self._out += os.read(self.proc.stdout.fileno(), ANNOUNCE_MAX)
        if b"\n" not in self._out:
            if len(self._out) >= ANNOUNCE_MAX:
                raise ValueError(f"no announcement in {self._out[:80]!r}...")
            return None
        line = self._out.split(b"\n", 1)[0]
        try:
            return read_announcement(line)
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"not an announcement: {line[:120]!r}") from None

    def close_pipes(self) -> None:
        """Close stdin (the worker's lifeline: it ends) and stdout."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

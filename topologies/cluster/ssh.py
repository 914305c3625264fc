"""A server of a cluster and how to reach it: ``user@host`` over ssh without a
password (BatchMode), with the local cluster's own client configuration when the
address is one of its servers (``topologies.cluster.local.ssh_config_for``).

``localhost`` (and ``127.0.0.1``) is this machine: its commands run here, not
through ssh.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LOCAL_NAMES = ("localhost", "127.0.0.1")
USER_PATTERN = r"[a-z_][a-z0-9_.-]*"  # a login name
HOST_PATTERN = r"[A-Za-z0-9_.:-]+"  # a host name, IPv4 or IPv6 address
_SERVER_RE = re.compile(rf"^(?:(?P<user>{USER_PATTERN})@)?(?P<host>{HOST_PATTERN})$")


class ServerError(ValueError):
    """A server argument that is not ``[user@]host``."""


@dataclass(frozen=True)
class Server:
    host: str
    user: str = "root"
    ssh_config: Path | None = None  # ``ssh -F``; None: the local cluster's, or ssh's own

    @property
    def is_local(self) -> bool:
        return self.host in LOCAL_NAMES

    @property
    def dest(self) -> str:
        return f"{self.user}@{self.host}"

    def __str__(self) -> str:
        return "localhost" if self.is_local else self.dest

    def ssh_options(self) -> list[str]:
        """``ssh`` and its options, without the destination."""
        config = self.ssh_config
        if config is None:
            from .local import ssh_config_for

            config = ssh_config_for(self.host)
        opts = ["-F", str(config)] if config else []
        # a server that stops answering ends its connections within ~6 s, so nothing
        # waits on it forever (teardown goes on without it)
        alive = ["-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3"]
        return ["ssh", *opts, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", *alive]

    def ssh_args(self) -> list[str]:
        """``ssh`` and its options up to and including the destination."""
        return [*self.ssh_options(), self.dest]

    def command(self, args: Sequence[str] | str) -> list[str]:
        """The argv that runs ``args`` on this server (a shell line if a string)."""
        if self.is_local:
            return ["sh", "-c", args] if isinstance(args, str) else list(args)
        line = args if isinstance(args, str) else " ".join(_quote(a) for a in args)
        return [*self.ssh_args(), line]

    def run(
        self, args: Sequence[str] | str, timeout: float = 20, stdin: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run a command there, ``stdin`` its input; never raises on a non-zero exit
        (ssh's own failure is 255, a timeout 124)."""
        feed: dict = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
        try:
            return subprocess.run(
                self.command(args), capture_output=True, text=True, timeout=timeout, **feed
            )
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {timeout} s")


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def parse_servers(text: str, ssh_config: Path | None = None) -> tuple[Server, ...]:
    """``--cluster user@host1,user@host2`` (user defaults to root) -> servers, in order.
    Refuses an empty list, a malformed entry and a server named twice."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or not all(items):
        raise ServerError(
            f"--cluster {text!r}: give user@host[,user@host...], "
            "e.g. --cluster root@10.251.0.11,root@10.251.0.12"
        )
    servers = []
    for item in items:
        m = _SERVER_RE.match(item)
        if not m:
            raise ServerError(f"--cluster: {item!r} is not user@host")
        servers.append(Server(m.group("host"), m.group("user") or "root", ssh_config))
    hosts = [s.host for s in servers]
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        raise ServerError(f"--cluster names {', '.join(twice)} more than once")
    return tuple(servers)

"""What a run leaves on a server, removed by name there: the bridges and interfaces
carrying its run prefix, its TLS and agents' folders, and Open vSwitch's SSL setting
if it points into the TLS folder. One shell script over ssh, so a server needs nothing of kvfabric's
installed to be cleaned."""

from __future__ import annotations

import re

from ..naming import PREFIX_RE
from .ssh import Server

TLS_ROOT = "/run/kvfabric-tls"
AGENTS_ROOT = "/run/kvfabric-agents"


def tls_folder(prefix: str) -> str:
    """Where a run's switch key and certificates are kept on a server."""
    return f"{TLS_ROOT}/{prefix}"


def agents_folder(prefix: str) -> str:
    """Where the agent workers of a run on a server spill their records."""
    return f"{AGENTS_ROOT}/{prefix}"


def sweep_script(prefix: str) -> str:
    """The shell script that removes run ``prefix``'s leftovers on one server and
    prints one line per thing removed."""
    if not re.fullmatch(PREFIX_RE, prefix):
        raise ValueError(f"run prefix {prefix!r} must match {PREFIX_RE}")
    folder, agents = tls_folder(prefix), agents_folder(prefix)
    return "\n".join(
        [
            f'if ovs-vsctl -t 5 get-ssl 2>/dev/null | grep -q "Private key: {folder}/"; then',
            '  ovs-vsctl -t 5 del-ssl && echo "Open vSwitch SSL setting"',
            "fi",
            "for br in $(ovs-vsctl -t 5 list-br 2>/dev/null); do",
            f'  case "$br" in {prefix}s[0-9]*)',
            '    ovs-vsctl --if-exists del-br "$br" && echo "bridge $br";;',
            "  esac",
            "done",
            f"for d in /sys/class/net/{prefix}[hs][0-9]*; do",
            '  [ -e "$d" ] || continue; n=${d##*/}',
            '  ip link del "$n" 2>/dev/null && echo "interface $n"',
            "done",
            f'if [ -d {folder} ]; then rm -rf {folder} && echo "directory {folder}"; fi',
            f'if [ -d {agents} ]; then rm -rf {agents} && echo "directory {agents}"; fi',
            "true",
            "",
        ]
    )


def sweep_server(server: Server, prefix: str) -> list[str]:
    """Remove run ``prefix``'s leftovers on ``server``; each line names the server.
    Raises OSError if the server cannot be reached (ssh's own exit code 255)."""
    proc = server.run(["sh", "-s"], timeout=60, stdin=sweep_script(prefix))
    if proc.returncode == 255 or proc.returncode == 124:
        raise OSError(f"{server}: {proc.stderr.strip() or 'no answer'}")
    return [f"{line} on {server}" for line in proc.stdout.splitlines() if line.strip()]

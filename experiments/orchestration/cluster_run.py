"""A run's cluster, from its resolved spec's ``cluster:`` section: the servers, which
node each emulates (``topologies.placement`` for ``placement: auto``, or the spec's
own mapping), the link kind between them, and this machine's address on their
network (where the controller listens, over TLS only, for the switches there).

One server that is this machine, or no section, is one machine: ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topologies import Fabric
from topologies.cluster.ssh import Server
from topologies.placement import MachineShare, Placement, place
from topologies.system import run


@dataclass(frozen=True)
class RunCluster:
    servers: tuple[Server, ...]
    machine_of: Mapping[str, str]  # fabric node -> str(server)
    link: str
    coordinator: str  # this machine's address towards the servers
    placement: Placement | None  # None: the spec placed every node itself

    def to_dict(self) -> dict[str, Any]:
        """For ``env.json``: the servers, the link, and each node's server."""
        return {"servers": [str(s) for s in self.servers], "link": self.link,
                "coordinator": self.coordinator, "machine_of": dict(self.machine_of),
                "cut": self.placement.to_dict()["cut"] if self.placement else None}  # fmt: skip


def servers_of(section: Mapping[str, Any]) -> tuple[Server, ...]:
    config = section.get("ssh_config")
    return tuple(Server(s["host"], s.get("user", "root"), Path(config) if config else None)
                 for s in section.get("servers") or [])  # fmt: skip


def run_cluster(resolved: Mapping[str, Any], fabric: Fabric) -> RunCluster | None:
    section = resolved.get("cluster") or {}
    servers = servers_of(section)
    if not servers or (len(servers) == 1 and servers[0].is_local):
        return None
    how = section.get("placement", "auto")
    if how == "auto":
        placement = place(fabric, [MachineShare(str(s)) for s in servers],
                          scale=resolved["scale"]["bandwidth"])  # fmt: skip
        machine_of: dict[str, str] = dict(placement.machine_of)
    else:
        by_host = {s.host: str(s) for s in servers}
        machine_of = {node: by_host[host] for host, nodes in how.items() for node in nodes}
        placement = None
    remote = next(s for s in servers if not s.is_local)
    return RunCluster(servers, machine_of, section.get("link", "vxlan"),
                      address_towards(remote.host), placement)  # fmt: skip


def address_towards(host: str) -> str:
    """This machine's source address for packets to ``host`` (``ip route get``)."""
    proc = run(["ip", "-o", "route", "get", host])
    words = proc.stdout.split()
    if proc.returncode != 0 or "src" not in words:
        raise OSError(f"no route from this machine to server {host}: "
                      f"{proc.stderr.strip() or proc.stdout.strip()}")  # fmt: skip
    return words[words.index("src") + 1]

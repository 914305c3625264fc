"""A resolved ``cluster:`` section against a run: where each node is emulated
(``cluster_placement``) and whether this version can build it (``require_engine``).

Each server is named by its host, in the placement as in ``cluster.placement``.
Its capacity is the switch-hop Mbit/s of the envelope given (the planning machine's:
the others' are not known before they are reached), at the fabric's mean path length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.orchestration.envelope import Envelope
from experiments.spec.cluster import AUTO, servers_of
from experiments.spec.schema import SpecError
from topologies import Fabric, FabricError
from topologies.cluster.ssh import Server
from topologies.placement import MachineShare, Placement, place, placement_of
from topologies.system import run


class EngineUnavailable(RuntimeError):
    """A cluster this version cannot build (exit code 1, before anything is built)."""


def require_engine(cluster: dict[str, Any] | None) -> None:
    """Refuse what this version cannot build: agents are started on this machine,
    entering each host's namespace, which a local cluster's servers share with it
    (``kvfabric cluster local``) and real machines do not."""
    if cluster is None or len(cluster["servers"]) < 2:
        return
    from topologies.cluster.local import local_cluster_of

    foreign = [str(s) for s in servers_of(cluster)
               if not s.is_local and local_cluster_of(s.host) is None]  # fmt: skip
    if foreign:
        raise EngineUnavailable(
            f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} not a server of a "
            "local cluster: in this version a run spans localhost and the servers of "
            "'kvfabric cluster local up N' only (the agents of other machines' hosts do not "
            "run there yet); kvfabric run SPEC --cluster ... --dry-run shows the placement"
        )


@dataclass(frozen=True)
class RunCluster:
    """What the builder needs of a run's cluster (``run_cluster``)."""

    servers: tuple[Server, ...]
    machine_of: Mapping[str, str]  # fabric node -> str(server)
    link: str
    coordinator: str  # this machine's address towards the servers
    placement: Placement

    def to_dict(self) -> dict[str, Any]:
        """For ``env.json``: the servers, the link, each node's server and the cut."""
        return {"servers": [str(s) for s in self.servers], "link": self.link,
                "coordinator": self.coordinator, "machine_of": dict(self.machine_of),
                "cut": self.placement.to_dict()["cut"]}  # fmt: skip


def run_cluster(resolved: Mapping[str, Any], fabric: Fabric,
                envelope: Envelope | None = None) -> RunCluster | None:  # fmt: skip
    """The run's cluster, or None for one machine (no section, or one server that is
    this machine). ``envelope``: this machine's (default: the stored one)."""
    cluster = resolved.get("cluster")
    if not cluster or not cluster["servers"]:
        return None
    servers = servers_of(cluster)
    if len(servers) == 1 and servers[0].is_local:
        return None
    if envelope is None:
        from experiments.orchestration.envelope import load, machine_identity

        envelope = load(machine_identity(mtu=resolved["scale"]["mtu"]))[0]
    placement = cluster_placement(dict(cluster), fabric, resolved["scale"]["bandwidth"],
                                  envelope)  # fmt: skip
    by_host = {s.host: str(s) for s in servers}
    machine_of = {node: by_host[host] for node, host in placement.machine_of.items()}
    remote = next(s for s in servers if not s.is_local)
    return RunCluster(servers, machine_of, cluster["link"], address_towards(remote.host),
                      placement)  # fmt: skip


def address_towards(host: str) -> str:
    """This machine's source address for packets to ``host`` (``ip route get``)."""
    proc = run(["ip", "-o", "route", "get", host])
    words = proc.stdout.split()
    if proc.returncode != 0 or "src" not in words:
        raise OSError(f"no route from this machine to server {host}: "
                      f"{proc.stderr.strip() or proc.stdout.strip()}")  # fmt: skip
    return words[words.index("src") + 1]


def with_placeholders(cluster: dict[str, Any]) -> dict[str, Any]:
    """A ``local: N`` cluster before it is up: its servers named ``local-1``..``local-N``
    (to plan and show a placement)."""
    if not cluster.get("local") or cluster["servers"]:
        return cluster
    return {**cluster, "servers": [{"host": f"local-{i}", "user": "root"}
                                   for i in range(1, cluster["local"] + 1)]}  # fmt: skip


def with_local_servers(resolved: Mapping[str, Any], addresses: list[str]) -> dict[str, Any]:
    """``resolved`` with its ``local: N`` cluster's servers filled in once it is up."""
    cluster = dict(resolved["cluster"], servers=[{"host": a, "user": "root"} for a in addresses])
    return {**resolved, "cluster": cluster}


def cluster_placement(
    cluster: dict[str, Any], fabric: Fabric, scale: float, envelope: Envelope
) -> Placement:
    """The nodes on each server: ``place``'s partition for ``auto``, else the spec's own
    (checked when the spec was loaded). A GPU server no server can hold is a SpecError
    naming ``cluster.servers``."""
    cluster = with_placeholders(cluster)
    capacity = round(envelope.capacity_mbps(fabric.summary()["mean_switch_hops"]), 1)
    machines = [MachineShare(s["host"], capacity) for s in cluster["servers"]]
    if cluster["placement"] == AUTO:
        try:
            return place(fabric, machines, scale=scale)
        except FabricError as exc:
            why = str(exc).removeprefix("--servers: ")
            raise SpecError(f"cluster.servers: {why}", "cluster.servers") from None
    machine_of = {n: host for host, names in cluster["placement"].items() for n in names}
    return placement_of(fabric, machine_of, machines, scale=scale)


def clock_offsets(cluster: RunCluster) -> dict[str, Any]:
    """Each other server's monotonic and realtime clock offset against this machine's,
    with its uncertainty (``topologies.cluster.clock``), for ``env.json``; a server that
    cannot be read gets its error instead."""
    from topologies.cluster.clock import ClockError, measure_offset

    out: dict[str, Any] = {}
    for server in cluster.servers:
        if server.is_local:
            continue
        try:
            out[str(server)] = {
                clock: {"offset_ms": o.offset_ns / 1e6, "uncertainty_ms": o.uncertainty_ns / 1e6}
                for clock, o in ((c, measure_offset(server, clock=c))
                                 for c in ("monotonic", "realtime"))
            }  # fmt: skip
        except (ClockError, OSError, ValueError) as exc:
            out[str(server)] = {"error": str(exc)}
    return out

"""A run's ``cluster`` configuration against its fabric: where each node is emulated
(``cluster_placement``), whether this version can build it (``require_engine``), and
where each host's agent runs (``agent_sites``, ``agents_where``).

Each server is named by its host, in the placement as in ``cluster.placement``.
Its capacity is the switch-hop Mbit/s of the envelope given (the planning machine's:
the others' are not known before they are reached), at the fabric's mean path length.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.orchestration.envelope import Envelope
from experiments.spec.cluster import AUTO, servers_of
from experiments.spec.config import Cluster, RunConfig, ServerAddress
from experiments.spec.schema import SpecError
from topologies import Fabric, FabricError
from topologies.cluster.ssh import Server
from topologies.placement import MachineShare, Placement, place, placement_of
from topologies.processes import run
from topologies.scale import Scale


class EngineUnavailable(RuntimeError):
    """A cluster this version cannot build (exit code 1, before anything is built)."""


def require_engine(config: RunConfig, fabric: Fabric) -> None:
    """Refuse what this version cannot build across servers, before anything is built:
    packet captures (``capture.at``) at nodes emulated on another server (tcpdump runs
    on this machine, and their interfaces are there)."""
    cluster, at = config.cluster, config.capture.at
    if cluster is None or not at or not (cluster.servers or cluster.local):
        return
    from experiments.orchestration.envelope import load, machine_identity
    from experiments.spec.capture import targets
    from topologies.cluster.ssh import LOCAL_NAMES

    envelope = load(machine_identity(mtu=config.scale.mtu))[0]
    placement = cluster_placement(cluster, fabric, config.scale, envelope)
    elsewhere = sorted(
        {
            t.node
            for t in targets(fabric, list(at))
            if placement.machine_of[t.node] not in LOCAL_NAMES
        }
    )
    if elsewhere:
        raise EngineUnavailable(
            f"capture.at names {', '.join(elsewhere)}, emulated on another server: in this "
            "version captures are taken on this machine only (place those nodes on "
            "localhost with cluster.placement, or capture without a cluster)"
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
        return {
            "servers": [str(s) for s in self.servers],
            "link": self.link,
            "coordinator": self.coordinator,
            "machine_of": dict(self.machine_of),
            "cut": self.placement.to_dict()["cut"],
        }


def run_cluster(
    config: RunConfig, fabric: Fabric, envelope: Envelope | None = None
) -> RunCluster | None:
    """The run's cluster, or None for one machine (no section, or one server that is
    this machine). ``envelope``: this machine's (default: the stored one)."""
    cluster = config.cluster
    if cluster is None or not cluster.servers:
        return None
    servers = servers_of(cluster)
    if len(servers) == 1 and servers[0].is_local:
        return None
    if envelope is None:
        from experiments.orchestration.envelope import load, machine_identity

        envelope = load(machine_identity(mtu=config.scale.mtu))[0]
    placement = cluster_placement(cluster, fabric, config.scale, envelope)
    by_host = {s.host: str(s) for s in servers}
    machine_of = {node: by_host[host] for node, host in placement.machine_of.items()}
    remote = next(s for s in servers if not s.is_local)
    return RunCluster(servers, machine_of, cluster.link, address_towards(remote.host), placement)


def address_towards(host: str) -> str:
    """This machine's source address for packets to ``host`` (``ip route get``)."""
    proc = run(["ip", "-o", "route", "get", host])
    words = proc.stdout.split()
    if proc.returncode != 0 or "src" not in words:
        raise OSError(
            f"no route from this machine to server {host}: "
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return words[words.index("src") + 1]


def with_placeholders(cluster: Cluster) -> Cluster:
    """A ``local: N`` cluster before it is up: its servers named ``local-1``..``local-N``
    (to plan and show a placement)."""
    if not cluster.local or cluster.servers:
        return cluster
    servers = tuple(ServerAddress(f"local-{i}", "root") for i in range(1, cluster.local + 1))
    return dataclasses.replace(cluster, servers=servers)


def with_local_servers(config: RunConfig, addresses: list[str]) -> RunConfig:
    """``config`` with its ``local: N`` cluster's servers filled in once it is up."""
    assert config.cluster is not None
    servers = tuple(ServerAddress(a, "root") for a in addresses)
    return dataclasses.replace(config, cluster=dataclasses.replace(config.cluster, servers=servers))


def cluster_placement(
    cluster: Cluster, fabric: Fabric, scale: Scale, envelope: Envelope
) -> Placement:
    """The nodes on each server: ``place``'s partition for ``auto``, else the spec's own
    (checked when the spec was loaded). A GPU server no server can hold is a SpecError
    naming ``cluster.servers``."""
    cluster = with_placeholders(cluster)
    capacity = round(envelope.capacity_mbps(fabric.summary()["mean_switch_hops"]), 1)
    machines = [MachineShare(s.host, capacity) for s in cluster.servers]  # resolved: {host, user}
    if cluster.placement == AUTO:
        try:
            return place(fabric, machines, scale=scale)
        except FabricError as exc:
            why = str(exc).removeprefix("--servers: ")
            raise SpecError(f"cluster.servers: {why}", "cluster.servers") from None
    machine_of = {n: host for host, names in cluster.placement.items() for n in names}
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
                for clock, o in (
                    (c, measure_offset(server, clock=c)) for c in ("monotonic", "realtime")
                )
            }
        except (ClockError, OSError, ValueError) as exc:
            out[str(server)] = {"error": str(exc)}
    return out


def agent_sites(
    cluster: RunCluster, hosts: list[str], clock: Mapping[str, Any], prefix: str
) -> dict[str, Any]:
    """Host -> the ``WorkerSite`` its agent runs at: the server it is emulated on, its
    control channel bound to that server's cluster address, on the coordinator's clock
    (``clock``: ``clock_offsets``' answer; a local cluster's server shares this
    machine's clock, so its offset is exactly 0), spilling into the run's agents'
    folder there. Hosts on this machine get none (their agents run here)."""
    from topologies.cluster.sweep import agents_folder
    from traffic.agents.sites import WorkerSite

    sites: dict[str, WorkerSite] = {}
    by_name = {str(s): s for s in cluster.servers}
    made: dict[str, WorkerSite] = {}
    for host in hosts:
        server = by_name[cluster.machine_of[host]]
        if server.is_local:
            continue
        if str(server) not in made:
            made[str(server)] = WorkerSite(
                server,
                server_address(server.host),
                clock_offset_ns=clock_offset_ns(server, clock),
                folder=agents_folder(prefix),
            )
        sites[host] = made[str(server)]
    return sites


def clock_offset_ns(server: Server, clock: Mapping[str, Any]) -> int:
    """Server's monotonic clock minus this machine's, from ``clock_offsets``' answer
    (``clock``): exactly 0 for a local cluster's server (the same kernel's clock); an
    OSError naming the server when it could not be measured."""
    from topologies.cluster.local import local_cluster_of

    if local_cluster_of(server.host) is not None:
        return 0  # the same kernel's clock
    measured = clock.get(str(server), {})
    if "monotonic" not in measured:
        why = measured.get("error", "no answer")
        raise OSError(
            f"server {server}'s clock offset could not be measured ({why}): "
            "its agents and samplers cannot be timed"
        )
    return round(measured["monotonic"]["offset_ms"] * 1e6)


def server_address(host: str) -> str:
    """The IP address of server ``host`` (as given, or what its name resolves to): the
    address its agents' control channels bind there."""
    import ipaddress
    import socket

    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError as exc:
        raise OSError(f"server {host} does not resolve to an address: {exc}") from None


def agents_where(
    net: Any,
    cluster: RunCluster | None,
    processes: int | str | None,
    clock: Mapping[str, Any] | None,
) -> tuple[dict[str, Any] | None, Any]:
    """The agent fleet's ``sites`` and ``processes`` for a run on ``net``: on one
    machine (``cluster`` None), none and the spec's count; across ``cluster``'s
    servers (the run's ``Deployment.cluster``), each host's site
    (``agent_sites``) and, when the servers are a local cluster's (they share this
    machine's CPUs), "auto" split between them, so the run has no more workers than on
    one machine."""
    if cluster is None:
        return None, processes
    from topologies.cluster.local import local_cluster_of

    hosts = [h.name for h in net.fabric.hosts]
    sites = agent_sites(cluster, hosts, clock or {}, net.prefix)
    shared = all(s.is_local or local_cluster_of(s.host) for s in cluster.servers)
    if shared and processes in (None, "auto"):
        places = len({str(site.server) for site in sites.values()}) + (len(sites) < len(hosts))
        processes = max(1, (os.cpu_count() or 1) // max(1, places))
    return sites, processes

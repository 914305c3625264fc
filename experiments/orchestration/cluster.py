"""A resolved ``cluster:`` section against a run: where each node is emulated
(``cluster_placement``) and whether this version can build it (``require_engine``).

Each server is named by its host, in the placement as in ``cluster.placement``.
Its capacity is the switch-hop Mbit/s of the envelope given (the planning machine's:
the others' are not known before they are reached), at the fabric's mean path length.
"""

from __future__ import annotations

from typing import Any

from experiments.orchestration.envelope import Envelope
from experiments.spec.cluster import AUTO, servers_of
from experiments.spec.schema import SpecError
from topologies import Fabric, FabricError
from topologies.placement import MachineShare, Placement, place, placement_of


class EngineUnavailable(RuntimeError):
    """A cluster this version cannot build (exit code 1, before anything is built)."""


def require_engine(cluster: dict[str, Any] | None) -> None:
    """Refuse a build on more than one server: the multi-server engine replaces this."""
    if cluster is None or len(cluster["servers"]) < 2:
        return
    names = ", ".join(str(s) for s in servers_of(cluster))
    raise EngineUnavailable(
        f"a run on {len(cluster['servers'])} servers ({names}) needs the multi-server build, "
        "which is not available in this version yet; kvfabric run SPEC --cluster ... "
        "--dry-run shows the placement"
    )


def cluster_placement(
    cluster: dict[str, Any], fabric: Fabric, scale: float, envelope: Envelope
) -> Placement:
    """The nodes on each server: ``place``'s partition for ``auto``, else the spec's own
    (checked when the spec was loaded). A GPU server no server can hold is a SpecError
    naming ``cluster.servers``."""
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

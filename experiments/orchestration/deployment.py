"""What one run is deployed as, decided once (``runner.prepare``, ``runner.fabric_up``)
and handed to every step that needs it, never rebuilt or read back from the network:

- ``scale``: the run's ``topologies.scale.Scale`` (bandwidth scale and MTU), the one
  conversion between real and emulated units;
- ``plan``: the egress plan at that scale (``topologies.shaping.egress_plan``): what the
  builder shapes, and what the fidelity verdict judges the measured rates by;
- ``cluster``: where each node runs across servers, and how the servers are reached
  (``experiments.orchestration.cluster.RunCluster``), or None on one machine.

Pure data: no root, no Mininet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from experiments.orchestration.cluster import RunCluster
from topologies import Fabric
from topologies.scale import Scale
from topologies.shaping import Egress, egress_plan


@dataclass(frozen=True)
class Deployment:
    """A run's scale, egress plan and cluster (see the module docstring)."""

    scale: Scale
    plan: tuple[Egress, ...]
    cluster: RunCluster | None = None

    @property
    def rates_bps(self) -> dict[tuple[str, int], int]:
        """Configured rate (bit/s) of every egress, keyed (node, port)."""
        return {(e.node, e.port): e.rate_bps for e in self.plan}

    def on(self, cluster: RunCluster | None) -> Deployment:
        """This deployment across ``cluster``'s servers (None: on one machine)."""
        return replace(self, cluster=cluster)

    @classmethod
    def of(cls, fabric: Fabric, scale: Scale) -> Deployment:
        """``fabric`` at ``scale`` on one machine, its egress plan computed here, once.
        Raises FabricError naming the first link whose rate or buffer cannot be
        honoured, before anything is built."""
        return cls(scale, tuple(egress_plan(fabric, scale)))

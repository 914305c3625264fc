"""Rules without a controller: the policy core's rules installed once with
``ovs-ofctl``, for fabrics that need routes but no control plane (tests,
benchmarks, calibration's sampler timing).

    with FabricNetwork(fabric, Scale(), rules=StaticRules("ecmp")) as net: ...

``FabricNetwork`` is handed the installer and calls ``install(net)`` once its
switches exist, so ``topologies`` never imports routing. Each switch's flows
and groups are replaced as a whole (del-flows, del-groups, add-groups,
add-flows), from files in the network's work directory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topologies.builder import BuildError
from topologies.processes import run

from .policy import compute
from .rules import RuleSet, ofctl_flow, ofctl_group

if TYPE_CHECKING:
    from topologies.builder import FabricNetwork

OFCTL = ["ovs-ofctl", "-O", "OpenFlow13"]


class StaticRules:
    """``policy``'s rules for the network's fabric (``params`` as the policy takes
    them, e.g. ``{"tenants": ..., "qos": ...}``), installed with ``ovs-ofctl``."""

    def __init__(self, policy: str = "shortest_path", params: dict[str, Any] | None = None):
        self.policy = policy
        self.params = dict(params or {})
        self.installed: RuleSet | None = None

    def install(self, net: FabricNetwork) -> None:
        ruleset = compute(net.fabric, self.policy, params=self.params)
        install_ruleset(net, ruleset)
        self.installed = ruleset


def install_ruleset(net: FabricNetwork, ruleset: RuleSet) -> None:
    """Replace every switch's flows and groups with ``ruleset``."""
    for sw in net.fabric.switches:
        rules, groups = ruleset.for_switch(sw.name)
        bridge = net.bridge(sw.name)
        flows = net.workfile(f"flows-{sw.name}", "".join(ofctl_flow(r) + "\n" for r in rules))
        grps = net.workfile(f"groups-{sw.name}", "".join(ofctl_group(g) + "\n" for g in groups))
        for args in (
            [*OFCTL, "del-flows", bridge],
            [*OFCTL, "del-groups", bridge],
            [*OFCTL, "add-groups", bridge, str(grps)],
            [*OFCTL, "add-flows", bridge, str(flows)],
        ):
            proc = run(args)
            if proc.returncode != 0:
                raise BuildError(
                    f"{' '.join(args[3:5])} failed (exit {proc.returncode}): "
                    f"{(proc.stderr or proc.stdout).strip()[:500]}"
                )

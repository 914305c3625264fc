"""Low-diameter fabrics through the os-ken controller: the smallest Dragonfly (3 groups
of 2 routers, one global link between every two groups) and a 2 × 2 HyperX, each under
``minimal``, ``valiant`` and ``ugal``: every host pings every other, and the hop counts
the install event reports (``path_hops``: ordered host pairs by the switch-to-switch
hops of their longest route) cover every pair and stay within what the policy promises
(minimal: the diameter; Valiant: twice it). Under ``ugal`` one UDP flow is placed, and
its ``placed_paths`` count stays within the same bounds. About 60 s in all."""

from __future__ import annotations

import time

import pytest

from controller.process import ControllerProcess
from topologies import Fabric, make_fabric

from .test_controller import fabric_with_controller, ping_until_all, run_dir  # noqa: F401

pytestmark = pytest.mark.root

FABRICS = {
    "dragonfly": lambda: make_fabric("dragonfly", p=1, a=2, h=1),  # 6 hosts, 6 routers
    "hyperx": lambda: make_fabric("hyperx", shape=[2, 2], k=1),  # 4 hosts, 4 routers
}
POLICIES = ("minimal", "valiant", "ugal")
SEED = 3


def hop_bound(policy: str, diameter: int) -> int:
    """The most switch-to-switch hops a route of ``policy`` may cross."""
    return 2 * diameter if policy == "valiant" else diameter


def install_hops(proc: ControllerProcess) -> dict[int, int]:
    """The first install's ``path_hops`` as hops -> ordered pairs."""
    (install,) = [e for e in proc.events() if e["event"] == "install"]
    assert "path_hops" in install, f"the install event has no path_hops: {install}"
    return {int(n): pairs for n, pairs in install["path_hops"].items()}


def placed_paths(proc: ControllerProcess, within_s: float = 5.0) -> dict[str, dict[int, int]]:
    """The ``placed_paths`` event of a ``ugal`` controller once it counts a flow."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for ev in proc.events():
            if ev["event"] == "placed_paths" and (ev["minimal"] or ev["valiant"]):
                return {
                    route: {int(n): c for n, c in ev[route].items()}
                    for route in ("minimal", "valiant")
                }
        time.sleep(0.1)
    raise AssertionError(f"ugal placed no flow within {within_s:g} s")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kind", sorted(FABRICS))
def test_every_pair_is_reached_within_the_policy_s_hop_bound(kind, policy, run_dir):  # noqa: F811
    fabric: Fabric = FABRICS[kind]()
    diameter, hosts = fabric.diameter(), len(fabric.hosts)
    params = {"seed": SEED} if policy != "minimal" else {}
    with fabric_with_controller(fabric, policy, run_dir, params) as (proc, net):
        failed = ping_until_all(net, within_s=10)
        assert not failed, f"{policy} on {kind}: {len(failed)} pairs unreachable: {failed[:5]}"
        hops = install_hops(proc)
        assert sum(hops.values()) == hosts * (hosts - 1), hops  # every ordered pair counted
        assert max(hops) <= hop_bound(policy, diameter), f"{policy} on {kind}: {hops}"
        if policy == "valiant":  # through a third group or router: some pairs go farther
            assert max(hops) > diameter, hops
        else:  # minimal routes; the farthest pairs are a diameter apart
            assert max(hops) == diameter, hops
        if policy == "ugal":
            src, dst = fabric.hosts[0], fabric.hosts[-1]
            net.mn(src.name).cmd(f"echo kv > /dev/udp/{dst.ip}/5999")
            placed = placed_paths(proc)
            counted = {**placed["minimal"], **placed["valiant"]}
            assert max(placed["minimal"], default=0) <= diameter, placed
            assert max(counted) <= 2 * diameter, placed
        assert proc.errors() == []

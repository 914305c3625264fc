"""QoS classes on a real egress: the leaf marks DSCP per tenant, the switch
egress gives each class its share."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from controller.ofctl import StaticRules
from topologies import spine_leaf
from topologies.builder import FabricNetwork
from topologies.qos import class_plan
from topologies.scale import Scale

from .rates import BUSY_STEAL_PCT, steal_counters

pytestmark = pytest.mark.root

QOS = {
    "classes": [
        {"name": "gold", "dscp": 46, "rate_share": 0.75},
        {"name": "bronze", "dscp": 10, "rate_share": 0.25},
    ],
    "tenant_class": {"a": "gold", "b": "bronze"},
}
TENANTS = {"a": ["h0"], "b": ["h1"]}


def _two_flows(net, seconds: float = 4.0) -> dict[str, float]:
    """h0 and h1 each send to h3 at once; goodput per sender in Mbit/s."""
    servers = [
        net.mn("h3").popen(["iperf3", "-s", "-1", "-p", str(p)], stdout=subprocess.DEVNULL)
        for p in (5301, 5302)
    ]
    try:
        time.sleep(0.3)
        clients = {
            src: net.mn(src).popen(
                [
                    "iperf3",
                    "-c",
                    "10.0.0.4",
                    "-p",
                    str(port),
                    "-t",
                    str(seconds),
                    "-J",
                    "-C",
                    "cubic",
                ],
                stdout=subprocess.PIPE,
            )
            for src, port in (("h0", 5301), ("h1", 5302))
        }
        out = {}
        for src, c in clients.items():
            data = json.loads(c.communicate(timeout=seconds + 30)[0])
            out[src] = data["end"]["sum_received"]["bits_per_second"] / 1e6
        return out
    finally:
        for s in servers:
            s.kill()
            s.wait()


LINK_MBPS = (9.0, 10.5)  # leaf1 -> h3 at 10 Mbit/s: what two flows together must carry


def _congested(net, tries: int = 3) -> tuple[dict[str, float], list[tuple[float, float]]]:
    """Two flows into one 10 Mbit/s egress, taken again (three tries in all) while they
    carry less than the link's rate together, as ``rates.wire_rates_mbps`` does: a 4 s
    transfer on this shared VM sometimes loses a quarter of a core to the host (steal),
    which slows the flows, not the shaper. The best try's rates, and every try's
    (sum, steal %)."""
    best, seen = None, []
    for _ in range(tries):
        steal0, total0 = steal_counters()
        rates = _two_flows(net)
        steal1, total1 = steal_counters()
        total = rates["h0"] + rates["h1"]
        seen.append((total, 100.0 * (steal1 - steal0) / max(1, total1 - total0)))
        if best is None or total > best["h0"] + best["h1"]:
            best = rates
        if total >= LINK_MBPS[0]:
            break
    assert best is not None
    return best, seen


def _assert_link_carried(seen: list[tuple[float, float]]) -> None:
    """Never above the link's rate (the shaper's ceiling, judged always); at its rate in
    the best try, unless every try ran while the host took >= BUSY_STEAL_PCT of the CPU."""
    assert all(total <= LINK_MBPS[1] for total, _ in seen), seen
    if max(total for total, _ in seen) >= LINK_MBPS[0]:
        return
    if all(steal >= BUSY_STEAL_PCT for _, steal in seen):
        steals = [round(s) for _, s in seen]
        pytest.skip(f"the host took {steals} % of the CPU (steal) in every try")
    pytest.fail(f"two flows carried {seen} (Mbit/s, steal %), below {LINK_MBPS[0]} Mbit/s")


def test_weighted_classes_share_a_congested_egress():
    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2, host_gbps=100, uplink_gbps=400)
    params = {"tenants": TENANTS, "qos": QOS}
    with FabricNetwork(
        fabric, Scale(), rules=StaticRules(params=params), qos=class_plan(QOS["classes"])
    ) as net:
        rates, seen = _congested(net)
    # leaf1 -> h3 runs at 10 Mbit/s: gold is assured 7.5, bronze 2.5 (3:1);
    # two cubic flows without classes land near 1:1 (seen up to 1.7:1 here)
    assert rates["h0"] > 2.0 * rates["h1"], rates
    _assert_link_carried(seen)


def test_a_strict_priority_class_goes_first_whatever_the_others_share():
    """gold (priority 0) against bronze (rate_share 0.9): strict priority means
    gold takes the congested link, not the 10 % a weighted split would leave it."""
    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2, host_gbps=100, uplink_gbps=400)
    qos = {
        "classes": [
            {"name": "gold", "dscp": 46, "priority": 0},
            {"name": "bronze", "dscp": 10, "rate_share": 0.9},
        ],
        "tenant_class": {"a": "gold", "b": "bronze"},
    }
    params = {"tenants": TENANTS, "qos": qos}
    with FabricNetwork(
        fabric, Scale(), rules=StaticRules(params=params), qos=class_plan(qos["classes"])
    ) as net:
        rates, seen = _congested(net)
    assert rates["h0"] > 4.0 * rates["h1"], rates
    _assert_link_carried(seen)


def test_the_leaf_rewrites_host_marking():
    """The ingress leaf is the trust boundary: a host that marks itself EF
    still lands in its tenant's class."""
    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2, host_gbps=100, uplink_gbps=400)
    params = {"tenants": TENANTS, "qos": QOS}
    with FabricNetwork(
        fabric, Scale(), rules=StaticRules(params=params), qos=class_plan(QOS["classes"])
    ) as net:
        # h1 (bronze) marks its packets EF (dscp 46, tos 0xb8)
        net.mn("h1").cmd("ping -c 5 -i 0.05 -Q 0xb8 10.0.0.4")
        egress = net.intf("leaf1", fabric.port("leaf1", "h3"))
        stats = subprocess.run(
            ["tc", "-s", "class", "show", "dev", egress], capture_output=True, text=True
        ).stdout
    ids = class_plan(QOS["classes"]).ids()
    gold, bronze = ids["gold"][0], ids["bronze"][0]
    sent = _class_packets(stats)
    assert sent.get(bronze, 0) >= 5, stats
    assert sent.get(gold, 0) == 0, stats


def _class_packets(tc_output: str) -> dict[str, int]:
    out, current = {}, None
    for line in tc_output.splitlines():
        words = line.split()
        if words[:2] == ["class", "htb"]:
            current = words[2]
        elif words and words[0] == "Sent" and current:
            out[current] = int(words[3])
    return out

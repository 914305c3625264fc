"""The os-ken controller on real fabrics: it comes up, installs exactly what the
policy core computes, spreads (or does not spread) load as the policy says,
places adaptive flows away from load, and reroutes around a failed link."""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from controller.policy import compute
from controller.process import ControllerProcess
from controller.rules import CONTROLLER, Group, Rule, RuleSet
from experiments.iperf import iperf3
from experiments.reach import all_pairs_ping
from topologies import Fabric, fat_tree, rail_optimized, spine_leaf
from topologies.builder import Controller, FabricNetwork

pytestmark = pytest.mark.root

SMALL = {
    "spine_leaf": (lambda: spine_leaf(spines=2, leaves=2, hosts_per_leaf=2), "ecmp"),
    "fat_tree": (lambda: fat_tree(4), "ecmp"),
    "rail_optimized": (
        lambda: rail_optimized(servers=2, gpus_per_server=2, spines=2),
        "adaptive",
    ),
}


@contextmanager
def fabric_with_controller(
    fabric: Fabric, policy: str, run_dir: Path, params: dict | None = None
) -> Iterator[tuple[ControllerProcess, FabricNetwork]]:
    with (
        ControllerProcess(fabric, policy, run_dir, params) as proc,
        FabricNetwork(fabric, 1e-4, controller=Controller(port=proc.port)) as net,
    ):
        proc.wait_ready(timeout_s=30)
        yield proc, net


def ofctl(command: str, bridge: str) -> str:
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", command, bridge],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


# ----- rule tables as comparable signatures ------------------------------------
def _action_tokens(actions: tuple) -> tuple[str, ...]:
    tokens = []
    for name, value in actions:
        if name == "output":
            tokens.append("controller" if value == CONTROLLER else f"output:{value}")
        elif name in ("group", "goto_table"):
            tokens.append(f"{name}:{value}")
        else:
            tokens.append(name)
    return tuple(sorted(tokens))


def expected_flows(rules: list[Rule]) -> Counter:
    sigs = Counter()
    for r in rules:
        m = r.match_dict()
        sigs[
            (r.table, r.priority, m.get("ipv4_dst"), m.get("in_port"), _action_tokens(r.actions))
        ] += 1
    return sigs


def dumped_flows(text: str) -> Counter:
    sigs = Counter()
    for line in text.splitlines():
        if "actions=" not in line or "table=" not in line:
            continue
        head, actions = line.split("actions=", 1)
        table = int(re.search(r"table=(\d+)", head).group(1))
        priority = int(re.search(r"priority=(\d+)", head).group(1))
        if "idle_timeout=" in head:  # an adaptive placement, not part of the proactive set
            continue
        nw_dst = re.search(r"nw_dst=([\d.]+)", head)
        in_port = re.search(r"in_port=(\d+)", head)
        tokens = []
        for act in actions.strip().split(","):
            if act.startswith("CONTROLLER"):
                tokens.append("controller")
            elif act.startswith(("output:", "group:", "goto_table:")):
                tokens.append(act)
            elif act.isdigit():
                tokens.append(f"output:{act}")
            elif act.startswith("set_field"):
                tokens.append("set_field")
            else:
                tokens.append(act)
        sigs[
            (
                table,
                priority,
                nw_dst.group(1) if nw_dst else None,
                int(in_port.group(1)) if in_port else None,
                tuple(sorted(tokens)),
            )
        ] += 1
    return sigs


def expected_groups(groups: list[Group]) -> set:
    return {(g.group_id, g.type, tuple(sorted(g.outputs()))) for g in groups}


def dumped_groups(text: str) -> set:
    found = set()
    for line in text.splitlines():
        gid = re.search(r"group_id=(\d+)", line)
        if gid:
            gtype = re.search(r"type=(\w+)", line).group(1)
            outs = tuple(sorted(int(p) for p in re.findall(r"output:(\d+)", line)))
            found.add((int(gid.group(1)), gtype, outs))
    return found


def tx_bytes(proc: ControllerProcess, switch: str, port: int) -> int:
    return int(proc.client.ports()[switch][str(port)]["tx_bytes"])


def fresh_port_counters(proc: ControllerProcess, fabric: Fabric) -> None:
    """Wait until every switch has answered one more port-stats poll than now."""

    def stamps() -> dict[str, int]:
        ports = proc.client.ports()
        return {sw: max((p["t_ns"] for p in ports.get(sw, {}).values()), default=0) for sw in names}

    names = [s.name for s in fabric.switches]
    before = stamps()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        now = stamps()
        if all(now[sw] > before[sw] for sw in names):
            return
        time.sleep(0.05)
    raise AssertionError("port counters were not refreshed within 3 s")


def ping_until_all(net: FabricNetwork, within_s: float) -> list[tuple[str, str]]:
    """All-pairs ping, repeated until every pair answers or ``within_s`` passed;
    the pairs still failing."""
    deadline = time.monotonic() + within_s
    while True:
        failed = [pair for pair, ok in all_pairs_ping(net).items() if not ok]
        if not failed or time.monotonic() > deadline:
            return failed


# ----- tests ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(SMALL))
def test_controller_up_reaches_all_pairs_and_installs_the_computed_rules(kind, tmp_path):
    make, policy = SMALL[kind]
    fabric = make()
    with fabric_with_controller(fabric, policy, tmp_path) as (proc, net):
        status = proc.client.status()
        assert sorted(status["switches_connected"]) == sorted(s.name for s in fabric.switches)
        assert status["switches_missing"] == []
        reach = all_pairs_ping(net)
        failed = [pair for pair, ok in reach.items() if not ok]
        assert not failed, f"{len(failed)} of {len(reach)} pairs unreachable, e.g. {failed[:5]}"
        want = compute(fabric, policy)
        assert RuleSet.from_dict(proc.client.rules()) == want
        for sw in fabric.switches:
            rules, groups = want.for_switch(sw.name)
            bridge = net.bridge(sw.name)
            got_flows = dumped_flows(ofctl("dump-flows", bridge))
            per_table = Counter(sig[0] for sig in got_flows.elements())
            assert per_table == Counter(r.table for r in rules), sw.name
            assert got_flows == expected_flows(rules), sw.name
            assert dumped_groups(ofctl("dump-groups", bridge)) == expected_groups(groups), sw.name
        events = proc.client.events()
        ready = [e for e in events if e["event"] == "ready"]
        assert len(ready) == 1 and ready[0]["install_ms"] >= 0
        assert proc.errors() == []


def spine_bytes_during_transfer(policy: str, tmp_path: Path) -> dict[str, int]:
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with fabric_with_controller(fabric, policy, tmp_path) as (proc, net):
        spines = [s.name for s in fabric.switches if s.name.startswith("spine")]
        ports = {sp: fabric.port(sp, "leaf1") for sp in spines}
        fresh_port_counters(proc, fabric)
        before = {sp: tx_bytes(proc, sp, ports[sp]) for sp in spines}
        result = iperf3(net, "h0", "h2", seconds=2, parallel=16)
        assert result.goodput_mbps > 0
        fresh_port_counters(proc, fabric)
        after = {sp: tx_bytes(proc, sp, ports[sp]) for sp in spines}
        assert proc.errors() == []
    return {sp: after[sp] - before[sp] for sp in spines}


def _carrying(moved: dict[str, int]) -> list[str]:
    total = sum(moved.values())
    assert total > 100_000, f"the transfer moved almost nothing: {moved}"
    return [sp for sp, b in moved.items() if b > 0.05 * total]


def test_ecmp_spreads_parallel_flows_over_both_spines(tmp_path):
    moved = spine_bytes_during_transfer("ecmp", tmp_path)
    assert len(_carrying(moved)) >= 2, moved


def test_shortest_path_keeps_parallel_flows_on_one_spine(tmp_path):
    moved = spine_bytes_during_transfer("shortest_path", tmp_path)
    assert len(_carrying(moved)) == 1, moved


def test_adaptive_places_a_new_flow_away_from_the_loaded_spine(tmp_path):
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with fabric_with_controller(fabric, "adaptive", tmp_path) as (proc, net):
        server = net.mn("h2").popen(
            ["iperf3", "-s", "-1", "-p", "5301"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)
        client = net.mn("h0").popen(
            ["iperf3", "-c", fabric.node("h2").ip, "-p", "5301", "-t", "4", "-C", "cubic"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(1.5)  # the flow is placed and the counters show its load
            fresh_port_counters(proc, fabric)
            ports = proc.client.ports()
            load = {
                sp: ports[sp][str(fabric.port(sp, "leaf1"))]["tx_bps"]
                for sp in ("spine0", "spine1")
            }
            loaded = max(load, key=load.get)
            idle = min(load, key=load.get)
            assert load[loaded] > 1e6 and load[idle] < 0.2 * load[loaded], load
            result = iperf3(net, "h1", "h3", seconds=1, port=5302)
            assert result.goodput_mbps > 0
            h1, h3 = fabric.node("h1").ip, fabric.node("h3").ip
            placed = [
                Rule.from_dict(r)
                for r in proc.client.placed()
                if dict(map(tuple, r["match"])).get("ipv4_src") == h1
                and dict(map(tuple, r["match"])).get("ipv4_dst") == h3
            ]
            assert placed, "the new flow h1->h3 was not placed"
            via = {r.switch for r in placed if r.switch.startswith("spine")}
            assert via == {idle}, f"h1->h3 placed via {via}, loads {load}"
        finally:
            for p in (client, server):
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=10)
        assert proc.client.status()["flows_placed"] >= 2
        assert proc.errors() == []


def test_link_down_during_traffic_reroutes_and_ping_recovers(tmp_path):
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with fabric_with_controller(fabric, "ecmp", tmp_path) as (proc, net):
        server = net.mn("h2").popen(
            ["iperf3", "-s", "-1", "-p", "5401"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)
        client = net.mn("h0").popen(
            ["iperf3", "-c", fabric.node("h2").ip, "-p", "5401", "-t", "3", "-P", "4"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(1.0)
            net.set_link("leaf0", "spine0", up=False)
            failed = ping_until_all(net, within_s=5)
            assert not failed, f"after link down, unreachable: {failed[:5]}"
            assert proc.client.status()["links_down"] == ["leaf0-spine0"]
            reroutes = [e for e in proc.client.events() if e["event"] == "reroute"]
            assert reroutes and reroutes[0]["down"] == ["leaf0-spine0"]
            assert 0 <= reroutes[0]["reroute_ms"] < 1000
            assert "leaf0" in reroutes[0]["switches"]
            # the rules on leaf0 no longer use the dead port
            dead = fabric.port("leaf0", "spine0")
            rules, groups = RuleSet.from_dict(proc.client.rules()).for_switch("leaf0")
            assert all(dead not in r.outputs() for r in rules)
            assert all(dead not in g.outputs() for g in groups)
            net.set_link("leaf0", "spine0", up=True)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and proc.client.status()["links_down"]:
                time.sleep(0.05)
            assert proc.client.status()["links_down"] == []
            assert RuleSet.from_dict(proc.client.rules()) == compute(fabric, "ecmp")
            failed = ping_until_all(net, within_s=5)
            assert not failed, f"after link up, unreachable: {failed[:5]}"
        finally:
            for p in (client, server):
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=10)
        assert proc.errors() == []

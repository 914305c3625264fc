"""The os-ken controller on real fabrics: it comes up, installs exactly what the
policy core computes (every policy, compared rule by rule with ovs-ofctl's
dumps), changes policy at run time, spreads (or does not spread) load as the
policy says, places adaptive flows away from load, and reroutes around a failed
link."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from controller.channel import ChannelError
from controller.core import PRIORITY_TENANT
from controller.policy import compute
from controller.process import ControllerProcess
from controller.rules import Rule, RuleSet, diff
from experiments.measurement.iperf import iperf3
from experiments.measurement.reach import all_pairs_ping
from topologies import Fabric, fat_tree, rail_optimized, spine_leaf
from topologies.builder import Controller, FabricNetwork
from topologies.scale import Scale

from .ofdump import flow_of, ofctl, parse_flows, parse_groups, table_diff

pytestmark = pytest.mark.root

SMALL = {
    "spine_leaf": (lambda: spine_leaf(spines=2, leaves=2, hosts_per_leaf=2), "ecmp"),
    "fat_tree": (lambda: fat_tree(4), "ecmp"),
    "rail_optimized": (
        lambda: rail_optimized(servers=2, gpus_per_server=2, spines=2),
        "adaptive",
    ),
}


@pytest.fixture
def run_dir(tmp_path_factory) -> Path:
    """The controller's run directory. Not ``tmp_path``: conftest's traceback
    check asks for ``tmp_path`` again in its teardown, after pytest 9 has torn it
    down (an error in every test). The check still reads every controller log
    here, through the copies ``KVFABRIC_CONTROLLER_LOGS`` collects."""
    return tmp_path_factory.mktemp("controller")


@contextmanager
def fabric_with_controller(
    fabric: Fabric, policy: str, run_dir: Path, params: dict | None = None
) -> Iterator[tuple[ControllerProcess, FabricNetwork]]:
    with (
        ControllerProcess(fabric, policy, run_dir, params) as proc,
        FabricNetwork(fabric, Scale(), controller=Controller(port=proc.port)) as net,
    ):
        proc.wait_ready(timeout_s=30)
        yield proc, net


# ----- switch tables against the core (parsing in ofdump.py) ----------------------
def switch_table_problems(
    proc: ControllerProcess, net: FabricNetwork, fabric: Fabric, want: RuleSet
) -> list[str]:
    """Per switch, the dumped flows and groups against ``want`` plus the rules the
    controller placed there (adaptive), as multisets: readable lines, empty if
    every switch matches. Dumped again if a placement happened meanwhile."""
    for _ in range(5):
        placed = proc.client.placed()
        problems = []
        for sw in fabric.switches:
            rules, groups = want.for_switch(sw.name)
            rules += [r for r in map(Rule.from_dict, placed) if r.switch == sw.name]
            problems += table_diff(sw.name, net.bridge(sw.name), rules, groups)
        if proc.client.placed() == placed:
            return problems
    raise AssertionError("the controller kept placing flows while the tables were dumped")


def dump_all(net: FabricNetwork, fabric: Fabric) -> dict[str, tuple[Counter, Counter]]:
    """Every switch's tables in canonical form."""
    return {
        sw.name: (
            parse_flows(ofctl("dump-flows", net.bridge(sw.name))),
            parse_groups(ofctl("dump-groups", net.bridge(sw.name))),
        )
        for sw in fabric.switches
    }


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
def test_controller_up_reaches_all_pairs_and_installs_the_computed_rules(kind, run_dir):
    make, policy = SMALL[kind]
    fabric = make()
    with fabric_with_controller(fabric, policy, run_dir) as (proc, net):
        status = proc.client.status()
        assert sorted(status["switches_connected"]) == sorted(s.name for s in fabric.switches)
        assert status["switches_missing"] == []
        reach = all_pairs_ping(net)
        failed = [pair for pair, ok in reach.items() if not ok]
        assert not failed, f"{len(failed)} of {len(reach)} pairs unreachable, e.g. {failed[:5]}"
        want = compute(fabric, policy)
        assert RuleSet.from_dict(proc.client.rules()) == want
        problems = switch_table_problems(proc, net, fabric, want)
        assert not problems, f"{policy} on {kind}:\n" + "\n".join(problems)
        events = proc.client.events()
        ready = [e for e in events if e["event"] == "ready"]
        assert len(ready) == 1 and ready[0]["install_ms"] >= 0
        assert proc.errors() == []


def spine_bytes_during_transfer(policy: str, run_dir: Path) -> dict[str, int]:
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with fabric_with_controller(fabric, policy, run_dir) as (proc, net):
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


def test_ecmp_spreads_parallel_flows_over_both_spines(run_dir):
    moved = spine_bytes_during_transfer("ecmp", run_dir)
    assert len(_carrying(moved)) >= 2, moved


def test_shortest_path_keeps_parallel_flows_on_one_spine(run_dir):
    moved = spine_bytes_during_transfer("shortest_path", run_dir)
    assert len(_carrying(moved)) == 1, moved


def test_adaptive_places_a_new_flow_away_from_the_loaded_spine(run_dir):
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with fabric_with_controller(fabric, "adaptive", run_dir) as (proc, net):
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


def test_link_down_during_traffic_reroutes_and_ping_recovers(run_dir):
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    with fabric_with_controller(fabric, "ecmp", run_dir) as (proc, net):
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


# ----- every policy: the live tables are exactly the core's output -------------------
CLASSES = [
    {"name": "token", "dscp": 46, "priority": 0},
    {"name": "kv", "dscp": 26, "rate_share": 0.6},
    {"name": "bulk", "dscp": 0, "rate_share": 0.3},
]
# Two tenants per fabric kind, each spanning leaves (so tenant routes exist);
# fat_tree's other hosts stay untenanted.
TENANTS = {
    "spine_leaf": {"blue": ["h0", "h2"], "red": ["h1", "h3"]},
    "fat_tree": {"blue": ["h0", "h4", "h8"], "red": ["h1", "h12"]},
    "rail_optimized": {"blue": ["gpu0_0", "gpu1_1"], "red": ["gpu0_1", "gpu1_0"]},
}
IDLE_S = 30  # adaptive placements must not idle out while the test looks at them


def policy_case(case: str, kind: str) -> tuple[str, dict]:
    tenants = TENANTS[kind]
    # blue's hosts get token (a kv mark they set is kept), everyone else the default, bulk
    qos = {"classes": CLASSES, "tenant_class": {"blue": ["token", "kv"]}}
    return {
        "shortest_path": ("shortest_path", {}),
        "ecmp": ("ecmp", {}),
        "adaptive": ("adaptive", {"idle_timeout_s": IDLE_S}),
        "tenant_paths": ("tenant_paths", {"tenants": tenants}),
        "qos": ("ecmp", {"tenants": tenants, "qos": qos}),
    }[case]


def _what_the_case_is_about(case: str, want: RuleSet) -> None:
    """The rule set holds what ``case`` is about, so equal tables are not vacuous."""
    flows = [flow_of(r) for r in want.rules]
    actions = {a for f in flows for a in f.actions}
    if case == "shortest_path":
        assert not want.groups
    else:
        assert want.groups and all(g.type == "select" for g in want.groups)
    if case == "adaptive":
        assert ("controller", 128) in actions
    if case == "tenant_paths":
        tenant_rules = [r for r in want.rules if r.priority == PRIORITY_TENANT]
        assert tenant_rules and all("ipv4_src" in r.match_dict() for r in tenant_rules)
    if case == "qos":
        marks = {v[1] for k, v in actions if k == "set_field" and v[0] == "ip_dscp"}
        assert marks == {46, 0}, marks
        assert any(dict(f.match).get("ip_dscp") == 26 for f in flows)


def wait_placed(proc: ControllerProcess, within_s: float = 3.0) -> list[Rule]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        placed = [Rule.from_dict(r) for r in proc.client.placed()]
        if placed:
            return placed
        time.sleep(0.05)
    raise AssertionError(f"no flow placed within {within_s:g} s")


@pytest.mark.parametrize("kind", sorted(SMALL))
@pytest.mark.parametrize("case", ["shortest_path", "ecmp", "adaptive", "tenant_paths", "qos"])
def test_every_policy_installs_exactly_the_core_rules(case, kind, run_dir):
    """dump-flows/dump-groups of every switch == the core's rules and groups:
    table, priority, full match, ordered actions, timeouts, flags, cookie;
    group type and buckets (actions, weight, watch port/group)."""
    fabric = SMALL[kind][0]()
    policy, params = policy_case(case, kind)
    want = compute(fabric, policy, params=params)
    _what_the_case_is_about(case, want)
    with fabric_with_controller(fabric, policy, run_dir, params) as (proc, net):
        assert RuleSet.from_dict(proc.client.rules()) == want
        problems = switch_table_problems(proc, net, fabric, want)
        assert not problems, f"{case} ({policy}) on {kind}:\n" + "\n".join(problems)
        if policy == "adaptive":
            # one UDP datagram: its placed 5-tuple rules are on the switches too
            src, dst = fabric.hosts[0], fabric.hosts[-1]
            net.mn(src.name).cmd(f"echo kv > /dev/udp/{dst.ip}/5999")
            placed = wait_placed(proc)
            assert {r.idle_timeout for r in placed} == {IDLE_S}
            assert all(r.match_dict().get("udp_dst") == 5999 for r in placed)
            problems = switch_table_problems(proc, net, fabric, want)
            assert not problems, f"{case} on {kind}, placed {placed}:\n" + "\n".join(problems)
        assert proc.errors() == []


# ----- a policy change at run time ----------------------------------------------------
def tables_once_equal(
    proc: ControllerProcess, net: FabricNetwork, fabric: Fabric, want: RuleSet, within_s: float
) -> list[str]:
    deadline = time.monotonic() + within_s
    while True:
        problems = switch_table_problems(proc, net, fabric, want)
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(0.1)


def test_set_policy_at_run_time_rewrites_the_tables_and_refuses_a_bad_name(run_dir):
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    ecmp, shortest = compute(fabric, "ecmp"), compute(fabric, "shortest_path")
    with fabric_with_controller(fabric, "ecmp", run_dir) as (proc, net):
        problems = switch_table_problems(proc, net, fabric, ecmp)
        assert not problems, "ecmp before the change:\n" + "\n".join(problems)

        assert proc.client.set_policy("shortest_path") == {"policy": "shortest_path"}
        problems = tables_once_equal(proc, net, fabric, shortest, within_s=5)
        assert not problems, "5 s after set_policy shortest_path:\n" + "\n".join(problems)
        assert proc.client.status()["policy"] == "shortest_path"
        assert RuleSet.from_dict(proc.client.rules()) == shortest
        [change] = [e for e in proc.client.events() if e["event"] == "policy"]
        assert (change["old"], change["new"]) == ("ecmp", "shortest_path")
        assert change["switches"] == sorted(diff(ecmp, shortest))

        before = dump_all(net, fabric)
        refused = [
            ("no_such_policy", r"policy 'no_such_policy' is not known: allowed shortest_path"),
            ("tenant_paths", r"tenant_paths needs params\['tenants'\]"),  # params cannot serve it
        ]
        for name, message in refused:
            with pytest.raises(ChannelError, match=r"^policy change refused: .*" + message):
                proc.client.set_policy(name)
        time.sleep(0.3)  # anything sent by mistake would have reached the switches
        assert dump_all(net, fabric) == before
        assert proc.client.status()["policy"] == "shortest_path"
        assert RuleSet.from_dict(proc.client.rules()) == shortest
        assert [e["new"] for e in proc.client.events() if e["event"] == "policy"] == [
            "shortest_path"
        ]
        failed = ping_until_all(net, within_s=3)
        assert not failed, f"under shortest_path after the change, unreachable: {failed[:5]}"
        assert proc.errors() == []


def _controller_shells() -> set[int]:
    """Our child processes that are a Mininet controller node's shell (``mininet:c0``),
    zombies left out (ended, only not yet reaped)."""
    import psutil

    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "mininet:c0" in " ".join(p.cmdline()):
                found.add(p.pid)
        except psutil.Error:
            continue
    return found


def test_stopping_the_fabric_ends_its_controller_node_s_shell(run_dir):
    """Mininet's ``RemoteController.stop`` does nothing, so a run that built one fabric
    per sweep point kept one idle shell per point until it exited; the builder ends it."""
    before = _controller_shells()
    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=1)
    with fabric_with_controller(fabric, "shortest_path", run_dir):
        assert _controller_shells() - before  # the node's shell, while the fabric is up
    assert not _controller_shells() - before

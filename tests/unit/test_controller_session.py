"""The controller session in-process, Faucet-style: events go in with the
instants they were seen, what comes back is applied to fake flow tables
(plain dicts per switch), and packets are walked through those tables. So an
install, a reroute, a placement or a timing the control channel reports is
checked without os-ken, sockets or a clock.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from controller.core import FabricState
from controller.policy import compute, diff
from controller.rules import TCP, Group, Rule, RuleSet, SwitchChanges
from controller.session import ControllerSession, Flow, PortCounters, SwitchMessages
from controller.walk import trace
from experiments.analysis.metrics.faults import fault_timings
from topologies import Fabric, spine_leaf

MS = 1_000_000
T0 = 5_000 * MS


def fabric() -> Fabric:
    return spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)  # h0 h1 on leaf0, h2 h3 on leaf1


class FlowTables:
    """The switches' flow and group tables, changed only by what the session
    sends; it refuses a rule that points at a group not there."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.flows: dict[str, dict[tuple, Rule]] = {s.name: {} for s in fabric.switches}
        self.groups: dict[str, dict[int, Group]] = {s.name: {} for s in fabric.switches}
        self.barriers: Counter[str] = Counter()  # barrier requests not yet answered
        self.stats_requests: Counter[str] = Counter()

    def apply(self, messages: list[SwitchMessages]) -> list[SwitchMessages]:
        for out in messages:
            flows, groups = self.flows[out.switch], self.groups[out.switch]
            if out.wipe:
                flows.clear()
                groups.clear()
            ch = out.changes
            for g in ch.groups_add:
                assert g.group_id not in groups, f"{out.switch}: group {g.group_id} added twice"
                groups[g.group_id] = g
            for g in ch.groups_modify:
                assert g.group_id in groups, f"{out.switch}: missing group {g.group_id} modified"
                groups[g.group_id] = g
            for r in ch.rules_add:
                assert r.group() in (None, *groups), f"{r} points at a missing group"
                flows[r.key()] = r
            for r in ch.rules_delete:
                flows.pop(r.key(), None)
            for g in ch.groups_delete:
                del groups[g.group_id]
            assert all(r.group() in (None, *groups) for r in flows.values())
            self.barriers[out.switch] += out.barrier
            self.stats_requests[out.switch] += out.port_stats
        return messages

    def ack(self, session: ControllerSession, now_ns: int, *switches: str) -> None:
        """Every barrier outstanding on ``switches`` (default: all) answered at ``now_ns``."""
        for name in switches or list(self.barriers):
            for _ in range(self.barriers.pop(name, 0)):
                session.barrier_reply(self.fabric.node(name).dpid, now_ns)

    def ruleset(self) -> RuleSet:
        return RuleSet(
            rules=[r for table in self.flows.values() for r in table.values()],
            groups=[g for table in self.groups.values() for g in table.values()],
        )


def same(a: RuleSet, b: RuleSet) -> bool:
    return (set(a.rules), set(a.groups)) == (set(b.rules), set(b.groups))


def ready(policy: str = "ecmp", **params: Any) -> tuple[ControllerSession, FlowTables]:
    """A session whose switches all connected at T0 and acknowledged at T0 + 1 ms."""
    f = fabric()
    session, tables = ControllerSession(f, policy, params), FlowTables(f)
    for sw in f.switches:
        tables.apply(session.switch_connected(sw.dpid, T0))
    tables.ack(session, T0 + MS)
    assert status(session)["ready"]
    return session, tables


def ask(session: ControllerSession, cmd: str, **fields: Any) -> dict[str, Any]:
    answer, messages = session.control({"cmd": cmd, **fields}, T0)
    assert messages == []
    return answer


def status(session: ControllerSession) -> dict[str, Any]:
    return ask(session, "status")


def events(session: ControllerSession, kind: str) -> list[dict[str, Any]]:
    return [e for e in ask(session, "events")["events"] if e["event"] == kind]


def dpid(session: ControllerSession, name: str) -> int:
    return session.fabric.node(name).dpid


def port(session: ControllerSession, a: str, b: str) -> int:
    return session.fabric.port(a, b)


def crosses(path: list[str], a: str, b: str) -> bool:
    return any({x, y} == {a, b} for x, y in zip(path, path[1:], strict=False))


def every_path(f: Fabric, rules: RuleSet) -> list[list[str]]:
    return [p for s in f.hosts for d in f.hosts if s != d for p in trace(f, rules, s.name, d.name)]


# ----- install -------------------------------------------------------------------
def test_nothing_is_sent_until_the_last_switch_connects_then_every_switch_gets_the_policy():
    f = fabric()
    session, tables = ControllerSession(f, "ecmp"), FlowTables(f)
    assert session.switch_connected(999, T0) == []  # not a switch of this fabric
    *first, last = f.switches
    for sw in first:
        assert session.switch_connected(sw.dpid, T0) == []
    st = status(session)
    assert st["switches_missing"] == [last.name] and not st["ready"]

    sent = tables.apply(session.switch_connected(last.dpid, T0 + MS))
    assert sorted(m.switch for m in sent) == sorted(s.name for s in f.switches)
    assert all(m.wipe and m.barrier for m in sent)
    assert same(tables.ruleset(), compute(f, "ecmp"))
    # Every pair is delivered (a drop raises); the 8 pairs across leaves on either spine.
    assert len(every_path(f, tables.ruleset())) == 4 + 8 * 2
    st = status(session)
    assert st["switches_missing"] == [] and st["rules_installed"] == len(compute(f, "ecmp").rules)
    assert not st["ready"]  # nothing acknowledged yet


def test_install_ms_runs_from_the_last_connection_to_the_last_barrier_reply():
    f = fabric()
    session, tables = ControllerSession(f, "ecmp"), FlowTables(f)
    for i, sw in enumerate(f.switches):
        tables.apply(session.switch_connected(sw.dpid, T0 + 10 * i * MS))  # last at T0 + 30 ms
    tables.ack(session, T0 + 45 * MS, "leaf0", "leaf1", "spine0")
    assert not status(session)["ready"] and events(session, "ready") == []
    tables.ack(session, T0 + 72 * MS, "spine1")
    (ev,) = events(session, "ready")
    assert ev["install_ms"] == 42.0 and ev["t_ns"] == T0 + 72 * MS
    session.barrier_reply(dpid(session, "leaf0"), T0 + 90 * MS)  # a stray reply
    assert len(events(session, "ready")) == 1


def test_a_port_change_before_the_first_install_is_sent_with_it():
    f = fabric()
    session, tables = ControllerSession(f, "ecmp"), FlowTables(f)
    session.switch_connected(dpid(session, "leaf0"), T0)
    assert (
        session.port_status(dpid(session, "leaf0"), port(session, "leaf0", "spine0"), False, T0)
        == []
    )
    for sw in f.switches[1:]:
        tables.apply(session.switch_connected(sw.dpid, T0 + MS))
    down = FabricState().with_link("leaf0", "spine0", up=False)
    assert same(tables.ruleset(), compute(f, "ecmp", down))
    assert events(session, "reroute") == []


# ----- link state and reroute ------------------------------------------------------
def test_a_link_down_reroutes_the_affected_switches_around_it_and_back_when_it_is_up():
    session, tables = ready()
    f, before = session.fabric, compute(session.fabric, "ecmp")
    leaf_port, spine_port = port(session, "leaf0", "spine0"), port(session, "spine0", "leaf0")
    sent = tables.apply(session.port_status(dpid(session, "leaf0"), leaf_port, False, T0))
    down = compute(f, "ecmp", FabricState().with_link("leaf0", "spine0", up=False))
    assert {m.switch for m in sent} == set(diff(before, down)) != set()
    assert all(m.barrier and not m.wipe for m in sent)
    assert same(tables.ruleset(), down)
    assert not any(crosses(p, "leaf0", "spine0") for p in every_path(f, tables.ruleset()))
    assert status(session)["links_down"] == ["leaf0-spine0"]

    # The same status again (a switch repeats it): nothing new happened.
    assert session.port_status(dpid(session, "leaf0"), leaf_port, False, T0) == []
    # The other end of the same link: nothing new to route around.
    assert session.port_status(dpid(session, "spine0"), spine_port, False, T0) == []
    # One end up while the other is still down: the link stays down.
    assert session.port_status(dpid(session, "leaf0"), leaf_port, True, T0) == []
    assert status(session)["links_down"] == ["leaf0-spine0"]
    tables.apply(session.port_status(dpid(session, "spine0"), spine_port, True, T0))
    assert same(tables.ruleset(), before) and status(session)["links_down"] == []
    reroutes = events(session, "reroute")
    assert [r["down"] for r in reroutes] == [["leaf0-spine0"], []]
    assert [e["event"] for e in ask(session, "events")["events"]].count("port_down") == 2


def test_reroute_and_installed_times_are_the_differences_of_the_instants_passed_in():
    session, tables = ready()
    t_fault = T0 + 1000 * MS
    p = port(session, "leaf0", "spine0")
    tables.apply(session.port_status(dpid(session, "leaf0"), p, False, t_fault + 2 * MS))
    session.reroute_sent(t_fault + 5 * MS)
    (ev,) = events(session, "reroute")
    assert ev["reroute_ms"] == 3.0 and ev["t_last_sent_ns"] == t_fault + 5 * MS
    first, *rest = sorted(tables.barriers)
    tables.ack(session, t_fault + 7 * MS, *rest)
    assert "installed_ms" not in events(session, "reroute")[0]  # one switch still to answer
    tables.ack(session, t_fault + 11 * MS, first)
    (ev,) = events(session, "reroute")
    assert ev["installed_ms"] == 9.0 and ev["t_installed_ns"] == t_fault + 11 * MS
    sent = tables.apply(session.control({"cmd": "set_policy", "policy": "adaptive"}, t_fault)[1])
    assert sent, "the packet-in rules are new"
    tables.ack(session, t_fault + 50 * MS)  # a later change acknowledged: not the reroute's
    assert events(session, "reroute")[0]["installed_ms"] == 9.0

    # What a run's report shows for this fault, timed from the injector's instant.
    applied = [
        {
            "event": "link_down",
            "link": ["leaf0", "spine0"],
            "t_start_ns": t_fault,
            "t_ns": t_fault + MS,
        }
    ]
    (row,) = fault_timings(applied, ask(session, "events")["events"], session.fabric)
    assert (row["detected_ms"], row["last_rule_sent_ms"], row["installed_ms"]) == (2, 5, 11)


def test_a_delayed_detection_is_timed_when_the_controller_acted_and_keeps_when_it_heard():
    session, tables = ready()
    t_fault = T0 + 1000 * MS
    p = port(session, "leaf0", "spine0")
    heard, acted = t_fault + 1 * MS, t_fault + 51 * MS  # detect_ms 50
    tables.apply(session.port_status(dpid(session, "leaf0"), p, False, acted, heard))
    (ev,) = events(session, "port_down")
    assert ev["t_ns"] == acted and ev["heard_ns"] == heard
    applied = [
        {
            "event": "link_down",
            "link": ["leaf0", "spine0"],
            "t_start_ns": t_fault,
            "t_ns": t_fault + MS,
        }
    ]
    (row,) = fault_timings(applied, ask(session, "events")["events"], session.fabric)
    assert row["detected_ms"] == 51  # the reroute starts from the delayed detection


def test_a_reroute_whose_sending_never_finished_is_not_timed_by_a_later_port_status():
    session, _ = ready()
    p = port(session, "leaf0", "spine0")
    session.port_status(dpid(session, "leaf0"), p, False, T0)  # its sending failed: no stamp
    session.port_status(dpid(session, "leaf0"), p, False, T0 + 50 * MS)  # a repeat
    session.reroute_sent(T0 + 51 * MS)
    (ev,) = events(session, "reroute")
    assert ev["reroute_ms"] is None and ev["t_last_sent_ns"] is None


def test_every_barrier_sent_must_be_answered_before_a_reroute_counts_as_installed():
    session, tables = ready("adaptive")
    h0, h2 = (session.fabric.node(h).ip for h in ("h0", "h2"))
    placed = tables.apply(session.packet_in(Flow(h0, h2, TCP, 40000, 5201), T0))
    via = placed[1].switch
    tables.apply(
        session.port_status(
            dpid(session, "leaf0"), port(session, "leaf0", via), False, T0 + 10 * MS
        )
    )
    assert tables.barriers["leaf0"] == 2  # the new routes, then the stale placement's delete
    session.barrier_reply(dpid(session, "leaf0"), T0 + 12 * MS)
    tables.barriers["leaf0"] -= 1
    tables.ack(session, T0 + 13 * MS, *(s for s in tables.barriers if s != "leaf0"))
    assert "installed_ms" not in events(session, "reroute")[0]
    tables.ack(session, T0 + 20 * MS, "leaf0")
    assert events(session, "reroute")[0]["installed_ms"] == 10.0


# ----- adaptive placement ------------------------------------------------------------
def placed_path(session: ControllerSession, tables: FlowTables, flow: Flow) -> list[str]:
    f = session.fabric
    src, dst = (f.host_by_ip(ip).name for ip in (flow.src_ip, flow.dst_ip))
    (path,) = trace(
        f, tables.ruleset(), src, dst, ip_proto=TCP, tcp_src=flow.sport, tcp_dst=flow.dport
    )
    return path


def test_a_new_flow_is_placed_egress_first_on_one_path_and_held_for_a_second():
    session, tables = ready("adaptive")
    f = session.fabric
    flow = Flow(f.node("h0").ip, f.node("h2").ip, TCP, 40000, 5201)
    assert (
        len(trace(f, tables.ruleset(), "h0", "h2", ip_proto=TCP, tcp_src=40000, tcp_dst=5201)) == 2
    )  # # before: ECMP, either spine
    sent = tables.apply(session.packet_in(flow, T0))
    assert [m.switch for m in sent][::2] == ["leaf1", "leaf0"]  # egress switch first
    assert not any(m.barrier for m in sent)
    path = placed_path(session, tables, flow)
    assert path[2] == sent[1].switch
    assert status(session)["flows_placed"] == 1

    assert session.packet_in(flow, T0 + 999 * MS) == []  # its rules are still going in
    assert len(session.packet_in(flow, T0 + 1000 * MS)) == 3  # held no longer
    assert status(session)["flows_placed"] == 2


@pytest.mark.parametrize("loaded", ["spine0", "spine1"])
def test_a_new_flow_is_placed_away_from_the_spine_the_port_counters_show_loaded(loaded):
    session, tables = ready("adaptive")
    f = session.fabric
    egress = port(session, loaded, "leaf1")
    for t_ns, sent_bytes in ((T0, 0), (T0 + 200 * MS, 25_000_000)):  # 1 Gbit/s
        session.port_stats(
            dpid(session, loaded), [PortCounters(egress, sent_bytes, 0, 0, 0, 0)], t_ns
        )
    flow = Flow(f.node("h0").ip, f.node("h2").ip, TCP, 40000, 5201)
    tables.apply(session.packet_in(flow, T0 + 300 * MS))
    assert loaded not in placed_path(session, tables, flow)


def test_addresses_outside_the_fabric_and_other_policies_place_nothing():
    session, _ = ready("adaptive")
    h0 = session.fabric.node("h0").ip
    assert session.packet_in(Flow("192.168.7.7", h0, TCP, 1, 2), T0) == []
    assert session.packet_in(Flow(h0, "172.16.0.9", TCP, 1, 2), T0) == []
    assert status(session)["flows_placed"] == 0
    ecmp, _ = ready("ecmp")
    assert not ecmp.places_flows
    assert ecmp.packet_in(Flow(h0, session.fabric.node("h2").ip, TCP, 1, 2), T0) == []


def test_placed_rules_that_idle_out_are_no_longer_listed():
    session, tables = ready("adaptive")
    f = session.fabric
    flow = Flow(f.node("h0").ip, f.node("h2").ip, TCP, 40000, 5201)
    first, *rest = [m.changes.rules_add[0] for m in tables.apply(session.packet_in(flow, T0))]
    other = dict(first.match, tcp_src=40001)
    session.flow_removed(dpid(session, first.switch), first.table, first.priority, other)
    assert len(ask(session, "rules")["placed"]) == 3  # another flow's removal
    session.flow_removed(
        dpid(session, first.switch), first.table, first.priority, dict(first.match)
    )
    assert [Rule.from_dict(r) for r in ask(session, "rules")["placed"]] == rest
    for r in rest:
        session.flow_removed(dpid(session, r.switch), r.table, r.priority, dict(r.match))
    assert ask(session, "rules")["placed"] == []


def test_a_link_failure_deletes_placed_flows_through_it_and_they_are_placed_again_at_once():
    session, tables = ready("adaptive")
    f = session.fabric
    flow = Flow(f.node("h0").ip, f.node("h2").ip, TCP, 40000, 5201)
    tables.apply(session.packet_in(flow, T0))
    via = placed_path(session, tables, flow)[2]
    sent = tables.apply(
        session.port_status(
            dpid(session, "leaf1"), port(session, "leaf1", via), False, T0 + 100 * MS
        )
    )
    deleted = [r for m in sent for r in m.changes.rules_delete if r.idle_timeout]
    assert {r.switch for r in deleted} == {"leaf0", via, "leaf1"}
    assert events(session, "reroute")[0]["stale_placed"] == 3
    assert ask(session, "rules")["placed"] == []
    # Its next packet, well within the hold, is placed on the spine still up.
    tables.apply(session.packet_in(flow, T0 + 200 * MS))
    path = placed_path(session, tables, flow)
    assert via not in path and status(session)["flows_placed"] == 2


# ----- counters ------------------------------------------------------------------------
def test_port_rates_are_byte_deltas_over_the_instants_between_replies():
    session, _ = ready()
    leaf0 = dpid(session, "leaf0")
    session.port_stats(
        leaf0, [PortCounters(3, 1_000, 500, 10, 5, 0), PortCounters(0xFFFFFFFE, 9, 9, 9, 9, 9)], T0
    )
    first = ask(session, "ports")["ports"]["leaf0"]
    assert list(first) == ["3"]  # the LOCAL port is not a fabric port
    assert (first["3"]["tx_bps"], first["3"]["rx_bps"], first["3"]["t_ns"]) == (0.0, 0.0, T0)
    session.port_stats(leaf0, [PortCounters(3, 26_000, 500, 30, 5, 2)], T0 + 200 * MS)
    entry = ask(session, "ports")["ports"]["leaf0"]["3"]
    assert entry["tx_bps"] == pytest.approx(1e6) and entry["rx_bps"] == 0.0
    assert (entry["tx_packets"], entry["tx_dropped"], entry["t_ns"]) == (30, 2, T0 + 200 * MS)
    session.port_stats(leaf0, [PortCounters(3, 100, 100, 1, 1, 0)], T0 + 400 * MS)  # reset
    entry = ask(session, "ports")["ports"]["leaf0"]["3"]
    assert (entry["tx_bps"], entry["rx_bps"]) == (0.0, 0.0)
    session.port_stats(leaf0, [PortCounters(3, 900, 100, 1, 1, 0)], T0 + 400 * MS)  # same instant
    assert ask(session, "ports")["ports"]["leaf0"]["3"]["tx_bps"] == 0.0


def test_a_poll_asks_every_connected_switch_and_only_those():
    f = fabric()
    session, tables = ControllerSession(f, "ecmp"), FlowTables(f)
    for name in ("leaf0", "spine1"):
        session.switch_connected(dpid(session, name), T0)
    tables.apply(session.poll())
    assert tables.stats_requests == {"leaf0": 1, "spine1": 1}
    session.switch_disconnected(dpid(session, "spine1"), T0)
    tables.apply(session.poll())
    assert tables.stats_requests == {"leaf0": 2, "spine1": 1}


# ----- switches that go away -------------------------------------------------------------
def test_a_switch_that_reconnects_gets_its_tables_back_and_placements_are_forgotten():
    session, tables = ready("adaptive")
    f = session.fabric
    tables.apply(session.packet_in(Flow(f.node("h0").ip, f.node("h2").ip, TCP, 1, 2), T0))
    session.switch_disconnected(dpid(session, "spine1"), T0 + 5 * MS)
    st = status(session)
    assert st["switches_missing"] == ["spine1"] and "spine1" not in st["switches_connected"]
    (ev,) = events(session, "switch_disconnected")
    assert (ev["switch"], ev["t_ns"]) == ("spine1", T0 + 5 * MS)

    tables.flows["spine1"].clear()  # a restarted switch has empty tables
    tables.groups["spine1"].clear()
    sent = tables.apply(session.switch_connected(dpid(session, "spine1"), T0 + 9 * MS))
    assert sorted(m.switch for m in sent) == sorted(s.name for s in f.switches)
    assert same(tables.ruleset(), compute(f, "adaptive"))
    assert ask(session, "rules")["placed"] == []
    assert [e["reason"] for e in events(session, "install")] == ["all switches connected"] * 2


def test_a_switch_lost_before_acknowledging_its_install_does_not_keep_the_controller_waiting():
    f = fabric()
    session, tables = ControllerSession(f, "ecmp"), FlowTables(f)
    for sw in f.switches:
        tables.apply(session.switch_connected(sw.dpid, T0))
    tables.ack(session, T0 + MS, "leaf0", "leaf1", "spine0")
    session.switch_disconnected(dpid(session, "spine1"), T0 + 2 * MS)
    tables.barriers.pop("spine1")  # its connection, and the barrier on it, are gone
    tables.apply(session.switch_connected(dpid(session, "spine1"), T0 + 3 * MS))
    tables.ack(session, T0 + 8 * MS)
    assert status(session)["ready"]
    assert events(session, "ready")[0]["install_ms"] == 5.0


# ----- control channel ---------------------------------------------------------------------
def test_a_policy_change_sends_exactly_the_difference_and_a_refused_one_changes_nothing():
    session, tables = ready("ecmp")
    f = session.fabric
    before, after = compute(f, "ecmp"), compute(f, "shortest_path")
    answer, sent = session.control({"cmd": "set_policy", "policy": "shortest_path"}, T0 + MS)
    assert answer == {"policy": "shortest_path"}
    changes = diff(before, after)
    assert {m.switch: m.changes for m in sent} == changes and all(m.barrier for m in sent)
    tables.apply(sent)
    assert same(tables.ruleset(), after)
    assert RuleSet.from_dict(ask(session, "rules")["rules"]) == after
    (ev,) = events(session, "policy")
    assert (ev["old"], ev["new"], ev["switches"], ev["t_ns"]) == (
        "ecmp",
        "shortest_path",
        sorted(changes),
        T0 + MS,
    )

    for bad, why in (
        ("bogus", "policy 'bogus' is not known"),
        ("tenant_paths", "needs params['tenants']"),
    ):
        answer, sent = session.control({"cmd": "set_policy", "policy": bad}, T0 + 2 * MS)
        assert answer["error"].startswith("policy change refused: ") and why in answer["error"]
        assert sent == []
    assert status(session)["policy"] == "shortest_path"
    assert RuleSet.from_dict(ask(session, "rules")["rules"]) == after


def test_a_policy_change_before_the_first_install_is_what_gets_installed():
    f = fabric()
    session, tables = ControllerSession(f, "ecmp"), FlowTables(f)
    *first, last = f.switches
    for sw in first:
        session.switch_connected(sw.dpid, T0)
    answer, sent = session.control({"cmd": "set_policy", "policy": "shortest_path"}, T0)
    assert answer == {"policy": "shortest_path"} and sent == []
    for sw in f.switches:
        tables.apply(session.switch_connected(sw.dpid, T0))
    assert same(tables.ruleset(), compute(f, "shortest_path"))


def test_status_reports_the_errors_given_and_an_unknown_command_is_named():
    session, _ = ready()
    answer, _ = session.control({"cmd": "status"}, T0, ["kvfabric.controller: boom"])
    assert answer["errors"] == ["kvfabric.controller: boom"] and answer["policy"] == "ecmp"
    answer, sent = session.control({"cmd": "reboot"}, T0)
    assert (
        answer == {"error": "unknown command 'reboot': status, rules, ports, events, set_policy"}
        and sent == []
    )


# ----- what the app makes of it ------------------------------------------------------------
def test_the_app_sends_wipe_groups_flows_deletions_barrier_and_stats_request_in_that_order():
    pytest.importorskip("os_ken")
    from types import SimpleNamespace

    from os_ken.ofproto import ofproto_v1_3 as OFP
    from os_ken.ofproto import ofproto_v1_3_parser as PARSER

    from controller import ofp

    dp = SimpleNamespace(ofproto=OFP, ofproto_parser=PARSER)
    rules = compute(fabric(), "ecmp")
    g1, g2 = rules.groups[:2]
    r1, r2 = rules.rules[:2]
    changes = SwitchChanges(
        rules_add=[r1], rules_delete=[r2], groups_add=[g1], groups_modify=[g2], groups_delete=[g1]
    )
    out = SwitchMessages("leaf0", changes, wipe=True, barrier=True, port_stats=True)
    sent = [(type(m).__name__, getattr(m, "command", None)) for m in ofp.encode(dp, out)]
    assert sent == [
        ("OFPFlowMod", OFP.OFPFC_DELETE),
        ("OFPGroupMod", OFP.OFPGC_DELETE),  # the wipe
        ("OFPGroupMod", OFP.OFPGC_ADD),
        ("OFPGroupMod", OFP.OFPGC_MODIFY),
        ("OFPFlowMod", OFP.OFPFC_ADD),
        ("OFPFlowMod", OFP.OFPFC_DELETE_STRICT),
        ("OFPGroupMod", OFP.OFPGC_DELETE),
        ("OFPBarrierRequest", None),
        ("OFPPortStatsRequest", None),
    ]

"""The controller's state machine, pure: each OpenFlow event the os-ken app
decodes comes in with the instant it was seen (``now_ns``, monotonic
nanoseconds), and what the switches must be sent goes back as data
(``SwitchMessages``). No OpenFlow library, clock, socket or thread here: the
app reads the clock once per event, calls one method under its lock and
encodes what comes back (``ofp.encode``).

What it keeps, and why:

- The switches connected. When the last one connects, every connected switch
  is wiped and given the policy's whole rule set; again whenever a switch
  (re)connects while all are (a reconnected switch has lost its tables).
- The switch ports down, hence the links down (``FabricState``). A change
  reroutes once the first install is out: the difference between the
  installed and the new rule set, and strict deletes of placed flows that
  output to a dead link (their next packet is placed afresh).
- Barriers outstanding per switch. When none are left, the first time the
  controller is ready (``install_ms``: last connection -> last barrier
  reply), later the latest reroute is acknowledged (``installed_ms``: port
  status -> last barrier reply).
- Placed flows (``adaptive``, ``ugal``) and a hold per 5-tuple: its packets keep
  reaching the controller until the placed rules are in, so it is not placed
  again for ``PLACING_HOLD_NS``. Under ``ugal``, one ``placed_paths`` event counts
  the flows placed on each route (``minimal``/``valiant``) by switch-to-switch hops.
- Port counters, and the rates between a port's successive replies.
- The event log, one dict per event with its instant ``t_ns``; a reroute
  also has ``t_last_sent_ns``/``reroute_ms`` once the app reports, with
  ``reroute_sent``, the instant its last message left. Under ``minimal``,
  ``valiant`` and ``ugal`` an install has ``path_hops`` once the events are asked
  for: ordered host pairs by the switch-to-switch hops of their longest route
  (``policy.path_hops``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from topologies import Fabric

from . import adaptive, ugal
from .core import FabricState, PolicyError
from .minimal import Hops, minimal_hops
from .policy import PLACING, compute, path_hops
from .rules import Rule, RuleSet, SwitchChanges, diff
from .ties import seed_of

log = logging.getLogger("kvfabric.controller")

PLACING_HOLD_NS = 1_000_000_000
# Beyond this many holds, those older than PLACING_FORGET_NS are forgotten.
PLACING_KEEP = 4096
PLACING_FORGET_NS = 600 * 1_000_000_000
MAX_PORT = 0xFFFFFF00  # port numbers above are OpenFlow's reserved ports (LOCAL, ...)
COMMANDS = "status, rules, ports, events, set_policy"


class Flow(NamedTuple):
    """The 5-tuple of a TCP/UDP packet the switch copied to the controller."""

    src_ip: str
    dst_ip: str
    proto: int
    sport: int
    dport: int


@dataclass(frozen=True, slots=True)
class PortCounters:
    """One port's entry in a port-stats reply (OpenFlow counters, since the port came up)."""

    port_no: int
    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    rx_packets: int
    tx_dropped: int


@dataclass
class SwitchMessages:
    """What to send one switch, in this order: a wipe (every flow and group
    deleted) if ``wipe``, ``changes`` in ``SwitchChanges`` order, a barrier
    request if ``barrier``, a port-stats request if ``port_stats``."""

    switch: str
    changes: SwitchChanges = field(default_factory=SwitchChanges)
    wipe: bool = False
    barrier: bool = False
    port_stats: bool = False


class ControllerSession:
    """One controller's view of ``fabric`` under ``policy``; see the module docstring."""

    def __init__(self, fabric: Fabric, policy: str, params: dict[str, Any] | None = None) -> None:
        self.fabric = fabric
        self.policy = policy
        self.params = dict(params or {})
        self._names = {sw.dpid: sw.name for sw in fabric.switches}
        self._host_ips = {h.ip for h in fabric.hosts}
        self._connected: dict[str, int] = {}  # switch -> instant, in connection order
        self._last_connect_ns: int | None = None
        self._ports_down: set[tuple[str, int]] = set()
        self._barriers: dict[str, int] = {}  # switch -> barrier requests not yet answered
        self._holds: dict[tuple, int] = {}  # flow match -> instant placed
        self._placed: dict[tuple, list[Rule]] = {}  # flow match -> its placed rules
        self._port_stats: dict[str, dict[int, dict[str, Any]]] = {}
        self._events: list[dict[str, Any]] = []
        self._paths_event: dict[str, Any] | None = None  # ugal: flows by route and hops
        self._minimal: tuple[FabricState, Hops] | None = None  # ugal: hops in a state
        # installs whose path_hops are not counted yet (off the install's critical path)
        self._unhopped: list[tuple[dict[str, Any], str, FabricState]] = []
        self._unsent_reroute: dict[str, Any] | None = None
        self.state = FabricState()
        self.installed = RuleSet()
        self._install_sent = False  # a port state learned after it is sent: a reroute
        self.placements = 0
        self.ready_ns: int | None = None
        self._compute()  # a bad policy or parameter fails here, before any switch

    # ----- switches --------------------------------------------------------------
    def switch_at(self, dpid: int) -> str | None:
        """The fabric's name for datapath ``dpid`` (None: not a switch of the fabric)."""
        return self._names.get(dpid)

    @property
    def places_flows(self) -> bool:
        """Whether packet-ins are placed (``adaptive``, ``ugal``): the app decodes them
        only then."""
        return self.policy in PLACING

    def switch_connected(self, dpid: int, now_ns: int) -> list[SwitchMessages]:
        """A switch finished its handshake: once all are connected, every switch's install."""
        name = self._names.get(dpid)
        if name is None:
            log.warning("ignoring switch with unknown dpid %s", dpid)
            return []
        self._connected[name] = now_ns
        self._last_connect_ns = now_ns
        log.info("switch %s connected (%d/%d)", name, len(self._connected), len(self._names))
        if len(self._connected) < len(self._names):
            return []
        return self._install_all("all switches connected", now_ns)

    def switch_disconnected(self, dpid: int, now_ns: int) -> None:
        """A switch's connection closed; its unanswered barriers are forgotten."""
        name = self._names.get(dpid)
        if name not in self._connected:
            return
        del self._connected[name]
        self._barriers.pop(name, None)
        self._event("switch_disconnected", switch=name, t_ns=now_ns)

    def barrier_reply(self, dpid: int, now_ns: int) -> None:
        """A switch applied everything sent before one barrier request."""
        name = self._names.get(dpid)
        if name is not None:
            self._barriers[name] = max(self._barriers.get(name, 0) - 1, 0)
        if len(self._connected) < len(self._names) or any(self._barriers.values()):
            return
        if self.ready_ns is None:
            self.ready_ns = now_ns
            install_ms = (now_ns - self._last_connect_ns) / 1e6  # type: ignore[operator]
            self._event("ready", install_ms=install_ms, t_ns=now_ns)
            return
        ev = next((e for e in reversed(self._events) if e["event"] == "reroute"), None)
        if ev is not None and "installed_ms" not in ev:
            ev["t_installed_ns"] = now_ns
            ev["installed_ms"] = (now_ns - ev["t_ns"]) / 1e6

    def _install_all(self, reason: str, now_ns: int) -> list[SwitchMessages]:
        rules = self._compute()
        out = []
        for name in self._connected:
            flows, groups = rules.for_switch(name)
            changes = SwitchChanges(rules_add=flows, groups_add=groups)
            out.append(self._acknowledged(SwitchMessages(name, changes, wipe=True)))
        self.installed = rules
        self._install_sent = True
        self._placed.clear()
        self._holds.clear()
        ev = self._event(
            "install", reason=reason, rules=len(rules.rules), groups=len(rules.groups), t_ns=now_ns
        )
        self._unhopped.append((ev, self.policy, self.state))  # counted when events are asked
        return out

    def _acknowledged(self, msgs: SwitchMessages) -> SwitchMessages:
        """``msgs`` ending in a barrier request, counted until its reply."""
        msgs.barrier = True
        self._barriers[msgs.switch] = self._barriers.get(msgs.switch, 0) + 1
        return msgs

    def _apply(self, new: RuleSet) -> tuple[list[SwitchMessages], list[str]]:
        """Messages moving the connected switches from ``installed`` to ``new``,
        and the switches they go to."""
        out = [
            self._acknowledged(SwitchMessages(name, ch))
            for name, ch in diff(self.installed, new).items()
            if name in self._connected
        ]
        self.installed = new
        return out, [m.switch for m in out]

    def _compute(self, policy: str | None = None) -> RuleSet:
        return compute(self.fabric, policy or self.policy, self.state, self.params)

    # ----- links -----------------------------------------------------------------
    def port_status(
        self, dpid: int, port_no: int, up: bool, now_ns: int, heard_ns: int | None = None
    ) -> list[SwitchMessages]:
        """A switch port went up or down: the reroute, if the links' state changed.
        ``heard_ns``: when the switch reported it, if the controller acts on it later
        (a detection delay); the event records both."""
        self._unsent_reroute = None  # an earlier reroute whose sending failed stays unstamped
        name = self._names.get(dpid)
        if name is None:
            return []
        key = (name, port_no)
        if (key not in self._ports_down) == up:
            return []
        (self._ports_down.discard if up else self._ports_down.add)(key)
        heard = {} if heard_ns is None else {"heard_ns": heard_ns}
        self._event(
            "port_up" if up else "port_down", switch=name, port=port_no, t_ns=now_ns, **heard
        )
        return self._reroute(now_ns)

    def reroute_sent(self, now_ns: int) -> None:
        """The app sent the last message of the reroute just returned (if any) at ``now_ns``."""
        ev, self._unsent_reroute = self._unsent_reroute, None
        if ev is not None:
            ev["t_last_sent_ns"] = now_ns
            ev["reroute_ms"] = (now_ns - ev["t_ns"]) / 1e6
            log.info("reroute sent in %.3f ms", ev["reroute_ms"])

    def _link_state(self) -> FabricState:
        state = FabricState()
        down = self._ports_down
        for link in self.fabric.links:
            if (link.a, link.a_port) in down or (link.b, link.b_port) in down:
                state = state.with_link(link.a, link.b, up=False)
        return state

    def _reroute(self, now_ns: int) -> list[SwitchMessages]:
        new_state = self._link_state()
        if new_state == self.state:
            return []
        self.state = new_state
        if not self._install_sent:  # the first install will use the new state
            return []
        out, changed = self._apply(self._compute())
        stale = adaptive.stale_placements(
            self.fabric, self.state, [r for rules in self._placed.values() for r in rules]
        )
        by_switch: dict[str, list[Rule]] = {}
        for rule in stale:
            by_switch.setdefault(rule.switch, []).append(rule)
            self._placed.pop(rule.match, None)
            self._holds.pop(rule.match, None)
        out += [
            self._acknowledged(SwitchMessages(name, SwitchChanges(rules_delete=rules)))
            for name, rules in by_switch.items()
            if name in self._connected
        ]
        self._unsent_reroute = self._event(
            "reroute",
            t_ns=now_ns,
            t_last_sent_ns=None,
            reroute_ms=None,
            switches=sorted(set(changed) | set(by_switch)),
            stale_placed=len(stale),
            down=self._links_down(),
        )
        return out

    def _links_down(self) -> list[str]:
        return sorted("-".join(sorted(p)) for p in self.state.down)

    # ----- adaptive placement ------------------------------------------------------
    def packet_in(self, flow: Flow, now_ns: int) -> list[SwitchMessages]:
        """A new flow's packet reached the controller: its placed rules, egress
        switch first (none if not ``adaptive``, outside the fabric, or held)."""
        if not self.places_flows:
            return []
        if flow.src_ip not in self._host_ips or flow.dst_ip not in self._host_ips:
            log.debug("packet-in for an address outside the fabric ignored: %s", tuple(flow))
            return []
        match = adaptive.flow_match(*flow)
        held = self._holds.get(match)
        if held is not None and now_ns - held < PLACING_HOLD_NS:
            return []
        self._holds[match] = now_ns
        loads = {
            (sw, port): st["tx_bps"]
            for sw, ports in self._port_stats.items()
            for port, st in ports.items()
        }
        rules = self._place(flow, loads, now_ns)
        self._placed[match] = rules
        self.placements += 1
        if len(self._holds) > PLACING_KEEP:
            cutoff = now_ns - PLACING_FORGET_NS
            self._holds = {m: t for m, t in self._holds.items() if t > cutoff}
        log.info("placed %s via %s", tuple(flow), [r.switch for r in rules])
        return [
            SwitchMessages(r.switch, SwitchChanges(rules_add=[r]))
            for r in rules
            if r.switch in self._connected
        ]

    def _place(self, flow: Flow, loads: dict[tuple[str, int], float], now_ns: int) -> list[Rule]:
        timeout = adaptive.idle_timeout(self.params)
        seed = seed_of(self.params)
        if self.policy != "ugal":
            return adaptive.place_flow(
                self.fabric, self.state, *flow, loads, idle_timeout_s=timeout, seed=seed
            )
        if self._minimal is None or self._minimal[0] != self.state:
            self._minimal = (self.state, minimal_hops(self.fabric, self.state.down_pairs()))
        placed = ugal.place_flow(
            self.fabric, self.state, self._minimal[1], flow, loads, seed, timeout
        )
        if placed is None:
            return []
        if self._paths_event is None:
            self._paths_event = self._event("placed_paths", t_ns=now_ns, minimal={}, valiant={})
        counts = self._paths_event[placed.route]
        counts[str(placed.hops)] = counts.get(str(placed.hops), 0) + 1
        return placed.rules

    def flow_removed(self, dpid: int, table: int, priority: int, match: dict[str, Any]) -> None:
        """A placed rule idled out (or was deleted): forget it, so the placed
        rules listed are only those still on the switches."""
        name = self._names.get(dpid)
        for key, rules in list(self._placed.items()):
            if dict(key) != match:
                continue
            left = [r for r in rules if (r.switch, r.table, r.priority) != (name, table, priority)]
            if left:
                self._placed[key] = left
            else:
                del self._placed[key]

    # ----- counters ----------------------------------------------------------------
    def poll(self) -> list[SwitchMessages]:
        """A port-stats request for every connected switch."""
        return [SwitchMessages(name, port_stats=True) for name in self._connected]

    def port_stats(self, dpid: int, counters: Iterable[PortCounters], now_ns: int) -> None:
        """A port-stats reply: each port's counters, and its rates since its previous reply."""
        name = self._names.get(dpid)
        if name is None:
            return
        ports = self._port_stats.setdefault(name, {})
        for st in counters:
            if st.port_no > MAX_PORT:
                continue
            prev = ports.get(st.port_no)
            entry = {
                "t_ns": now_ns,
                "tx_bytes": st.tx_bytes,
                "rx_bytes": st.rx_bytes,
                "tx_packets": st.tx_packets,
                "rx_packets": st.rx_packets,
                "tx_dropped": st.tx_dropped,
                "tx_bps": 0.0,
                "rx_bps": 0.0,
            }
            if prev and now_ns > prev["t_ns"]:
                dt = (now_ns - prev["t_ns"]) / 1e9
                entry["tx_bps"] = max(0, st.tx_bytes - prev["tx_bytes"]) * 8 / dt
                entry["rx_bps"] = max(0, st.rx_bytes - prev["rx_bytes"]) * 8 / dt
            ports[st.port_no] = entry

    # ----- control channel -----------------------------------------------------------
    def control(
        self, request: dict[str, Any], now_ns: int, errors: Iterable[str] = ()
    ) -> tuple[dict[str, Any], list[SwitchMessages]]:
        """A control-channel request: the answer, and what a policy change sends.
        ``errors`` are the process's error records, reported by ``status``."""
        cmd = request.get("cmd")
        if cmd == "status":
            return self._status(list(errors)), []
        if cmd == "rules":
            placed = [r.to_dict() for rules in self._placed.values() for r in rules]
            return {"rules": self.installed.to_dict(), "placed": placed}, []
        if cmd == "ports":
            return {
                "ports": {
                    sw: {str(p): dict(v) for p, v in ports.items()}
                    for sw, ports in self._port_stats.items()
                }
            }, []
        if cmd == "events":
            self._count_path_hops()
            return {"events": [dict(e) for e in self._events]}, []
        if cmd == "set_policy":
            return self._set_policy(request, now_ns)
        return {"error": f"unknown command {cmd!r}: {COMMANDS}"}, []

    def _status(self, errors: list[str]) -> dict[str, Any]:
        return {
            "ready": self.ready_ns is not None,
            "policy": self.policy,
            "switches_connected": sorted(self._connected),
            "switches_missing": sorted(set(self._names.values()) - set(self._connected)),
            "rules_installed": len(self.installed.rules),
            "groups_installed": len(self.installed.groups),
            "flows_placed": self.placements,
            "links_down": self._links_down(),
            "errors": errors,
        }

    def _set_policy(
        self, request: dict[str, Any], now_ns: int
    ) -> tuple[dict[str, Any], list[SwitchMessages]]:
        try:
            new = self._compute(str(request.get("policy")))
        except PolicyError as exc:  # the old policy stays; not a controller failure
            log.warning("policy change refused: %s", exc)
            return {"error": f"policy change refused: {exc}"}, []
        old, self.policy = self.policy, request["policy"]
        out, changed = self._apply(new) if self.ready_ns is not None else ([], [])
        self._event("policy", old=old, new=self.policy, switches=changed, t_ns=now_ns)
        return {"policy": self.policy}, out

    def _count_path_hops(self) -> None:
        """``path_hops`` of each install under a low-diameter policy, counted late: it
        walks every pair's routes, which must not delay the install it describes (so
        not while a barrier is outstanding: the readiness poll asks for events then)."""
        if self.ready_ns is None or any(self._barriers.values()):
            return
        for ev, policy, state in self._unhopped:
            hops = path_hops(self.fabric, policy, state, self.params)
            if hops is not None:
                ev["path_hops"] = hops
        self._unhopped.clear()

    def _event(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"event": event, **fields}
        self._events.append(record)
        log.info("%s %s", event, {k: v for k, v in fields.items() if k != "t_ns"})
        return record

"""The os-ken application: waits for every switch of the fabric, installs the
policy core's rules proactively, follows port status to reroute, polls port
counters, and answers a local JSON control channel. All routing decisions
come from ``controller.policy``; this module only translates and sends.

Configured by the JSON file named in ``KVFABRIC_CONTROLLER_CONFIG``:
``{"fabric": <Fabric dict>, "policy": str, "params": {...}, "socket": path,
"poll_s": float}`` (``params["poll_s"]``, if given, wins over ``poll_s``).

Every ERROR-or-worse log record goes into ``ErrorLog`` (installed by
``controller.main``), which ``status`` reports as ``errors``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.lib.packet import ipv4, packet, tcp, udp
from os_ken.ofproto import ofproto_v1_3

from topologies import Fabric

from . import adaptive, ofp
from .channel import ChannelServer, ErrorLog
from .policy import FabricState, PolicyError, compute
from .rules import TCP, UDP, Rule, RuleSet, SwitchChanges, diff

log = logging.getLogger("kvfabric.controller")


# A 5-tuple seen in a packet-in is not placed again for this long: its
# packets keep reaching the controller until the placed rules are in.
PLACING_HOLD_S = 1.0


def poll_on_deadlines(
    send: Callable[[], None],
    period_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] = hub.sleep,
) -> None:
    """Call ``send`` at ``start + k * period_s`` for k = 0, 1, ... forever: the
    time ``send`` takes and sleep overshoot never stretch the period. Deadlines
    already missed are skipped (the grid is kept, no burst of catch-up polls)."""
    start = clock()
    k = 0
    while True:
        send()
        now = clock()
        k = max(k + 1, int((now - start) / period_s) + 1)
        sleep(max(0.0, start + k * period_s - now))


class KvFabricController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    # NOTE: OSKenApp keeps its own event queue in ``self.events`` (and uses
    # ``name``, ``threads``, ``observers``, ``logger`` ...): never assign
    # those here. Shadowing ``events`` made every switch hang in CONFIG.
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with open(os.environ["KVFABRIC_CONTROLLER_CONFIG"]) as fh:
            cfg = json.load(fh)
        self.fabric = Fabric.from_dict(cfg["fabric"])
        self.policy: str = cfg["policy"]
        self.params: dict = cfg.get("params") or {}
        poll_s = self.params.get("poll_s", cfg.get("poll_s", adaptive.MAX_POLL_S))
        self.poll_s = adaptive.poll_interval({"poll_s": poll_s})
        self.by_dpid = {sw.dpid: sw.name for sw in self.fabric.switches}
        self.host_ips = {h.ip for h in self.fabric.hosts}
        self.lock = threading.RLock()
        self.datapaths: dict[str, Any] = {}
        self.state = FabricState()
        self.ports_down: set[tuple[str, int]] = set()
        self.installed = RuleSet()
        self.pending_barriers: dict[str, int] = {}
        self.event_log: list[dict] = []
        self.errors = ErrorLog.install()  # every ERROR record of the process
        self.port_stats: dict[str, dict[int, dict]] = {}
        self.placing: dict[tuple, float] = {}  # flow match -> monotonic time placed
        self.placed: dict[tuple, list[Rule]] = {}  # flow match -> its placed rules
        self.placements = 0
        self.ready_ns: int | None = None
        self.last_connect_ns: int | None = None
        compute(self.fabric, self.policy, self.state, self.params)  # fail early on bad params
        self.channel = ChannelServer(cfg["socket"], self.handle_request)
        self.channel.start()
        self.poller = hub.spawn(self._poll_ports)

    # ----- guarded handlers -------------------------------------------------
    def _guard(self, what: str, fn: Any, *args: Any) -> Any:
        """Run a handler; an exception is logged with its traceback (and so
        reported by ``status`` through ``ErrorLog``), not raised into os-ken."""
        try:
            return fn(*args)
        except Exception:
            log.error("controller exception in %s", what, exc_info=True)
            return None

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev: Any) -> None:
        self._guard("switch features", self._connected, ev.msg.datapath)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev: Any) -> None:
        self._guard("port status", self._port_status, ev.msg)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev: Any) -> None:
        self._guard("barrier", self._barrier, ev.msg.datapath)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def on_port_stats(self, ev: Any) -> None:
        self._guard("port stats", self._port_stats_reply, ev.msg)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev: Any) -> None:
        self._guard("packet in", self._packet_in, ev.msg)

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def on_flow_removed(self, ev: Any) -> None:
        self._guard("flow removed", self._flow_removed, ev.msg)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def on_state_change(self, ev: Any) -> None:
        if ev.state == DEAD_DISPATCHER:
            self._guard("switch disconnected", self._disconnected, ev.datapath)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def on_error(self, ev: Any) -> None:
        msg = ev.msg
        switch = self.by_dpid.get(msg.datapath.id, msg.datapath.id)
        log.error("OpenFlow error from %s: type=%s code=%s", switch, msg.type, msg.code)

    # ----- switches and rules -----------------------------------------------
    def _compute(self, policy: str | None = None) -> RuleSet:
        return compute(self.fabric, policy or self.policy, self.state, self.params)

    def _connected(self, dp: Any) -> None:
        name = self.by_dpid.get(dp.id)
        if name is None:
            log.warning("ignoring switch with unknown dpid %s", dp.id)
            return
        with self.lock:
            self.datapaths[name] = dp
            self.last_connect_ns = time.monotonic_ns()
            complete = len(self.datapaths) == len(self.by_dpid)
            log.info("switch %s connected (%d/%d)", name, len(self.datapaths), len(self.by_dpid))
            if complete:
                self._install_all("all switches connected")

    def _disconnected(self, dp: Any) -> None:
        name = self.by_dpid.get(dp.id)
        with self.lock:
            if name is None or self.datapaths.get(name) is not dp:
                return  # never fully connected, or already replaced by a reconnection
            del self.datapaths[name]
            self.pending_barriers.pop(name, None)
            self._event("switch_disconnected", switch=name)

    def _install_all(self, reason: str) -> None:
        """Wipe every switch and install the whole rule set (first install,
        or a switch that reconnected)."""
        with self.lock:
            rules = self._compute()
            for name, dp in self.datapaths.items():
                for msg in ofp.wipe(dp):
                    dp.send_msg(msg)
                flows, groups = rules.for_switch(name)
                self._send(name, dp, SwitchChanges(rules_add=flows, groups_add=groups))
            self.installed = rules
            self.placed.clear()
            self.placing.clear()
            self._event("install", reason=reason, rules=len(rules.rules), groups=len(rules.groups))

    def _send(self, name: str, dp: Any, ch: SwitchChanges) -> None:
        """Groups first (flows point at them), then flows, deletions last, then a barrier."""
        msgs = [ofp.group_mod(dp, g, "add") for g in ch.groups_add]
        msgs += [ofp.group_mod(dp, g, "modify") for g in ch.groups_modify]
        msgs += [ofp.flow_mod(dp, r) for r in ch.rules_add]
        msgs += [ofp.flow_mod(dp, r, delete=True) for r in ch.rules_delete]
        msgs += [ofp.group_mod(dp, g, "delete") for g in ch.groups_delete]
        for msg in msgs:
            dp.send_msg(msg)
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
        self.pending_barriers[name] = self.pending_barriers.get(name, 0) + 1

    def _apply(self, new: RuleSet) -> list[str]:
        """Move the switches from ``self.installed`` to ``new``; the switches changed."""
        changed = []
        for name, ch in diff(self.installed, new).items():
            dp = self.datapaths.get(name)
            if dp is not None:
                self._send(name, dp, ch)
                changed.append(name)
        self.installed = new
        return changed

    def _barrier(self, dp: Any) -> None:
        name = self.by_dpid.get(dp.id)
        with self.lock:
            left = self.pending_barriers.get(name, 0) - 1
            self.pending_barriers[name] = max(left, 0)
            if not self._all_acknowledged():
                return
            if self.ready_ns is None:
                self.ready_ns = time.monotonic_ns()
                self._event("ready", install_ms=(self.ready_ns - self.last_connect_ns) / 1e6)
                return
            ev = next((e for e in reversed(self.event_log) if e["event"] == "reroute"), None)
            if ev is not None and "installed_ms" not in ev:
                ev["t_installed_ns"] = time.monotonic_ns()
                ev["installed_ms"] = (ev["t_installed_ns"] - ev["t_ns"]) / 1e6

    def _all_acknowledged(self) -> bool:
        return len(self.datapaths) == len(self.by_dpid) and not any(self.pending_barriers.values())

    def _port_status(self, msg: Any) -> None:
        t_ns = time.monotonic_ns()
        dp, desc = msg.datapath, msg.desc
        name = self.by_dpid.get(dp.id)
        ofproto = dp.ofproto
        down = (
            bool(desc.state & ofproto.OFPPS_LINK_DOWN)
            or bool(desc.config & ofproto.OFPPC_PORT_DOWN)
            or msg.reason == ofproto.OFPPR_DELETE
        )
        if name is None:
            return
        key = (name, desc.port_no)
        with self.lock:
            was_down = key in self.ports_down
            if down == was_down:
                return
            (self.ports_down.add if down else self.ports_down.discard)(key)
            self._event(
                "port_down" if down else "port_up", switch=name, port=desc.port_no, t_ns=t_ns
            )
            self._reroute(t_ns)

    def _link_state(self) -> FabricState:
        state = FabricState()
        for link in self.fabric.links:
            if (link.a, link.a_port) in self.ports_down or (link.b, link.b_port) in self.ports_down:
                state = state.with_link(link.a, link.b, up=False)
        return state

    def _reroute(self, t_ns: int) -> None:
        new_state = self._link_state()
        if new_state == self.state:
            return
        self.state = new_state
        if self.ready_ns is None:  # the first install will use the new state
            return
        changed = self._apply(self._compute())
        stale = adaptive.stale_placements(
            self.fabric, self.state, [r for rules in self.placed.values() for r in rules]
        )
        by_switch: dict[str, list[Rule]] = {}
        for rule in stale:
            by_switch.setdefault(rule.switch, []).append(rule)
            self.placed.pop(rule.match, None)
            self.placing.pop(rule.match, None)
        for name, rules in by_switch.items():
            dp = self.datapaths.get(name)
            if dp is not None:
                self._send(name, dp, SwitchChanges(rules_delete=rules))
        t_sent = time.monotonic_ns()
        self._event(
            "reroute", t_ns=t_ns, t_last_sent_ns=t_sent, reroute_ms=(t_sent - t_ns) / 1e6,
            switches=sorted(set(changed) | set(by_switch)), stale_placed=len(stale),
            down=sorted("-".join(sorted(p)) for p in self.state.down),
        )  # fmt: skip

    # ----- adaptive placement -------------------------------------------------
    def _packet_in(self, msg: Any) -> None:
        if self.policy != "adaptive":
            return
        pkt = packet.Packet(bytes(msg.data))
        ip = pkt.get_protocol(ipv4.ipv4)
        if ip is None or ip.proto not in (TCP, UDP):
            return
        l4 = pkt.get_protocol(tcp.tcp) if ip.proto == TCP else pkt.get_protocol(udp.udp)
        if l4 is None:
            return
        five = (ip.src, ip.dst, ip.proto, l4.src_port, l4.dst_port)
        if ip.src not in self.host_ips or ip.dst not in self.host_ips:
            log.debug("packet-in for an address outside the fabric ignored: %s", five)
            return
        match = adaptive.flow_match(*five)
        now = time.monotonic()
        with self.lock:
            if now - self.placing.get(match, -1e9) < PLACING_HOLD_S:
                return
            self.placing[match] = now
            loads = {
                (sw, port): st["tx_bps"]
                for sw, ports in self.port_stats.items()
                for port, st in ports.items()
            }
            rules = adaptive.place_flow(
                self.fabric, self.state, *five, loads,
                idle_timeout_s=adaptive.idle_timeout(self.params),
            )  # fmt: skip
            for rule in rules:  # egress switch first
                dp = self.datapaths.get(rule.switch)
                if dp is not None:
                    dp.send_msg(ofp.flow_mod(dp, rule))
            self.placed[match] = rules
            self.placements += 1
            if len(self.placing) > 4096:  # forget old entries
                cutoff = now - 600
                self.placing = {m: t for m, t in self.placing.items() if t > cutoff}
            log.info("placed %s via %s", five, [r.switch for r in rules])

    def _flow_removed(self, msg: Any) -> None:
        """A placed rule idled out (or was deleted): forget it, so ``placed``
        lists only rules still on the switches."""
        if msg.cookie != ofp.COOKIE:
            return
        name = self.by_dpid.get(msg.datapath.id)
        fields = dict(msg.match.items())
        with self.lock:
            for match, rules in list(self.placed.items()):
                if dict(match) != fields:
                    continue
                left = [r for r in rules if (r.switch, r.table, r.priority)
                        != (name, msg.table_id, msg.priority)]  # fmt: skip
                if left:
                    self.placed[match] = left
                else:
                    del self.placed[match]

    # ----- counters ----------------------------------------------------------
    def _poll_ports(self) -> None:
        poll_on_deadlines(self._request_port_stats, self.poll_s)

    def _request_port_stats(self) -> None:
        with self.lock:
            dps = list(self.datapaths.values())
        for dp in dps:
            try:
                dp.send_msg(dp.ofproto_parser.OFPPortStatsRequest(dp, 0, dp.ofproto.OFPP_ANY))
            except Exception:  # a switch going away is not a controller failure
                log.debug("port stats request failed", exc_info=True)

    def _port_stats_reply(self, msg: Any) -> None:
        name = self.by_dpid.get(msg.datapath.id)
        now = time.monotonic_ns()
        with self.lock:
            ports = self.port_stats.setdefault(name, {})
            for st in msg.body:
                if st.port_no > 0xFFFFFF00:
                    continue
                prev = ports.get(st.port_no)
                entry = {"t_ns": now, "tx_bytes": st.tx_bytes, "rx_bytes": st.rx_bytes,
                         "tx_packets": st.tx_packets, "rx_packets": st.rx_packets,
                         "tx_dropped": st.tx_dropped, "tx_bps": 0.0, "rx_bps": 0.0}  # fmt: skip
                if prev and now > prev["t_ns"]:
                    dt = (now - prev["t_ns"]) / 1e9
                    entry["tx_bps"] = max(0, st.tx_bytes - prev["tx_bytes"]) * 8 / dt
                    entry["rx_bps"] = max(0, st.rx_bytes - prev["rx_bytes"]) * 8 / dt
                ports[st.port_no] = entry

    # ----- control channel -----------------------------------------------------
    def _event(self, event: str, **fields: Any) -> None:
        fields.setdefault("t_ns", time.monotonic_ns())
        self.event_log.append({"event": event, **fields})
        log.info("%s %s", event, {k: v for k, v in fields.items() if k != "t_ns"})

    def handle_request(self, req: dict) -> dict:
        cmd = req.get("cmd")
        with self.lock:
            if cmd == "status":
                return {
                    "ready": self.ready_ns is not None,
                    "policy": self.policy,
                    "switches_connected": sorted(self.datapaths),
                    "switches_missing": sorted(set(self.by_dpid.values()) - set(self.datapaths)),
                    "rules_installed": len(self.installed.rules),
                    "groups_installed": len(self.installed.groups),
                    "flows_placed": self.placements,
                    "links_down": sorted("-".join(sorted(p)) for p in self.state.down),
                    "errors": self.errors.snapshot(),
                }
            if cmd == "rules":
                placed = [r.to_dict() for rules in self.placed.values() for r in rules]
                return {"rules": self.installed.to_dict(), "placed": placed}
            if cmd == "ports":
                return {"ports": {sw: {str(p): v for p, v in ports.items()}
                                  for sw, ports in self.port_stats.items()}}  # fmt: skip
            if cmd == "events":
                return {"events": list(self.event_log)}
            if cmd == "set_policy":
                try:
                    new = self._compute(str(req.get("policy")))
                except PolicyError as exc:  # the old policy stays; not a controller failure
                    log.warning("policy change refused: %s", exc)
                    return {"error": f"policy change refused: {exc}"}
                old, self.policy = self.policy, req["policy"]
                changed = self._apply(new) if self.ready_ns is not None else []
                self._event("policy", old=old, new=self.policy, switches=changed)
                return {"policy": self.policy}
        return {"error": f"unknown command {cmd!r}: status, rules, ports, events, set_policy"}

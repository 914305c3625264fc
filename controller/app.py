"""The os-ken application: the shim between OpenFlow and ``ControllerSession``.

Each handler reads the clock once, decodes its event, calls the session under
one lock (the control channel answers from its own threads) and encodes and
sends what the session returns (``ofp.encode``). A port status reads it once
more after sending: when a reroute's last message left is an instant of its
own (``reroute_ms``). Every decision (when to
install, what to reroute, where to place a flow, what a request answers) is
the session's; this module decodes, sends and polls on deadlines.

Configured by the JSON file named in ``KVFABRIC_CONTROLLER_CONFIG``:
``{"fabric": <Fabric dict>, "policy": str, "params": {...}, "socket": path,
"poll_s": float, "time_dilation": float}`` (``params["poll_s"]``, if given, wins over
``poll_s``). Times in the configuration are real-equivalent; under time dilation d
(``scale.time_dilation``) the polling period and detection delays last ``× d`` on the
wall clock, as every other time of the run, and so does the adaptive policy's rules'
``idle_timeout_s`` (OpenFlow's whole wall seconds, rounded up: ``adaptive.wall_params``).

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
from .rules import TCP, UDP
from .session import ControllerSession, Flow, PortCounters, SwitchMessages

log = logging.getLogger("kvfabric.controller")


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


def decode_flow(data: bytes) -> Flow | None:
    """The 5-tuple of a packet-in's TCP/UDP over IPv4 packet (None: anything else)."""
    pkt = packet.Packet(data)
    ip = pkt.get_protocol(ipv4.ipv4)
    if ip is None or ip.proto not in (TCP, UDP):
        return None
    l4 = pkt.get_protocol(tcp.tcp) if ip.proto == TCP else pkt.get_protocol(udp.udp)
    if l4 is None:
        return None
    return Flow(ip.src, ip.dst, ip.proto, l4.src_port, l4.dst_port)


class KvFabricController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    # NOTE: OSKenApp keeps its own event queue in ``self.events`` (and uses
    # ``name``, ``threads``, ``observers``, ``logger`` ...): never assign
    # those here. Shadowing ``events`` made every switch hang in CONFIG.
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with open(os.environ["KVFABRIC_CONTROLLER_CONFIG"]) as fh:
            cfg = json.load(fh)
        params: dict = cfg.get("params") or {}
        poll_s = params.get("poll_s", cfg.get("poll_s", adaptive.MAX_POLL_S))
        dilation = float(cfg.get("time_dilation", 1.0))
        self.poll_s = adaptive.poll_interval({"poll_s": poll_s}) * dilation  # wall seconds
        self.lock = threading.RLock()
        self.datapaths: dict[str, Any] = {}  # switch name -> its os-ken datapath
        self.errors = ErrorLog.install()  # every ERROR record of the process
        fabric = Fabric.from_dict(cfg["fabric"])
        # bad params fail here; the rules' idle timeout is OpenFlow's, in wall seconds
        wall = adaptive.wall_params(cfg["policy"], params, dilation)
        self.session = ControllerSession(fabric, cfg["policy"], wall)
        # (switch, port) -> s: port events heard there are acted on this much later, as a
        # real switch's loss-of-signal or BFD timers would report them
        self.detect_s = {
            (sw, int(port)): ms / 1e3 * dilation for sw, port, ms in cfg.get("detect_ms", [])
        }
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
        self._guard("switch features", self._connected, ev.msg.datapath, time.monotonic_ns())

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev: Any) -> None:
        self._guard("port status", self._port_status, ev.msg, time.monotonic_ns())

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev: Any) -> None:
        self._guard("barrier", self._barrier, ev.msg.datapath, time.monotonic_ns())

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def on_port_stats(self, ev: Any) -> None:
        self._guard("port stats", self._port_stats_reply, ev.msg, time.monotonic_ns())

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev: Any) -> None:
        self._guard("packet in", self._packet_in, ev.msg, time.monotonic_ns())

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def on_flow_removed(self, ev: Any) -> None:
        self._guard("flow removed", self._flow_removed, ev.msg)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def on_state_change(self, ev: Any) -> None:
        if ev.state == DEAD_DISPATCHER:
            self._guard("switch disconnected", self._disconnected, ev.datapath, time.monotonic_ns())
        elif ev.state == MAIN_DISPATCHER:
            self._guard("port states", self._port_states, ev.datapath, time.monotonic_ns())

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def on_error(self, ev: Any) -> None:
        msg = ev.msg
        switch = self.session.switch_at(msg.datapath.id) or msg.datapath.id
        log.error("OpenFlow error from %s: type=%s code=%s", switch, msg.type, msg.code)

    # ----- decode, call the session, send -------------------------------------
    def _send(self, messages: list[SwitchMessages]) -> None:
        for out in messages:
            dp = self.datapaths.get(out.switch)
            if dp is not None:  # the session addresses only connected switches
                for msg in ofp.encode(dp, out):
                    dp.send_msg(msg)

    def _connected(self, dp: Any, now_ns: int) -> None:
        with self.lock:
            name = self.session.switch_at(dp.id)
            if name is not None:
                self.datapaths[name] = dp
            self._send(self.session.switch_connected(dp.id, now_ns))

    def _disconnected(self, dp: Any, now_ns: int) -> None:
        with self.lock:
            name = self.session.switch_at(dp.id)
            if name is None or self.datapaths.get(name) is not dp:
                return  # never fully connected, or already replaced by a reconnection
            del self.datapaths[name]
            self.session.switch_disconnected(dp.id, now_ns)

    def _port_states(self, dp: Any, now_ns: int) -> None:
        """A connected switch's ports as its port description reported them (os-ken asks
        before MAIN): a controller started while links were down learns of them here."""
        ofproto = dp.ofproto
        with self.lock:
            for port_no, desc in sorted((getattr(dp, "ports", None) or {}).items()):
                down = bool(desc.state & ofproto.OFPPS_LINK_DOWN) or bool(
                    desc.config & ofproto.OFPPC_PORT_DOWN
                )
                if down and port_no < ofproto.OFPP_MAX:
                    self._send(self.session.port_status(dp.id, port_no, False, now_ns))

    def _barrier(self, dp: Any, now_ns: int) -> None:
        with self.lock:
            self.session.barrier_reply(dp.id, now_ns)

    def _port_status(self, msg: Any, now_ns: int, heard_ns: int | None = None) -> None:
        dp, desc = msg.datapath, msg.desc
        delay = self.detect_s.get((self.session.switch_at(dp.id), desc.port_no))
        if delay and heard_ns is None:  # detection delay: act on it later, in order
            hub.spawn_after(delay, self._guard, "port status (delayed)", self._delayed, msg, now_ns)
            return
        ofproto = dp.ofproto
        down = (
            bool(desc.state & ofproto.OFPPS_LINK_DOWN)
            or bool(desc.config & ofproto.OFPPC_PORT_DOWN)
            or msg.reason == ofproto.OFPPR_DELETE
        )
        with self.lock:
            try:
                self._send(
                    self.session.port_status(dp.id, desc.port_no, not down, now_ns, heard_ns)
                )
            finally:  # a reroute's last-sent instant: the one instant read after sending
                self.session.reroute_sent(time.monotonic_ns())

    def _delayed(self, msg: Any, heard_ns: int) -> None:
        self._port_status(msg, time.monotonic_ns(), heard_ns)

    def _packet_in(self, msg: Any, now_ns: int) -> None:
        if not self.session.places_flows:
            return
        flow = decode_flow(bytes(msg.data))
        if flow is None:
            return
        with self.lock:
            self._send(self.session.packet_in(flow, now_ns))

    def _flow_removed(self, msg: Any) -> None:
        if msg.cookie != ofp.COOKIE:  # not a rule kvfabric installed
            return
        with self.lock:
            self.session.flow_removed(
                msg.datapath.id, msg.table_id, msg.priority, dict(msg.match.items())
            )

    # ----- counters ----------------------------------------------------------
    def _poll_ports(self) -> None:
        poll_on_deadlines(self._request_port_stats, self.poll_s)

    def _request_port_stats(self) -> None:
        with self.lock:
            requests = [(self.datapaths.get(out.switch), out) for out in self.session.poll()]
        for dp, out in requests:
            if dp is None:
                continue
            try:
                for msg in ofp.encode(dp, out):
                    dp.send_msg(msg)
            except Exception:  # a switch going away is not a controller failure
                log.debug("port stats request failed", exc_info=True)

    def _port_stats_reply(self, msg: Any, now_ns: int) -> None:
        counters = [
            PortCounters(
                st.port_no, st.tx_bytes, st.rx_bytes, st.tx_packets, st.rx_packets, st.tx_dropped
            )
            for st in msg.body
        ]
        with self.lock:
            self.session.port_stats(msg.datapath.id, counters, now_ns)

    # ----- control channel -----------------------------------------------------
    def handle_request(self, req: dict) -> dict:
        now_ns = time.monotonic_ns()
        with self.lock:
            answer, messages = self.session.control(req, now_ns, self.errors.snapshot())
            self._send(messages)
        return answer

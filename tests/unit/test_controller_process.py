"""The real controller process, without root: switches that never connect are
named after the timeout, and fake OpenFlow 1.3 switches (plain TCP sockets)
get the rules, see a policy change at run time, have adaptive flows placed
and forgotten, and go away; an exception inside os-ken is reported on the
channel. Port counters are polled on fixed deadlines, never slower than 200 ms.
"""

from __future__ import annotations

import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("os_ken")

from os_ken.lib.packet import ethernet, ipv4, packet, tcp  # noqa: E402
from os_ken.ofproto import ofproto_parser  # noqa: E402
from os_ken.ofproto import ofproto_v1_3 as OFP  # noqa: E402
from os_ken.ofproto import ofproto_v1_3_parser as PARSER  # noqa: E402

from controller.app import poll_on_deadlines  # noqa: E402
from controller.channel import ChannelError, ErrorLog  # noqa: E402
from controller.ofp import COOKIE  # noqa: E402
from controller.policy import PolicyError, compute, diff  # noqa: E402
from controller.process import LOG_COPY_ENV, ControllerError, ControllerProcess  # noqa: E402
from controller.rules import Rule, RuleSet  # noqa: E402
from topologies import Fabric, spine_leaf  # noqa: E402

DP = SimpleNamespace(ofproto=OFP, ofproto_parser=PARSER)  # enough to parse FlowMods


def _can_listen() -> str | None:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
        with tempfile.TemporaryDirectory(prefix="kvf-u-") as d, socket.socket(socket.AF_UNIX) as u:
            u.bind(str(Path(d) / "s"))
    except OSError as exc:
        return f"no loopback TCP or Unix sockets here: {exc}"
    return None


pytestmark = pytest.mark.skipif(_can_listen() is not None, reason=str(_can_listen()))


def small() -> Fabric:
    return spine_leaf(spines=2, leaves=2, hosts_per_leaf=1)  # leaf0..1, spine0..1; h0, h1


def dpid(fabric: Fabric, name: str) -> int:
    return fabric.node(name).dpid


class FakeSwitch:
    """An OpenFlow 1.3 'switch' on a plain TCP socket: HELLO, FEATURES_REPLY
    with ``dpid``, empty port-description and port-stats replies, echo and
    barrier replies; it records the FlowMods and port-stats requests it gets."""

    def __init__(self, port: int, dpid: int) -> None:
        self.dpid = dpid
        self.sock = _connect(port)
        self.lock = threading.Lock()
        self.flow_mods: list[Any] = []
        self.stats_at: list[float] = []
        self.barriers = 0
        self.send(OFP.OFPT_HELLO)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def send(self, msg_type: int, body: bytes = b"", xid: int = 0) -> None:
        head = struct.pack(OFP.OFP_HEADER_PACK_STR, OFP.OFP_VERSION, msg_type, 8 + len(body), xid)
        self.sock.sendall(head + body)

    def close(self) -> None:
        with suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _serve(self) -> None:
        buf = b""
        with suppress(OSError):
            while data := self.sock.recv(65536):
                buf += data
                while len(buf) >= 8:
                    _, msg_type, length, xid = struct.unpack_from(OFP.OFP_HEADER_PACK_STR, buf)
                    if len(buf) < length:
                        break
                    self._answer(msg_type, xid, buf[:length])
                    buf = buf[length:]

    def _answer(self, msg_type: int, xid: int, raw: bytes) -> None:
        if msg_type == OFP.OFPT_FEATURES_REQUEST:
            body = struct.pack(OFP.OFP_SWITCH_FEATURES_PACK_STR, self.dpid, 0, 254, 0, 0, 0)
            self.send(OFP.OFPT_FEATURES_REPLY, body, xid)
        elif msg_type == OFP.OFPT_ECHO_REQUEST:
            self.send(OFP.OFPT_ECHO_REPLY, raw[8:], xid)
        elif msg_type == OFP.OFPT_BARRIER_REQUEST:
            with self.lock:
                self.barriers += 1
            self.send(OFP.OFPT_BARRIER_REPLY, b"", xid)
        elif msg_type == OFP.OFPT_MULTIPART_REQUEST:
            (kind,) = struct.unpack_from("!H", raw, 8)
            if kind == OFP.OFPMP_PORT_STATS:
                with self.lock:
                    self.stats_at.append(time.monotonic())
            self.send(OFP.OFPT_MULTIPART_REPLY, struct.pack("!HH4x", kind, 0), xid)
        elif msg_type == OFP.OFPT_FLOW_MOD:
            msg = ofproto_parser.msg(DP, OFP.OFP_VERSION, msg_type, len(raw), xid, raw)
            with self.lock:
                self.flow_mods.append(msg)

    def packet_in(self, src: str, dst: str, sport: int, dport: int, in_port: int = 1) -> None:
        pkt = packet.Packet()
        pkt.add_protocol(ethernet.ethernet(ethertype=0x0800))
        pkt.add_protocol(ipv4.ipv4(src=src, dst=dst, proto=6))
        pkt.add_protocol(tcp.tcp(src_port=sport, dst_port=dport))
        pkt.serialize()
        data = bytes(pkt.data)
        body = bytearray(
            struct.pack(
                OFP.OFP_PACKET_IN_PACK_STR, OFP.OFP_NO_BUFFER, len(data), OFP.OFPR_ACTION, 1, COOKIE
            )
        )
        PARSER.OFPMatch(in_port=in_port).serialize(body, len(body))
        self.send(OFP.OFPT_PACKET_IN, bytes(body) + b"\0\0" + data)

    def flow_removed(self, rule: Rule) -> None:
        body = bytearray(
            struct.pack(
                OFP.OFP_FLOW_REMOVED_PACK_STR0,
                COOKIE,
                rule.priority,
                OFP.OFPRR_IDLE_TIMEOUT,
                rule.table,
                5,
                0,
                rule.idle_timeout,
                0,
                10,
                1000,
            )
        )
        PARSER.OFPMatch(**dict(rule.match)).serialize(body, len(body))
        self.send(OFP.OFPT_FLOW_REMOVED, bytes(body))

    def mods_since(self, mark: int) -> list[Any]:
        with self.lock:
            return list(self.flow_mods[mark:])


def _connect(port: int, within_s: float = 10.0) -> socket.socket:
    """Connect as a switch does: retry while the controller's OpenFlow listener is not up
    yet (it opens a moment after the control channel that ``start`` waits for)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def controller(fabric: Fabric, policy: str, **kw: Any) -> Iterator[ControllerProcess]:
    with (
        tempfile.TemporaryDirectory(prefix="kvf-u-") as run_dir,  # short Unix socket path
        ControllerProcess(fabric, policy, Path(run_dir), **kw) as proc,
    ):
        yield proc


@contextmanager
def switches(proc: ControllerProcess, names: list[str]) -> Iterator[dict[str, FakeSwitch]]:
    fakes = {name: FakeSwitch(proc.port, dpid(proc.fabric, name)) for name in names}
    try:
        yield fakes
    finally:
        for fake in fakes.values():
            fake.close()


def until(what: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := what():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def named_missing(exc: ControllerError) -> set[str]:
    return set(str(exc).rsplit(": ", 1)[1].split(", "))


# ----- switches that never connect ------------------------------------------------
def test_a_fabric_whose_switches_never_connect_fails_naming_every_switch():
    fabric = small()
    with controller(fabric, "ecmp") as proc, pytest.raises(ControllerError) as info:
        proc.wait_ready(timeout_s=0.5)
    assert "did not connect within 0.5 s" in str(info.value)
    assert named_missing(info.value) == {s.name for s in fabric.switches}


def test_only_the_switches_that_never_connected_are_named():
    fabric = small()
    with controller(fabric, "ecmp") as proc, switches(proc, ["leaf1"]):
        until(lambda: proc.client.status()["switches_connected"] == ["leaf1"])
        with pytest.raises(ControllerError) as info:
            proc.wait_ready(timeout_s=0.5)
        assert named_missing(info.value) == {"leaf0", "spine0", "spine1"}
        assert proc.errors() == []


# ----- rules and a policy change at run time ------------------------------------------
def rule_keys(mods: list[Any], command: int) -> set[tuple]:
    return {
        (m.table_id, m.priority, tuple(sorted(m.match.items())))
        for m in mods
        if m.command == command
    }


def core_keys(rules: list[Rule]) -> set[tuple]:
    return {(r.table, r.priority, tuple(sorted(r.match))) for r in rules}


def test_a_policy_change_at_run_time_sends_the_difference_and_a_bad_one_changes_nothing():
    fabric = small()
    names = [s.name for s in fabric.switches]
    with controller(fabric, "ecmp") as proc, switches(proc, names) as fakes:
        status = proc.wait_ready(timeout_s=10)
        before = compute(fabric, "ecmp")
        assert status["policy"] == "ecmp"
        assert status["rules_installed"] == len(before.rules)
        assert RuleSet.from_dict(proc.client.rules()) == before
        marks = {n: len(f.flow_mods) for n, f in fakes.items()}
        barriers = {n: f.barriers for n, f in fakes.items()}

        assert proc.client.set_policy("shortest_path") == {"policy": "shortest_path"}
        after = compute(fabric, "shortest_path")
        assert proc.client.status()["policy"] == "shortest_path"
        assert RuleSet.from_dict(proc.client.rules()) == after
        changes = diff(before, after)
        assert changes, "the two policies should differ on this fabric"
        for name, ch in changes.items():
            until(lambda n=name: fakes[n].barriers > barriers[n])
            mods = fakes[name].mods_since(marks[name])
            assert rule_keys(mods, OFP.OFPFC_ADD) == core_keys(ch.rules_add)
            assert rule_keys(mods, OFP.OFPFC_DELETE_STRICT) == core_keys(ch.rules_delete)
        event = [e for e in proc.client.events() if e["event"] == "policy"][-1]
        assert (event["old"], event["new"]) == ("ecmp", "shortest_path")

        marks = {n: len(f.flow_mods) for n, f in fakes.items()}
        for bad, why in (
            ("bogus", "policy 'bogus' is not known"),
            ("tenant_paths", "needs params\\['tenants'\\]"),
        ):
            with pytest.raises(ChannelError, match=f"policy change refused: .*{why}"):
                proc.client.set_policy(bad)
        status = proc.client.status()
        assert status["policy"] == "shortest_path"
        assert status["errors"] == []
        assert RuleSet.from_dict(proc.client.rules()) == after
        assert all(len(f.flow_mods) == marks[n] for n, f in fakes.items())


# ----- adaptive placement, flow removal, switch disconnection --------------------------
def test_adaptive_ignores_outside_addresses_places_fabric_flows_and_forgets_removed_rules():
    fabric = small()
    names = [s.name for s in fabric.switches]
    with controller(fabric, "adaptive") as proc, switches(proc, names) as fakes:
        proc.wait_ready(timeout_s=10)
        h0, h1 = (h.ip for h in fabric.hosts)
        fakes["leaf0"].packet_in("192.168.7.7", h1, 40000, 5201)  # not a fabric address
        fakes["leaf0"].packet_in(h0, "172.16.0.9", 40001, 5201)
        fakes["leaf0"].packet_in(h0, h1, 40002, 5201)
        until(lambda: proc.client.status()["flows_placed"] >= 1)
        status = proc.client.status()
        assert status["errors"] == []
        assert status["flows_placed"] == 1
        placed = [Rule.from_dict(r) for r in proc.client.placed()]
        assert [r.switch for r in placed][-1] == "leaf0" and len(placed) == 3
        assert all(dict(r.match)["tcp_src"] == 40002 for r in placed)

        first, *rest = placed
        fakes[first.switch].flow_removed(first)
        until(lambda: len(proc.client.placed()) == 2)
        assert {r["switch"] for r in proc.client.placed()} == {r.switch for r in rest}
        for rule in rest:
            fakes[rule.switch].flow_removed(rule)
        until(lambda: proc.client.placed() == [])
        assert proc.errors() == []


def test_a_switch_that_disconnects_is_no_longer_listed_and_the_event_is_recorded():
    fabric = small()
    names = [s.name for s in fabric.switches]
    with controller(fabric, "ecmp") as proc, switches(proc, names) as fakes:
        proc.wait_ready(timeout_s=10)
        fakes["spine1"].close()
        status = until(lambda: (s := proc.client.status())["switches_missing"] and s)
        assert status["switches_missing"] == ["spine1"]
        assert "spine1" not in status["switches_connected"]
        events = [e for e in proc.client.events() if e["event"] == "switch_disconnected"]
        assert [e["switch"] for e in events] == ["spine1"]
        with switches(proc, ["spine1"]) as back:  # listed again, its rules reinstalled
            until(lambda: "spine1" in proc.client.status()["switches_connected"])
            until(lambda: back["spine1"].barriers >= 1)
            assert back["spine1"].flow_mods
        assert proc.errors() == []


# ----- errors inside os-ken reach the channel ------------------------------------------
def test_an_exception_inside_os_ken_is_reported_on_the_channel_and_kept_in_the_log(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(LOG_COPY_ENV, str(tmp_path))
    fabric = small()
    with controller(fabric, "ecmp") as proc, switches(proc, ["leaf0"]) as fakes:
        until(lambda: proc.client.status()["switches_connected"] == ["leaf0"])
        fakes["leaf0"].send(OFP.OFPT_FLOW_REMOVED, b"\0" * 8)  # truncated: os-ken's parser fails
        errors = until(proc.errors)
        assert "malformed OpenFlow packet" in errors[0]
        assert "Traceback (most recent call last)" in errors[0]
        with pytest.raises(ControllerError, match="controller exception"):
            proc.wait_ready(timeout_s=1)
    (copy,) = tmp_path.glob("controller-*.log")  # the log outlives the run directory
    assert "Traceback" in copy.read_text()


def test_the_error_log_keeps_tracebacks_of_any_logger_and_counts_the_overflow():
    import logging

    collector = ErrorLog()
    logger = logging.getLogger("kvfabric.test.errorlog")
    logger.addHandler(collector)
    logger.propagate = False
    try:
        logger.warning("not an error")
        try:
            raise KeyError("boom")
        except KeyError:
            logger.exception("crashed")
        for i in range(ErrorLog.LIMIT + 2):
            logger.error("error %d", i)
    finally:
        logger.removeHandler(collector)
    records = collector.snapshot()
    assert records[0].startswith("kvfabric.test.errorlog: crashed\nTraceback")
    assert "KeyError: 'boom'" in records[0]
    assert len(records) == ErrorLog.LIMIT + 1
    assert records[-1] == "... and 3 more errors"


def test_a_run_whose_controller_reported_errors_fails():
    from experiments.orchestration.runner import Recorded, record_controller

    def proc(errors: list[str] | Exception) -> Any:
        def ask() -> list[str]:
            if isinstance(errors, Exception):
                raise errors
            return errors

        return SimpleNamespace(events=lambda: [], errors=ask)

    rec = Recorded()
    record_controller(proc([]), rec)
    assert rec.error == "" and rec.events["controller_errors"] == []
    rec = Recorded()
    record_controller(proc(["kvfabric.controller: controller exception in port status\nTr"]), rec)
    assert rec.error.startswith("the controller reported 1 error(s)")
    assert "controller exception in port status" in rec.error
    rec = Recorded()
    record_controller(proc(ConnectionRefusedError("refused")), rec)
    assert "channel unreachable" in rec.error
    rec = Recorded(error="RuntimeError: earlier")
    record_controller(proc(["x"]), rec)
    assert rec.error == "RuntimeError: earlier"  # the first failure stays the headline
    assert rec.events["controller_errors"] == ["x"]


# ----- port-counter polling ------------------------------------------------------------
def test_polls_keep_to_fixed_deadlines_whatever_the_sends_and_sleeps_cost():
    clock = [100.0]
    sends: list[float] = []

    class Done(Exception):
        pass

    def send() -> None:
        sends.append(clock[0])
        clock[0] += 0.5 if len(sends) == 5 else 0.003  # the 5th send overruns 2 periods

    def sleep(seconds: float) -> None:
        if len(sends) >= 40:
            raise Done
        clock[0] += seconds + 0.001  # every sleep overshoots by 1 ms

    with pytest.raises(Done):
        poll_on_deadlines(send, 0.2, clock=lambda: clock[0], sleep=sleep)
    ticks = [(t - 100.0) / 0.2 for t in sends]
    for tick in ticks:
        assert tick - round(tick) < 0.001 / 0.2 + 1e-9  # on the grid, never drifting
    assert [round(t) for t in ticks[:7]] == [0, 1, 2, 3, 4, 7, 8]  # missed deadlines skipped
    gaps = [b - a for a, b in zip(sends, sends[1:], strict=False)]
    assert max(g for i, g in enumerate(gaps) if i != 4) <= 0.2 + 0.001 + 1e-9


def test_a_live_controller_polls_every_switch_at_the_set_period():
    fabric = small()
    with controller(fabric, "ecmp", poll_s=0.05) as proc, switches(proc, ["leaf0"]) as fakes:
        until(lambda: len(fakes["leaf0"].stats_at) >= 21)
        at = fakes["leaf0"].stats_at[:21]
        assert (at[-1] - at[0]) / 20 == pytest.approx(0.05, rel=0.1)


@pytest.mark.parametrize("poll_s", [0.25, 1, 0, "0.1", True])
def test_polling_slower_than_200_ms_or_not_a_number_is_refused(poll_s):
    fabric = small()
    with pytest.raises(PolicyError, match=f"poll_s={poll_s!r} is not allowed: .* 200 ms"):
        ControllerProcess(fabric, "ecmp", Path("/nonexistent"), poll_s=poll_s)
    with pytest.raises(PolicyError, match=f"poll_s={poll_s!r} is not allowed"):
        compute(fabric, "adaptive", params={"poll_s": poll_s})
    compute(fabric, "adaptive", params={"poll_s": 0.2})

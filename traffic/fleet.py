"""The agent fleet: one ``traffic.agent`` per emulated host, and the coordinator
that starts them together and resolves the schedule's dependencies live.

    with AgentFleet(net, run_dir, schedule, scale=1e-4) as fleet:
        flows = fleet.run(timeout_s=30)

``AgentFleet`` starts an agent in the namespace of every host the schedule
names (as src or dst), waits until each answers on its control socket
(``<run_dir>/agents/<host>.sock``), hands each its rows (bytes already
scaled: ``traffic.agent_wire.scale_bytes``), opens the persistent connections,
then ``run`` starts all agents at one absolute t0 and follows their event
streams: a receiver reports each message it received in full, the
coordinator completes groups (``traffic.agent_deps``) and tells the senders
of the waiting rows to release them at the group's completion instant. The
run ends when every flow is settled or at the timeout; the agents' records
are collected and merged into one row per schedule row (``FLOW_COLUMNS``).
Every agent process is stopped on exit (terminate, then kill), also on
Ctrl-C. Nothing is printed; logging goes to ``kvfabric.fleet`` and each
agent's log to ``<run_dir>/agents/<host>.log``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .agent_deps import DependencyTracker
from .agent_wire import decode, encode, scale_bytes
from .driver import Driver, Message
from .header import KIND_CODES
from .workloads.schedule import validate_schedule

log = logging.getLogger("kvfabric.fleet")

CONNECTIONS = ("persistent", "per_flow")
FLOW_COLUMNS = [
    "flow_id", "kind", "tenant", "src", "dst", "bytes", "bytes_real", "dscp", "proto",
    "request_id", "layer", "chunk", "round", "step", "barrier", "after",
    "t_release_ns", "t_sched_ns", "t_issue_ns", "t_start_ns", "t_end_ns",
    "fct_ms", "lateness_ms", "issue_lateness_ms", "ok", "error", "cc", "connection",
]  # fmt: skip
_NS_COLUMNS = ["t_release_ns", "t_sched_ns", "t_issue_ns", "t_start_ns", "t_end_ns"]


class FleetError(RuntimeError):
    """An agent could not be started or controlled; the message names the host."""


def available_cc() -> list[str]:
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


def tenant_codes(schedule: pd.DataFrame, more: list[str] | None = None) -> dict[str, int]:
    """Tenants numbered in sorted order (the header's tenant field)."""
    names = set(schedule["tenant"].astype(str)) | set(more or [])
    return {t: i for i, t in enumerate(sorted(names))}


def plan(
    schedule: pd.DataFrame, scale: float, tenants: dict[str, int] | None = None
) -> pd.DataFrame:
    """The schedule with what agents need: ``bytes_emulated`` (scaled, header included),
    ``kind_code`` and ``tenant_code`` (``tenants``, default: ``tenant_codes``)."""
    if not scale > 0:
        raise ValueError(f"scale={scale!r}; must be > 0")
    out = schedule.copy()
    out["bytes_emulated"] = [
        scale_bytes(int(b), bool(s), scale)
        for b, s in zip(out["bytes"], out["scaled"], strict=True)
    ]
    out["kind_code"] = out["kind"].map(KIND_CODES).astype("int64")
    tenants = tenants if tenants is not None else tenant_codes(out)
    out["tenant_code"] = out["tenant"].astype(str).map(tenants).astype("int64")
    return out


def message_row(m: Message, scale: float, tenants: dict[str, int], ips: dict[str, str]) -> dict:
    """A live driver's message in the agent's compact form, ``t`` absolute."""
    if m.src == m.dst:
        raise ValueError(f"flow {m.flow_id}: src and dst are both {m.src}")
    return {"fid": m.flow_id, "kind": KIND_CODES[m.kind], "tenant": tenants[m.tenant],
            "dst": m.dst, "ip": ips[m.dst], "bytes": scale_bytes(m.bytes, m.scaled, scale),
            "t": int(m.t_ns), "req": m.request_id, "layer": m.layer, "chunk": m.chunk,
            "dscp": m.dscp, "after": -1, "proto": m.proto}  # fmt: skip


def agent_rows(planned: pd.DataFrame, host: str, ips: dict[str, str]) -> list[dict]:
    """The rows ``host`` sends, in the agent's compact form."""
    mine = planned[planned["src"] == host]
    return [
        {"fid": int(r.flow_id), "kind": int(r.kind_code), "tenant": int(r.tenant_code),
         "dst": r.dst, "ip": ips[r.dst], "bytes": int(r.bytes_emulated),
         "t": int(r.t_sched_ns), "req": int(r.request_id), "layer": int(r.layer),
         "chunk": int(r.chunk), "dscp": int(r.dscp), "after": int(r.after), "proto": r.proto}
        for r in mine.itertuples(index=False)
    ]  # fmt: skip


class _Client:
    """Blocking request/reply on an agent's control socket."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self.buf = b""

    def request(self, cmd: str, **kw: Any) -> dict[str, Any]:
        self.send(cmd, **kw)
        return self.reply(cmd)

    def send(self, cmd: str, **kw: Any) -> None:
        self.sock.sendall(encode({"cmd": cmd} | kw))

    def reply(self, cmd: str) -> dict[str, Any]:
        while b"\n" not in self.buf:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("agent closed its control socket")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        reply = decode(line)
        if not reply.get("ok"):
            raise FleetError(f"{cmd}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        self.sock.close()


class AgentFleet:
    """One agent per host of ``schedule``; see the module docstring.

    - ``net``: a running ``topologies.builder.FabricNetwork``.
    - ``run_dir``: where control sockets, schedules, records and agent logs go.
    - ``schedule``: a schedule (``traffic.workloads``), real-equivalent bytes.
    - ``scale``: the bandwidth scale applied to rows with ``scaled`` true.
    - ``cc``: TCP congestion control set on every socket (default cubic).
    - ``connection``: ``persistent`` or ``per_flow``.
    - ``priority``: the agents' CPU priority: ``rt`` (default: SCHED_FIFO 1, so a
      timer wake-up preempts ordinary processes; agents never spin, and the
      kernel's RT throttling keeps 5% for others), ``nice`` (-10) or ``normal``.
      Measured at 200 flows/s with a competing CPU hog on 2 cores: lateness p99
      0.6 ms with rt, 3-4 ms with nice.
    - ``early_us``: how long before a send instant the loop wakes (epoll waits in
      whole ms); the rest is slept precisely.
    - ``driver``: a live workload (``traffic.driver``) run alongside the schedule:
      its messages are handed to the agents as the run goes, it hears of each of
      them received or failed, and the run is settled only once it is finished.
    - ``timer_lead_ms``: the driver's timers are run this long before they are due,
      so the messages they produce reach the agents before their send instants
      (the coordinator hands them over asynchronously, but not instantly). A
      driver deciding at a timer thus sees the run as it was up to this long
      before the timer's instant: never the future, at worst slightly stale.
    - ``ready_timeout_s``, ``start_delay_s`` (t0 = now + this), ``udp_grace_s``
      (a datagram not received this long after it was sent is lost),
      ``stop_grace_s`` (terminate, then kill).
    """

    def __init__(self, net: Any, run_dir: str | os.PathLike, schedule: pd.DataFrame,
                 scale: float, cc: str = "cubic", connection: str = "persistent", *,
                 ready_timeout_s: float = 20.0, start_delay_s: float = 0.3,
                 udp_grace_s: float = 0.5, stop_grace_s: float = 3.0,
                 early_us: int = 1500, priority: str = "rt",
                 driver: Driver | None = None, timer_lead_ms: float = 5.0) -> None:  # fmt: skip
        if connection not in CONNECTIONS:
            raise ValueError(f"connection={connection!r}; allowed: {', '.join(CONNECTIONS)}")
        known = available_cc()
        if known and cc not in known:
            raise ValueError(f"cc={cc!r} is not available here; allowed: {', '.join(known)}")
        validate_schedule(schedule)
        self.net, self.cc, self.connection = net, cc, connection
        self.run_dir = Path(run_dir)
        self.driver = driver
        self.timer_lead_ns = int(timer_lead_ms * 1e6)
        self.tenants = tenant_codes(schedule, driver.tenants if driver else None)
        self.planned = plan(schedule, scale, self.tenants)
        self.scale = scale
        fabric_hosts = [h.name for h in net.fabric.hosts]
        named = set(self.planned["src"]) | set(self.planned["dst"])
        named |= set(driver.hosts if driver else [])
        unknown = sorted(named - set(fabric_hosts))
        if unknown:
            raise ValueError(f"schedule names hosts the fabric lacks: {unknown}")
        self.hosts = [h for h in fabric_hosts if h in named]
        self.ips = {h: net.fabric.node(h).ip for h in self.hosts}
        self.ready_timeout_s, self.start_delay_s = ready_timeout_s, start_delay_s
        self.udp_grace_s, self.stop_grace_s, self.early_us = udp_grace_s, stop_grace_s, early_us
        self.priority = priority
        self.procs: dict[str, subprocess.Popen] = {}
        self.clients: dict[str, _Client] = {}
        self.events: dict[str, _Client] = {}
        self.stopped: dict[str, str] = {}  # host -> why its agent is gone
        self.flows: pd.DataFrame | None = None
        self._dst_of: dict[int, str] = {}
        self._live: list[dict] = []  # the driver's messages, as planned rows
        self._live_set: set[int] = set()
        self._src_of: dict[int, str] = {}
        self.t0_ns: int | None = None
        self._sock_dir: Path | None = None
        self._tmp_sock_dir = False

    # ----- lifetime -----------------------------------------------------------------
    def __enter__(self) -> AgentFleet:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sock_path(self, host: str) -> str:
        assert self._sock_dir is not None
        return str(self._sock_dir / f"{host}.sock")

    def start(self) -> None:
        agents_dir = self.run_dir / "agents"
        agents_dir.mkdir(parents=True, exist_ok=True)
        longest = max(len(h) for h in self.hosts) + 6
        if len(str(agents_dir.resolve())) + longest < 100:
            self._sock_dir = agents_dir.resolve()
        else:  # AF_UNIX paths are limited to 108 bytes
            self._sock_dir, self._tmp_sock_dir = Path(tempfile.mkdtemp(prefix="kvf-")), True
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        for host in self.hosts:
            with open(agents_dir / f"{host}.log", "wb") as logf:
                self.procs[host] = self.net.mn(host).popen(
                    [sys.executable, "-m", "traffic.agent", "--host", host,
                     "--ip", self.ips[host], "--control", self.sock_path(host), "--cc", self.cc,
                     "--connection", self.connection, "--early-us", str(self.early_us),
                     "--priority", self.priority],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=logf, env=env,
                )  # fmt: skip
        self._wait_ready()
        for host in self.hosts:
            rows = agent_rows(self.planned, host, self.ips)
            path = agents_dir / f"{host}.schedule.json"
            path.write_text(json.dumps(rows, separators=(",", ":")))
            self.clients[host].request("load", path=str(path.resolve()))
            ev = _Client(self.sock_path(host))
            ev.request("subscribe")
            ev.sock.setblocking(False)
            self.events[host] = ev
        for host in self.hosts:
            failed = self.clients[host].request("prepare")["failed"]
            for peer, err in failed.items():
                log.warning("agent %s could not connect to %s: %s", host, peer, err)
        log.info("%d agents ready (%s, %s)", len(self.hosts), self.cc, self.connection)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        waiting = list(self.hosts)
        while waiting:
            for host in list(waiting):
                code = self.procs[host].poll()
                if code is not None:
                    raise FleetError(f"agent on {host} exited with code {code} before it "
                                     f"listened: {self._log_tail(host)}")  # fmt: skip
                try:
                    client = _Client(self.sock_path(host))
                    client.request("ping")
                except OSError:
                    continue
                self.clients[host] = client
                waiting.remove(host)
            if waiting and time.monotonic() > deadline:
                raise FleetError(
                    f"agents on {', '.join(waiting)} not listening after "
                    f"{self.ready_timeout_s:g} s: {self._log_tail(waiting[0])}"
                )
            if waiting:
                time.sleep(0.02)

    def _log_tail(self, host: str) -> str:
        try:
            text = (self.run_dir / "agents" / f"{host}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text.strip()[-600:] or "(empty log)"

    def stop_agent(self, host: str, why: str = "stopped") -> None:
        """Stop one host's agent (failure injection): its rows fail, peers are refused."""
        proc = self.procs.get(host)
        if proc is None:
            raise KeyError(f"no agent runs on {host}")
        self.stopped.setdefault(host, f"agent on {host} {why}")
        for client in (self.clients.pop(host, None), self.events.pop(host, None)):
            if client is not None:
                client.close()
        self._end(proc)

    def _end(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def close(self) -> None:
        """Stop every agent this fleet started; safe to call twice."""
        try:
            for client in list(self.clients.values()):
                with contextlib.suppress(OSError, FleetError, ValueError):
                    client.request("stop")
                client.close()
            for ev in self.events.values():
                ev.close()
            self.clients.clear()
            self.events.clear()
        finally:
            for host, proc in self.procs.items():
                try:
                    self._end(proc)
                except Exception as exc:  # keep stopping the others
                    log.warning("could not stop the agent on %s: %s", host, exc)
            if self._tmp_sock_dir and self._sock_dir is not None:
                shutil.rmtree(self._sock_dir, ignore_errors=True)
                self._tmp_sock_dir = False

    # ----- the run ------------------------------------------------------------------
    def status(self) -> dict[str, dict]:
        """Each live agent's counters (rows, released, fired, sent_ok, received, ...)."""
        return {h: c.request("status") for h, c in self.clients.items()}

    def run(self, timeout_s: float = 60.0, *, should_stop: Callable[[], bool] | None = None,
            on_start: Callable[[int], None] | None = None) -> pd.DataFrame:  # fmt: skip
        """Start every agent at a common t0, resolve dependencies (and run the driver)
        until all flows are settled, ``timeout_s`` passed or ``should_stop()`` is true;
        collect and return the merged flows table. ``on_start(t0_ns)`` is called once
        t0 is fixed (fault injection times itself from it)."""
        if self.flows is not None:
            raise FleetError("a fleet runs its schedule once; make a new AgentFleet")
        p = self.planned
        tracker = DependencyTracker.from_schedule(p)
        self._src_of = dict(zip(p["flow_id"].tolist(), p["src"].tolist(), strict=True))
        self._dst_of = dict(zip(p["flow_id"].tolist(), p["dst"].tolist(), strict=True))
        for host, why in self.stopped.items():
            self._fail_host(tracker, host, why)
        t0 = self.t0_ns = time.monotonic_ns() + int(self.start_delay_s * 1e9)
        if on_start is not None:
            on_start(t0)
        self._send(tracker, list(self.clients), "start", t0_ns=t0)
        tracker.start(t0)
        driver = self.driver
        if driver is not None:
            self._dispatch(tracker, driver.start(t0))
        sel = selectors.DefaultSelector()
        bufs: dict[str, bytes] = {}
        for host, ev in self.events.items():
            sel.register(ev.sock, selectors.EVENT_READ, host)
            bufs[host] = b""
        grace = int(self.udp_grace_s * 1e9)
        deadline = time.monotonic_ns() + int(timeout_s * 1e9)
        next_check = 0
        ended = ""
        told_failed = 0
        try:
            while True:
                wait = 0.05
                due = driver.next_timer_ns() if driver is not None else None
                if due is not None:
                    ahead = due - self.timer_lead_ns - time.monotonic_ns()
                    wait = min(wait, max(0.0, ahead / 1e9))
                for key, _ in sel.select(timeout=wait):
                    host = key.data
                    data = b""
                    with contextlib.suppress(BlockingIOError):
                        data = key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
                    if not data:
                        sel.unregister(key.fileobj)
                        self._agent_gone(tracker, host)
                        continue
                    lines = (bufs[host] + data).split(b"\n")
                    bufs[host] = lines.pop()
                    for line in lines:
                        self._events(tracker, decode(line)["ev"])
                now = time.monotonic_ns()
                if driver is not None:
                    due = driver.next_timer_ns()
                    if due is not None and due <= now + self.timer_lead_ns:
                        self._dispatch(tracker, driver.on_timer(now + self.timer_lead_ns))
                    while told_failed < len(tracker.failures):
                        fid = tracker.failures[told_failed]
                        told_failed += 1
                        if fid in self._live_set:
                            self._dispatch(tracker, driver.on_failed(fid, tracker.errors[fid], now))
                for host, proc in self.procs.items():
                    if host not in self.stopped and proc.poll() is not None:
                        self._agent_gone(tracker, host)
                if now >= next_check:
                    next_check = now + 50_000_000
                    if tracker.settled(now, grace) and (driver is None or driver.finished()):
                        break
                if now > deadline:
                    ended = f"timed out after {timeout_s:g} s"
                    log.warning("run %s", ended)
                    break
                if should_stop is not None and should_stop():
                    ended = "was interrupted"
                    log.warning("run interrupted")
                    break
        finally:
            sel.close()
            if driver is not None and not driver.finished():
                driver.finish(time.monotonic_ns(), ended or "the run ended")
        records = self._collect()
        self.flows = self._table(tracker, records, ended)
        return self.flows

    def _dispatch(self, tracker: DependencyTracker, messages: list[Message]) -> None:
        """Hand a driver's messages to their senders' agents (one ``add`` per host)."""
        if not messages:
            return
        by_host: dict[str, list[dict]] = {}
        for m in messages:
            row = message_row(m, self.scale, self.tenants, self.ips)
            tracker.add(m.flow_id, m.proto == "udp", m.t_ns)
            self._live_set.add(m.flow_id)
            self._src_of[m.flow_id], self._dst_of[m.flow_id] = m.src, m.dst
            self._live.append({**asdict(m), "bytes_emulated": row["bytes"]})
            by_host.setdefault(m.src, []).append(row)
        for host, rows in by_host.items():
            client = self.clients.get(host)
            if client is None:
                for row in rows:
                    tracker.failed(row["fid"], self.stopped.get(host, f"no agent on {host}"))
                continue
            try:
                client.send("add", rows=rows)  # no reply to wait for
            except OSError as exc:
                self._agent_gone(tracker, host, f"agent on {host} failed add: {exc}")

    def _send(self, tracker: DependencyTracker, hosts: list[str], cmd: str, **kw: Any) -> None:
        """``cmd`` to several agents at once: all requests go out before any reply is read."""
        sent = []
        for host in hosts:
            client = self.clients.get(host)
            if client is None:
                continue
            try:
                client.send(cmd, **kw)
                sent.append(host)
            except OSError as exc:
                self._agent_gone(tracker, host, f"agent on {host} failed {cmd}: {exc}")
        for host in sent:
            try:
                self.clients[host].reply(cmd)
            except (OSError, FleetError, ValueError, KeyError) as exc:
                log.warning("agent on %s failed %s: %s", host, cmd, exc)
                self._agent_gone(tracker, host, f"agent on {host} failed {cmd}: {exc}")

    def _events(self, tracker: DependencyTracker, items: list) -> None:
        now = time.monotonic_ns()
        for item in items:
            tag, fid = item[0], item[1]
            if tag == "r":
                fresh = tracker.state.get(fid) not in (None, "done", "failed")
                for group, t_done, released in tracker.received(fid, item[2]):
                    hosts = sorted({self._src_of[f] for f in released})
                    self._send(tracker, hosts, "release", group=group, t_ns=t_done)
                if fresh and fid in self._live_set:
                    assert self.driver is not None
                    self._dispatch(tracker, self.driver.on_received(fid, item[2]))
            elif tag == "s":
                tracker.sent(fid, now)
                dst = self._dst_of[fid]
                if dst in self.stopped:
                    tracker.failed(fid, f"sent, but {self.stopped[dst]} before receiving it")
            elif tag == "f":
                tracker.failed(fid, item[2])

    def _agent_gone(self, tracker: DependencyTracker, host: str, why: str = "") -> None:
        if host in self.stopped:
            return
        code = self.procs[host].poll()
        why = why or f"agent on {host} exited (code {code}) during the run"
        log.warning("%s: %s", why, self._log_tail(host))
        self.stopped[host] = why
        for client in (self.clients.pop(host, None), self.events.pop(host, None)):
            if client is not None:
                client.close()
        self._fail_host(tracker, host, why)

    def _all_rows(self) -> pd.DataFrame:
        """The schedule's rows and then the driver's, as planned rows."""
        if not self._live:
            return self.planned
        live = pd.DataFrame(self._live)
        live["t_sched_ns"] = 0  # sent at their release instant (``t_ns``)
        for col in ("round", "barrier", "after"):
            live[col] = -1
        return pd.concat([self.planned, live[[c for c in self.planned.columns if c in live]]],
                         ignore_index=True)  # fmt: skip

    def _fail_host(self, tracker: DependencyTracker, host: str, why: str) -> None:
        """The agent on ``host`` is gone: its unsent rows fail, and so do messages already
        sent to it (nobody will receive them)."""
        p = self._all_rows()
        for fid in p.loc[p["src"] == host, "flow_id"].tolist():
            if tracker.state[fid] in ("waiting", "released"):
                tracker.failed(fid, why)
        for fid in p.loc[p["dst"] == host, "flow_id"].tolist():
            if tracker.state[fid] == "sent":
                tracker.failed(fid, f"sent, but {why} before receiving it")

    def _collect(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for host, client in list(self.clients.items()):
            path = (self.run_dir / "agents" / f"{host}.records.json").resolve()
            try:
                client.request("collect", path=str(path))
                out[host] = json.loads(path.read_text())
            except (OSError, FleetError, ValueError) as exc:
                log.warning("could not collect the records of %s: %s", host, exc)
        return out

    def _table(self, tracker: DependencyTracker, records: dict[str, dict],
               ended: str) -> pd.DataFrame:  # fmt: skip
        sent: dict[int, list] = {}
        recv: dict[int, list] = {}
        for rec in records.values():
            for r in rec["sent"]:
                sent[r[0]] = r
            for r in rec["recv"]:
                recv[r[0]] = r
        now = time.monotonic_ns()
        outcomes = tracker.outcomes(now, int(self.udp_grace_s * 1e9), ended)
        p = self._all_rows()
        fids = p["flow_id"].tolist()
        cols: dict[str, list] = {c: [] for c in _NS_COLUMNS + ["ok", "error"]}
        del cols["t_sched_ns"]
        for fid in fids:
            s, r = sent.get(fid), recv.get(fid)
            ok, err = outcomes[fid]
            if not ok and s is not None and s[6]:
                err = s[6]  # the sender's own error is the most precise
            elif not ok and r is not None and r[6]:
                err = r[6]
            cols["t_release_ns"].append(tracker.release_ns.get(fid))
            cols["t_issue_ns"].append(s[2] if s else None)
            cols["t_start_ns"].append(s[3] if s else (r[3] if r else None))
            cols["t_end_ns"].append(tracker.t_end.get(fid) if ok else None)
            cols["ok"].append(ok)
            cols["error"].append(err)
        out = pd.DataFrame({
            "flow_id": p["flow_id"].to_numpy(), "kind": p["kind"].to_numpy(),
            "tenant": p["tenant"].to_numpy(), "src": p["src"].to_numpy(),
            "dst": p["dst"].to_numpy(), "bytes": p["bytes_emulated"].to_numpy(),
            "bytes_real": p["bytes"].to_numpy(), "dscp": p["dscp"].to_numpy(),
            "proto": p["proto"].to_numpy(),
        })  # fmt: skip
        for c in ("request_id", "layer", "chunk", "round", "step", "barrier", "after"):
            out[c] = p[c].to_numpy()
        for c in _NS_COLUMNS:
            if c != "t_sched_ns":
                out[c] = pd.array(cols[c], dtype="Int64")
        out["t_sched_ns"] = out["t_release_ns"] + p["t_sched_ns"].to_numpy()
        out["fct_ms"] = _ms(out["t_end_ns"] - out["t_start_ns"])
        out["lateness_ms"] = _ms(out["t_start_ns"] - out["t_sched_ns"])
        # The agent's own lag: start also waits for a persistent connection that is
        # still busy with earlier messages (head-of-line blocking, as in any transport
        # library), which is the workload's behaviour, not the emulator's.
        out["issue_lateness_ms"] = _ms(out["t_issue_ns"] - out["t_sched_ns"])
        out["ok"] = np.asarray(cols["ok"], dtype=bool)
        out["error"] = cols["error"]
        out["cc"] = self.cc
        out["connection"] = self.connection
        return out[FLOW_COLUMNS]


def _ms(ns: pd.Series) -> np.ndarray:
    return (ns / 1e6).to_numpy(dtype="float64", na_value=np.nan)

"""The coordinator's event loop: start every worker at one t0, follow their event
streams, complete groups (``traffic.workloads.deps``), release the rows waiting
for them, run a live driver, and decide when the run is settled.

It reads the workers' events with one ``selectors`` loop; everything it does per
event is a dictionary update unless the event completes a group or belongs to
the driver. Messages the driver produces are handed to their senders' workers in
one ``add`` per worker per batch, ``timer_lead_ns`` before they are due. The
run-time commands (``add``, ``release``) have no reply and go through a
per-worker outbox written without blocking, so a busy worker never holds the
coordinator (and the next decision) up.

Another thread follows the run (``progress``) without a lock and without the loop doing
anything for it but one append per receipt: ``received_log`` is a deque the loop
appends each flow's first receipt to and the follower pops from, ``tracker.failures``
a list that only grows (failures are few), and ``live`` maps a live flow id to its
message. Once the follower has saved a settled flow it puts the id in ``saved``; at
each check the loop forgets up to ``FORGET_PER_CHECK`` of them (``forget``), so what
it holds follows the flows in flight, not the run's length.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..driver import Driver, Message
from ..wire import decode, encode
from ..workloads.deps import DependencyTracker
from .launcher import FleetError, WorkerProcess, Workers
from .merge import message_row

if TYPE_CHECKING:
    from topologies.scale import Scale

log = logging.getLogger("kvfabric.fleet")

CHECK_NS = 50_000_000  # how often the loop asks whether the run is settled
FORGET_PER_CHECK = 200  # saved flows forgotten per check: 4,000/s, ~0.2 ms a check


class Coordinator:
    """One run of a fleet's schedule (see the module docstring)."""

    def __init__(
        self,
        workers: Workers,
        tracker: DependencyTracker,
        *,
        src_of: dict[int, str],
        dst_of: dict[int, str],
        scale: Scale,
        tenants: dict[str, int],
        ips: dict[str, str],
        driver: Driver | None,
        timer_lead_ns: int,
        udp_grace_ns: int,
        stopped: dict[str, str],
        kills: list[tuple[int, str]] | None = None,
    ) -> None:
        self.workers, self.tracker = workers, tracker
        self.src_of, self.dst_of = src_of, dst_of
        self.scale, self.tenants, self.ips = scale, tenants, ips
        self.driver, self.timer_lead_ns, self.udp_grace_ns = driver, timer_lead_ns, udp_grace_ns
        self.stopped = stopped  # host -> why its agent is gone
        self.kills = sorted(kills or [])  # (t_ns, host): that host's agent dies then
        self.killed: list[dict[str, Any]] = []  # what each kill did, when
        self.live: dict[int, Message] = {}  # a live driver's flows, until forgotten
        self.received_log: deque[list] = deque()  # first receipts: ["r", fid, t_end, t_send]
        self.saved: deque[int] = deque()  # flow ids saved by the follower: to forget
        self.forgotten = 0
        self._live_ids: set[int] = set()
        self.messages_handled = 0
        self._outbox: dict[str, bytearray] = {}
        self._sel: selectors.BaseSelector | None = None
        self._t0 = 0

    # ----- the loop -------------------------------------------------------------------
    def run(self, t0: int, deadline_ns: int, should_stop: Callable[[], bool] | None) -> str:
        """Until settled, past ``deadline_ns`` or ``should_stop()``; returns how the run
        ended early ("" if it settled)."""
        tracker, driver = self.tracker, self.driver
        self._t0 = t0
        for host, why in self.stopped.items():
            self.fail_host(host, why)
        self._request(self.workers.all, "start", t0_ns=t0)
        for w in self.workers.all:
            if w.client is not None:
                w.client.sock.settimeout(0.0)  # from here on: posted commands only
        tracker.start(t0)
        if driver is not None:
            self._dispatch(driver.start(t0))
        sel = self._sel = selectors.DefaultSelector()
        bufs: dict[str, bytes] = {}
        for w in self.workers.all:
            if w.events is not None:
                sel.register(w.events.sock, selectors.EVENT_READ, w)
                bufs[w.name] = b""
        self._flush_all()
        next_check, told_failed, ended = 0, 0, ""
        try:
            while True:
                wait = 0.05
                due = driver.next_timer_ns() if driver is not None else None
                if due is not None:
                    ahead = due - self.timer_lead_ns - time.monotonic_ns()
                    wait = min(wait, max(0.0, ahead / 1e9))
                if self.kills:
                    wait = min(wait, max(0.0, (self.kills[0][0] - time.monotonic_ns()) / 1e9))
                for key, _ in sel.select(timeout=wait):
                    w = key.data
                    if key.fileobj is not getattr(w.events, "sock", None):
                        self._flush(w)  # the control socket can take more
                        continue
                    data = b""
                    with contextlib.suppress(BlockingIOError):
                        data = key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
                    if not data:
                        sel.unregister(key.fileobj)
                        self.worker_gone(w)
                        continue
                    lines = (bufs[w.name] + data).split(b"\n")
                    bufs[w.name] = lines.pop()
                    for line in lines:
                        self._events(decode(line)["ev"])
                now = time.monotonic_ns()
                while self.kills and self.kills[0][0] <= now:
                    self._kill(*self.kills.pop(0))
                if driver is not None:
                    due = driver.next_timer_ns()
                    if due is not None and due <= now + self.timer_lead_ns:
                        self._dispatch(driver.on_timer(now + self.timer_lead_ns))
                    while told_failed < len(tracker.failures):
                        fid = tracker.failures[told_failed]
                        told_failed += 1
                        if fid in self._live_ids:
                            self._dispatch(driver.on_failed(fid, tracker.errors.get(fid, ""), now))
                self._flush_all()
                if now >= next_check:
                    next_check = now + CHECK_NS
                    self._forget_saved()
                    for w in self.workers.all:
                        if w.client is not None and w.proc.poll() is not None:
                            self.worker_gone(w)
                    if tracker.settled(now, self.udp_grace_ns) and (
                        driver is None or driver.finished()
                    ):
                        break
                if now > deadline_ns:
                    ended = f"timed out after {(deadline_ns - t0) / 1e9:.3g} s"
                    log.warning("run %s", ended)
                    break
                if should_stop is not None and should_stop():
                    ended = "was interrupted"
                    log.warning("run interrupted")
                    break
        finally:
            self._flush_all(block=True)
            for w in self.workers.all:
                if w.client is not None:
                    w.client.sock.settimeout(10.0)
            sel.close()
            self._sel = None
            if driver is not None and not driver.finished():
                driver.finish(time.monotonic_ns(), ended or "the run ended")
        return ended

    # ----- events ---------------------------------------------------------------------
    def _events(self, items: list) -> None:
        tracker = self.tracker
        self.messages_handled += len(items)
        now = time.monotonic_ns()
        for item in items:
            tag, fid = item[0], item[1]
            if tag == "r":
                fresh = tracker.state.get(fid) not in (None, "done", "failed")
                if fresh:
                    self.received_log.append(item)
                for group, t_done, released in tracker.received(fid, item[2]):
                    hosts = {self.src_of[f] for f in released}
                    owners = {self.workers.of_host[h].name: self.workers.of_host[h] for h in hosts}
                    for w in owners.values():
                        self._post(w, "release", group=group, t_ns=t_done)
                if fresh and fid in self._live_ids:
                    assert self.driver is not None
                    self._dispatch(self.driver.on_received(fid, item[2]))
            elif tag == "s":
                tracker.sent(fid, now)
                dst = self.dst_of.get(fid)  # None: received, saved and forgotten already
                if dst in self.stopped:
                    tracker.failed(fid, f"sent, but {self.stopped[dst]} before receiving it")
            elif tag == "f":
                tracker.failed(fid, item[2])

    def _dispatch(self, messages: list[Message]) -> None:
        """Hand a driver's messages to their senders' workers (one ``add`` per worker)."""
        if not messages:
            return
        by_worker: dict[str, tuple[WorkerProcess, list[dict]]] = {}
        for m in messages:
            row = message_row(m, self.scale, self.tenants, self.ips)
            self.tracker.add(m.flow_id, m.proto == "udp", m.t_ns)
            self._live_ids.add(m.flow_id)
            self.src_of[m.flow_id], self.dst_of[m.flow_id] = m.src, m.dst
            self.live[m.flow_id] = m
            if m.src in self.stopped or m.dst in self.stopped:
                gone = m.src if m.src in self.stopped else m.dst
                self.tracker.failed(m.flow_id, self.stopped[gone])
                continue
            w = self.workers.of_host[m.src]
            by_worker.setdefault(w.name, (w, []))[1].append(row)
        for w, rows in by_worker.values():
            if w.client is None:
                for row in rows:
                    self.tracker.failed(row["fid"], self.stopped.get(row["src"], "no agent"))
                continue
            self._post(w, "add", rows=rows)

    def _forget_saved(self) -> None:
        """Forget settled flows the follower has saved: their rows are on disk, and the
        final table reads them back (``AgentFleet.saved_flows``)."""
        saved, tracker = self.saved, self.tracker
        for _ in range(min(FORGET_PER_CHECK, len(saved))):
            fid = saved.popleft()
            if tracker.forget(fid):
                self.src_of.pop(fid, None)
                self.dst_of.pop(fid, None)
                self.live.pop(fid, None)
                self._live_ids.discard(fid)
                self.forgotten += 1

    # ----- talking to workers -----------------------------------------------------------
    def _post(self, w: WorkerProcess, cmd: str, **kw: Any) -> None:
        """A reply-less command into ``w``'s outbox; written as soon as the socket takes it."""
        if w.client is None:
            return
        box = self._outbox.setdefault(w.name, bytearray())
        box += encode({"cmd": cmd} | kw)
        self._flush(w)

    def _flush(self, w: WorkerProcess, block: bool = False) -> None:
        box = self._outbox.get(w.name)
        if w.client is None:
            if box:
                box.clear()
            return
        sock = w.client.sock
        try:
            if block:
                sock.settimeout(10.0)
                sock.sendall(box)
                box.clear()
            while box:
                n = sock.send(box, socket.MSG_DONTWAIT)  # the socket has no timeout: never waits
                del box[:n]
        except BlockingIOError:
            pass
        except OSError as exc:
            box.clear()
            self.worker_gone(w, f"agent control socket failed: {exc}")
            return
        sel = self._sel
        if sel is None:
            return
        watching = sock in sel.get_map()
        if box and not watching:
            sel.register(sock, selectors.EVENT_WRITE, w)
        elif not box and watching:
            sel.unregister(sock)

    def _flush_all(self, block: bool = False) -> None:
        for w in self.workers.all:
            if self._outbox.get(w.name):
                self._flush(w, block)

    def _request(self, workers: list[WorkerProcess], cmd: str, **kw: Any) -> None:
        """``cmd`` to several workers at once: all requests go out before any reply is read."""
        sent = []
        for w in workers:
            if w.client is None:
                continue
            try:
                w.client.send(cmd, **kw)
                sent.append(w)
            except OSError as exc:
                self.worker_gone(w, f"agent failed {cmd}: {exc}")
        for w in sent:
            try:
                assert w.client is not None
                w.client.reply(cmd)
            except (OSError, FleetError, ValueError, KeyError, AssertionError) as exc:
                log.warning("the agent of %s failed %s: %s", w.hosts[0], cmd, exc)
                self.worker_gone(w, f"agent failed {cmd}: {exc}")

    # ----- failures -------------------------------------------------------------------
    def worker_gone(self, w: WorkerProcess, why: str = "") -> None:
        """A worker died or stopped answering: every host it served is gone."""
        if w.client is None and all(h in self.stopped for h in w.hosts):
            return
        if self._sel is not None and w.client is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(w.client.sock)
        code = w.proc.poll()
        why = why or f"agent exited (code {code}) during the run"
        log.warning("%s: %s", why, w.log_tail())
        self.workers.end(w)
        for host in w.hosts:
            if host not in self.stopped:
                self.fail_host(host, f"agent on {host}: {why}")

    def _kill(self, due_ns: int, host: str) -> None:
        """``host``'s agent dies (a fault): its worker closes the host's sockets at once,
        so peers see the connection end; what it had not finished fails."""
        start = time.monotonic_ns()
        why = f"agent on {host} killed (agent_kill at {(due_ns - self._t0) / 1e9:g} s)"
        w = self.workers.of_host.get(host)
        error = "" if w is not None and w.client is not None else f"no agent runs on {host}"
        if not error:
            self._post(w, "kill_host", host=host, why=f"killed at {(due_ns - self._t0) / 1e9:g} s")
        self.fail_host(host, why)
        self.killed.append(
            {
                "node": host,
                "due_ns": due_ns,
                "t_start_ns": start,
                "t_ns": time.monotonic_ns(),
                "ok": not error,
                "error": error,
            }
        )

    def fail_host(self, host: str, why: str) -> None:
        """The agent on ``host`` is gone: its unsent messages fail, and so do messages
        on their way to it (nobody will receive them)."""
        self.stopped.setdefault(host, why)
        tracker = self.tracker
        for fid, state in list(tracker.state.items()):
            if state in ("done", "failed"):
                continue
            if self.src_of.get(fid) == host and state in ("waiting", "released"):
                tracker.failed(fid, why)
            elif self.dst_of.get(fid) == host and state in ("released", "sent"):
                tracker.failed(fid, f"sent, but {why} before receiving it")

"""Run-time dependency resolution for a schedule (pure; the agents' coordinator and
``replay`` use it).

Rows sharing a ``barrier`` value form a completion group (value = flow id of
its first row). A group completes when its last message has been fully
received; its completion instant is the latest receiver timestamp among its
messages. Rows with ``after == g`` are released at that instant (rows with
``after == -1`` at the run's t0) and sent ``t_sched_ns`` after their release.

Every flow moves ``waiting -> released -> sent -> done`` or ends ``failed``; a
settled flow outside any group can then be forgotten (``forget``: a long run's
settled flows are saved as it goes, and need not be held).
A UDP datagram that was sent but not received within a grace period counts as
lost. A group with a failed or lost member never completes, and neither do
the groups that wait for it: the run is *settled* once every flow is done,
failed, lost, or waiting on such a dead group, so a failure ends the run
early instead of holding it until the timeout.
"""

from __future__ import annotations

from collections.abc import Sequence

WAITING, RELEASED, SENT, DONE, FAILED = "waiting", "released", "sent", "done", "failed"


class DependencyTracker:
    def __init__(
        self,
        flow_ids: Sequence[int],
        barrier: Sequence[int],
        after: Sequence[int],
        udp: Sequence[bool],
    ) -> None:
        order = sorted(range(len(flow_ids)), key=lambda i: flow_ids[i])
        ids = [int(flow_ids[i]) for i in order]
        self.barrier = {int(flow_ids[i]): int(barrier[i]) for i in order}
        self.after = {int(flow_ids[i]): int(after[i]) for i in order}
        self.udp = {int(flow_ids[i]) for i in order if udp[i]}
        self.state = dict.fromkeys(ids, WAITING)  # every flow of the run, in flow id order
        self.release_ns: dict[int, int] = {}
        self.t_end: dict[int, int] = {}
        self.sent_at: dict[int, int] = {}
        self.errors: dict[int, str] = {}
        self.group_left: dict[int, int] = {}
        self.group_t: dict[int, int] = {}
        self.waiters: dict[int, list[int]] = {}
        for fid in ids:
            g = self.barrier[fid]
            if g >= 0:
                self.group_left[g] = self.group_left.get(g, 0) + 1
                self.group_t.setdefault(g, 0)
            a = self.after[fid]
            if a >= 0:
                self.waiters.setdefault(a, []).append(fid)
        missing = set(self.waiters) - set(self.group_left)
        if missing:
            raise ValueError(
                f"rows wait for completion groups that do not exist: {sorted(missing)}"
            )
        self.active = 0  # released, or TCP sent and not yet received
        self.completed: dict[int, int] = {}  # group -> completion instant
        self.failures: list[int] = []  # flow ids in the order they failed

    @classmethod
    def from_schedule(cls, schedule) -> DependencyTracker:
        """A tracker for a schedule frame (``flow_id, barrier, after, proto`` columns)."""
        return cls(
            schedule["flow_id"].tolist(),
            schedule["barrier"].tolist(),
            schedule["after"].tolist(),
            (schedule["proto"] == "udp").tolist(),
        )

    # ----- events ---------------------------------------------------------------------
    def start(self, t0_ns: int) -> list[int]:
        """Release the rows that wait for nothing; returns their flow ids."""
        out = [f for f, s in self.state.items() if self.after[f] < 0 and s == WAITING]
        for fid in out:
            self._release(fid, t0_ns)
        return out

    def sent(self, fid: int, now_ns: int) -> None:
        if self.state.get(fid) == RELEASED:
            self.state[fid] = SENT
            self.sent_at[fid] = now_ns
            if fid in self.udp:
                self.active -= 1

    def failed(self, fid: int, error: str) -> None:
        s = self.state.get(fid)
        if s is None or s in (DONE, FAILED):
            return
        if s == RELEASED or (s == SENT and fid not in self.udp):
            self.active -= 1
        self.state[fid] = FAILED
        self.errors[fid] = error
        self.failures.append(fid)

    def add(self, fid: int, udp: bool, t_ns: int) -> None:
        """A row a live driver added during the run, released at ``t_ns``; it waits
        for no group and belongs to none."""
        if fid in self.state:
            raise ValueError(f"flow id {fid} is already in the run")
        self.barrier[fid] = self.after[fid] = -1
        if udp:
            self.udp.add(fid)
        self._release(fid, t_ns)

    def received(self, fid: int, t_end_ns: int) -> list[tuple[int, int, list[int]]]:
        """A message arrived in full. Returns the groups this completes, as
        ``(group, completion instant, flow ids released)``."""
        s = self.state.get(fid)
        if s is None or s in (DONE, FAILED):
            return []
        if s == RELEASED or (s == SENT and fid not in self.udp):
            self.active -= 1
        self.state[fid] = DONE
        self.t_end[fid] = t_end_ns
        g = self.barrier[fid]
        if g < 0:
            return []
        self.group_t[g] = max(self.group_t[g], t_end_ns)
        self.group_left[g] -= 1
        if self.group_left[g]:
            return []
        t_done = self.group_t[g]
        self.completed[g] = t_done
        released = [w for w in self.waiters.get(g, []) if self.state.get(w) == WAITING]
        for w in released:
            self._release(w, t_done)
        return [(g, t_done, released)]

    def forget(self, fid: int) -> bool:
        """Drop a settled flow that belongs to no completion group (its row is saved
        elsewhere): nothing here needs it any more, and ``outcomes`` leaves it out.
        A group's members stay, since the group's fate depends on them. True if
        dropped."""
        if self.state.get(fid) not in (DONE, FAILED) or self.barrier[fid] >= 0:
            return False
        del self.state[fid], self.barrier[fid], self.after[fid]
        self.udp.discard(fid)
        for known in (self.release_ns, self.t_end, self.sent_at, self.errors):
            known.pop(fid, None)
        return True

    def _release(self, fid: int, t_ns: int) -> None:
        self.state[fid] = RELEASED
        self.release_ns[fid] = t_ns
        self.active += 1

    # ----- queries --------------------------------------------------------------------
    def dead_groups(self, now_ns: int, grace_ns: int) -> dict[int, str]:
        """Groups that can no longer complete, with the reason."""
        dead: dict[int, str] = {}
        for fid in self.state:
            g = self.barrier[fid]
            if g < 0 or g in dead:
                continue
            s = self.state[fid]
            if s == FAILED:
                dead[g] = f"flow {fid} failed"
            elif s == SENT and fid in self.udp and now_ns - self.sent_at[fid] >= grace_ns:
                dead[g] = f"flow {fid} was lost"
            elif s == WAITING and self.after[fid] in dead:
                dead[g] = f"flow {fid} was never released"
        return dead

    def settled(self, now_ns: int, grace_ns: int) -> bool:
        """True when no flow can make progress any more."""
        if self.active:
            return False
        dead = None
        for fid in self.state:
            s = self.state[fid]
            if s in (DONE, FAILED):
                continue
            if s == SENT and fid in self.udp and now_ns - self.sent_at[fid] >= grace_ns:
                continue
            if s == WAITING:
                if dead is None:
                    dead = self.dead_groups(now_ns, grace_ns)
                if self.after[fid] in dead:
                    continue
            return False
        return True

    def outcomes(
        self, now_ns: int, grace_ns: int, ended: str | bool = ""
    ) -> dict[int, tuple[bool, str]]:
        """``{flow_id: (ok, error)}`` at the end of the run for every flow not forgotten;
        nothing is dropped silently.
        ``ended`` says how the run ended early ("timed out after 60 s"), if it did."""
        dead = self.dead_groups(now_ns, grace_ns)
        if ended is True:
            ended = "timed out"
        end = f"before the run {ended}" if ended else "before the run ended"
        out: dict[int, tuple[bool, str]] = {}
        for fid in self.state:
            s = self.state[fid]
            if s == DONE:
                out[fid] = (True, "")
            elif s == FAILED:
                out[fid] = (False, self.errors[fid])
            elif s == SENT and fid in self.udp:
                out[fid] = (False, "datagram sent but never received (lost)")
            elif s == SENT:
                out[fid] = (False, f"sent but not fully received {end}")
            elif s == RELEASED:
                out[fid] = (False, f"released but not sent {end}")
            elif self.after[fid] in dead:
                g = self.after[fid]
                out[fid] = (False, f"never released: group {g} did not complete ({dead[g]})")
            else:
                out[fid] = (
                    False,
                    f"never released: group {self.after[fid]} had not completed {end}",
                )
        return out

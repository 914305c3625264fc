"""retention: what the coordinator and the agent workers keep per message, without root.

    .venv/bin/python -m benchmarks.retention --seconds 90 --out retention.json

Not a registered benchmark (``kvfabric bench`` does not run it): a probe for the soak's
memory growth (``benchmarks.soak``) that needs no Mininet. A loopback fleet (4 hosts on
127.0.0.x, 2 workers) carries planned UDP probes, planned small TCP messages and a live
driver's TCP messages, about 325 messages/s, through ``AgentFleet`` and ``LiveTables``
as the runner uses them. ``tracemalloc`` runs in this process (the coordinator's); the
workers are measured by RSS. Two instants, after the warm-up and 5 s before the end,
are compared; each growth is divided by the messages that ended between them. The
tracked structures' lengths at both instants and both snapshots (``<out>.warm.snap``,
``<out>.end.snap``) are kept for a closer look (``tracemalloc.Snapshot.load``)."""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import psutil

from experiments.orchestration.live import LiveTables
from topologies.scale import Scale
from traffic.agents import AgentFleet
from traffic.driver import Message
from traffic.workloads import concat_schedules, probe

TICK_NS = 10_000_000


class LoopbackNet:
    """Enough of FabricNetwork for AgentFleet: host hN has address 127.0.0.(N+1)."""

    def __init__(self, n: int) -> None:
        hosts = [SimpleNamespace(name=f"h{i}", ip=f"127.0.0.{i + 1}", server=i) for i in range(n)]
        by_name = {h.name: h for h in hosts}
        self.fabric = SimpleNamespace(hosts=hosts, node=by_name.__getitem__)


class Ticker:
    """A live driver: one TCP message every TICK_NS, round robin over pairs."""

    def __init__(self, pairs: list[tuple[str, str]], duration_s: float, first_fid: int) -> None:
        self.pairs, self.duration_ns, self.fid = pairs, int(duration_s * 1e9), first_fid
        self.hosts = sorted({h for p in pairs for h in p})
        self.tenants = ["live"]
        self.next = self.end = 0
        self.open = 0

    def start(self, t0: int) -> list[Message]:
        self.next, self.end = t0 + TICK_NS, t0 + self.duration_ns
        return []

    def next_timer_ns(self) -> int | None:
        return self.next if self.next < self.end else None

    def on_timer(self, now: int) -> list[Message]:  # one message per tick passed
        out = []
        while self.next <= now and self.next < self.end:
            src, dst = self.pairs[self.fid % len(self.pairs)]
            out.append(
                Message(
                    self.fid,
                    "probe",
                    src,
                    dst,
                    400,
                    self.next + 5_000_000,
                    tenant="live",
                    scaled=False,
                )
            )
            self.fid += 1
            self.open += 1
            self.next += TICK_NS
        return out

    def on_received(self, fid: int, t_end_ns: int) -> list[Message]:
        self.open -= 1
        return []

    def on_failed(self, fid: int, error: str, now_ns: int) -> list[Message]:
        self.open -= 1
        return []

    def finished(self) -> bool:
        return self.next >= self.end and self.open <= 0

    def finish(self, now_ns: int, why: str) -> None:
        pass


def lengths(fleet: AgentFleet, live: LiveTables) -> dict[str, int]:
    """The sizes of what the coordinator holds per flow."""
    c = fleet.coordinator
    t = c.tracker
    out = {}
    for name in (
        "state",
        "order",
        "barrier",
        "release_ns",
        "t_end",
        "sent_at",
        "errors",
        "udp",
        "failures",
    ):
        if hasattr(t, name):
            out[f"tracker.{name}"] = len(getattr(t, name))
    for name in ("received_log", "live", "src_of", "_live_ids", "saved"):
        if hasattr(c, name):
            out[f"coord.{name}"] = len(getattr(c, name))
    if hasattr(live.progress, "_messages"):
        out["progress._messages"] = len(live.progress._messages)
    out["forgotten"] = getattr(c, "forgotten", 0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--warm", type=float, default=20)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    dur = a.seconds
    pairs = [("h0", "h1"), ("h1", "h2"), ("h2", "h3"), ("h3", "h0")]
    udp = probe(pairs, 25, 200, dur, tenant="udp")
    tcp = probe(pairs, 25, 200, dur, tenant="tcp", first_flow_id=10**6)
    tcp["proto"] = "tcp"
    schedule = concat_schedules([udp, tcp])
    driver = Ticker(pairs, dur, 10**7)
    run_dir = Path(tempfile.mkdtemp(prefix="kvf-mem-"))
    fleet = AgentFleet(
        LoopbackNet(4),
        run_dir,
        schedule,
        Scale(1e-3),
        cc="reno",
        processes=2,
        priority="normal",
        driver=driver,
    )
    marks: list[dict] = []

    def watch() -> None:
        while fleet.t0_ns is None:
            time.sleep(0.05)
        for at in (a.warm, dur - 5):
            while time.monotonic_ns() < fleet.t0_ns + at * 1e9:
                time.sleep(0.05)
            gc.collect()
            c = fleet.coordinator
            marks.append(
                {
                    "at": at,
                    "handled": c.messages_handled,
                    "snap": tracemalloc.take_snapshot(),
                    "lens": lengths(fleet, lt),
                    "rss": {
                        n: psutil.Process(p.pid).memory_info().rss for n, p in fleet.procs.items()
                    },
                    "self_rss": psutil.Process().memory_info().rss,
                }
            )

    try:
        with fleet:
            lt = LiveTables(run_dir, fleet, None, flush_s=2.0)
            with lt:
                tracemalloc.start(8)
                th = threading.Thread(target=watch, daemon=True)
                th.start()
                flows = fleet.run(timeout_s=dur + 30)
                th.join()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    m0, m1 = marks
    # the messages carried between the two instants: those that ended between them
    t_end = flows["t_end_ns"] - fleet.t0_ns
    n = int(((t_end >= m0["at"] * 1e9) & (t_end < m1["at"] * 1e9)).sum())
    m0["snap"].dump(a.out + ".warm.snap")
    m1["snap"].dump(a.out + ".end.snap")
    diff = m1["snap"].compare_to(m0["snap"], "traceback")
    top = []
    for st in diff[:25]:
        frames = [f"{Path(f.filename).name}:{f.lineno}" for f in st.traceback][-4:]
        top.append(
            {
                "bytes_per_msg": round(st.size_diff / n, 1),
                "count_diff": st.count_diff,
                "where": frames,
            }
        )
    res = {
        "messages": n,
        "ok": bool(flows["ok"].all()),
        "flows": len(flows),
        "traced_growth_per_msg": round(sum(s.size_diff for s in diff) / n, 1),
        "coord_rss_growth_per_msg": round((m1["self_rss"] - m0["self_rss"]) / n, 1),
        "worker_rss_growth_per_msg": {
            k: round((m1["rss"][k] - m0["rss"][k]) / n, 1) for k in m0["rss"]
        },
        "lens_warm": m0["lens"],
        "lens_end": m1["lens"],
        "top": top,
    }
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

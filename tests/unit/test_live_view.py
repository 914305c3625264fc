"""``kvfabric run --live``'s screen: hand-made snapshots rendered as a terminal shows
them, and a run's rows folded into what the screen says (hottest queue and link, TTFT
so far, each fidelity check as it stands)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from experiments.analysis.standing import (
    CheckStanding,
    Latency,
    LinkLoad,
    LiveSnapshot,
    Port,
    QueueLoad,
    Spread,
    Standing,
    Traffic,
    stand,
)
from experiments.output.live_view import live_view
from topologies import spine_leaf
from traffic.agents.progress import FlowProgress

PERIOD_NS = 5_000_000  # 200 Hz


def screen(snapshot: LiveSnapshot, width: int = 160) -> str:
    console = Console(record=True, width=width, force_terminal=True, color_system=None)
    console.print(live_view(snapshot))
    return console.export_text()


def lines_with(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


# ----- the screen ------------------------------------------------------------------------
def test_the_hottest_queues_come_first_with_packets_and_share_of_buffer():
    snap = LiveSnapshot(
        "flagship/least_loaded",
        "running",
        elapsed_s=3.0,
        duration_s=10.0,
        queues=(
            QueueLoad("leaf0→spine1", 3, 8, 100),
            QueueLoad("leaf1→spine0", 40, 90, 100, drops=7),
            QueueLoad("spine0→leaf0", 0, 0, 100),
        ),
    )
    text = screen(snap)
    assert "Hottest queues, packets (of 3)" in text
    assert "3.0 s of 10.0 s" in text
    rows = [line.split() for line in text.splitlines() if "→" in line]
    assert rows[0] == ["leaf1→spine0", "40", "90", "90", "%", "7"]
    assert rows[1] == ["leaf0→spine1", "3", "8", "8", "%", "0"]


def test_only_the_top_rows_are_shown():
    queues = tuple(QueueLoad(f"leaf{i}→spine0", i, i, 50) for i in range(12))
    text = screen(LiveSnapshot("r", "running", queues=queues))
    assert "Hottest queues, packets (of 12)" in text
    assert lines_with(text, "leaf11→spine0") and not lines_with(text, "leaf0→spine0")
    assert len(lines_with(text, "→spine0")) == 5


def test_links_in_percent_of_capacity():
    snap = LiveSnapshot(
        "r",
        "running",
        links=(LinkLoad("leaf0→spine1", 36.0, 40.0), LinkLoad("leaf0→spine0", 4.0, 40.0)),
    )
    text = screen(snap)
    assert "Hottest links (of 2)" in text
    hot = lines_with(text, "leaf0→spine1")[0]
    assert "36" in hot and "90 %" in hot
    assert text.index("leaf0→spine1") < text.index("leaf0→spine0")


def test_requests_and_latencies_so_far():
    traffic = Traffic(
        flows_in_flight=4,
        flows_settled=120,
        requests_total=50,
        requests_in_flight=3,
        requests_done=20,
        ttft=Latency(20, 158.0, 212.0),
        itl=Latency(0),
    )
    text = screen(LiveSnapshot("r", "running", traffic=traffic))
    assert "4 in flight, 120 settled" in text
    assert "3 in flight, 20 done of 50" in text
    assert "p50 158 ms, p99 212 ms (n=20)" in lines_with(text, "TTFT")[0]
    assert "n=0" in lines_with(text, "ITL")[0]


def test_long_latencies_read_in_plain_milliseconds():
    traffic = Traffic(requests_total=5, ttft=Latency(5, 1580.0, 23456.0), itl=Latency(9, 0.0123, 2))
    text = screen(LiveSnapshot("r", "running", traffic=traffic))
    assert "p50 1580 ms, p99 23456 ms (n=5)" in lines_with(text, "TTFT")[0]
    assert "p50 0.0123 ms, p99 2 ms (n=9)" in lines_with(text, "ITL")[0]


def test_without_a_serving_workload_no_request_lines():
    text = screen(LiveSnapshot("r", "running", traffic=Traffic(flows_settled=3)))
    assert "0 in flight, 3 settled" in text
    assert not lines_with(text, "TTFT") and not lines_with(text, "requests")


def test_each_check_shows_its_standing():
    checks = (
        CheckStanding("cpu", "ok", "p95 40 % (≤ 90)"),
        CheckStanding("lateness", "at risk", "p99 1.8 ms (≤ 2)"),
        CheckStanding("dequeue_rate", "failing", "0.900×"),
        CheckStanding("unmodelled_loss", "pending", "judged at the end"),
    )
    text = screen(LiveSnapshot("r", "running", checks=checks))
    assert "Fidelity as it stands" in text
    for name, status in [
        ("cpu", "ok"),
        ("lateness", "at risk"),
        ("dequeue_rate", "failing"),
        ("unmodelled_loss", "pending"),
    ]:
        assert status in lines_with(text, name)[0]


def test_queues_and_links_side_by_side_fit_an_80_by_24_terminal():
    snap = LiveSnapshot(
        "topology-aware-placement/router=topology_aware",
        "running",
        queues=tuple(QueueLoad(f"rail{i}→spine1", i, 2 * i, 64) for i in range(8)),
        links=tuple(LinkLoad(f"rail{i}→spine0", 4.0 * i, 40.0) for i in range(8)),
        traffic=Traffic(requests_total=30, ttft=Latency(3, 150.0, 160.0)),
        checks=tuple(CheckStanding(f"check{i}", "ok", "p95 1 (≤ 2)", "x" * 80) for i in range(6)),
    )
    text = screen(snap, width=80)
    lines = text.splitlines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 80
    both = lines_with(text, "rail7→spine1")[0]
    assert "rail7→spine0" in both  # the hottest queue and the hottest link on one line


def test_a_narrow_terminal_still_shows_every_table():
    snap = LiveSnapshot(
        "r",
        "running",
        queues=(QueueLoad("leaf0→spine1", 1, 2, 10),),
        links=(LinkLoad("leaf0→spine1", 1.0, 10.0),),
        checks=(CheckStanding("cpu", "ok", "p95 4 %", "a long detail " * 10),),
    )
    text = screen(snap, width=60)
    for title in ("Hottest queues", "Hottest links", "Traffic so far", "Fidelity"):
        assert title in text
    assert max(len(line) for line in text.splitlines()) <= 60


# ----- folding a run's rows in ----------------------------------------------------------------
def queue_rows(node, port, backlog, sent_per_tick, t0=0, sent0=0, drops=None):
    n = len(backlog)
    return pd.DataFrame(
        {
            "t_ns": t0 + np.arange(n, dtype=np.int64) * PERIOD_NS,
            "node": node,
            "port": port,
            "backlog_pkts": np.asarray(backlog, dtype=np.int64),
            "backlog_bytes": np.asarray(backlog, dtype=np.int64) * 1514,
            "drops": np.zeros(n, dtype=np.int64) if drops is None else np.asarray(drops),
            "sent_bytes": sent0 + np.arange(n, dtype=np.int64) * sent_per_tick,
        }
    )


FABRIC = spine_leaf(2, 2, 2)
RATE = 10_000_000  # 10 Mbit/s: 6,250 bytes per 5 ms tick


def ports() -> dict:
    return {
        ("leaf0", 3): Port("leaf0→spine0", RATE, 100),
        ("leaf1", 3): Port("leaf1→spine0", RATE, 100),
    }


def test_the_latest_samples_set_a_queues_backlog_and_peak():
    s = Standing(ports())
    s.add("queues", queue_rows("leaf0", 3, [0, 50, 80, 20], 6250))
    s.add("queues", queue_rows("leaf1", 3, [1, 2, 3, 2], 100))
    snap = s.snapshot("r", "running")
    by_port = {q.port: q for q in snap.queues}
    assert (by_port["leaf0→spine0"].backlog_pkts, by_port["leaf0→spine0"].peak_pkts) == (20, 80)
    assert by_port["leaf0→spine0"].peak_pct == pytest.approx(80)
    s.add("queues", queue_rows("leaf0", 3, [5, 4], 6250, t0=20 * PERIOD_NS, drops=[3, 9]))
    q = {q.port: q for q in s.snapshot("r", "running").queues}["leaf0→spine0"]
    assert (q.backlog_pkts, q.peak_pkts) == (4, 5)  # the peak is recent, not all-time


def test_drops_count_from_the_first_sample_seen():
    s = Standing(ports())
    s.add("queues", queue_rows("leaf0", 3, [1, 1], 10, drops=[100, 104]))
    s.add("queues", queue_rows("leaf0", 3, [1, 1], 10, t0=10 * PERIOD_NS, drops=[104, 110]))
    assert s.snapshot("r", "running").queues[0].drops == 10


def test_a_link_rate_is_measured_across_chunks_in_percent_of_its_capacity():
    s = Standing(ports())

    def link(t_ms, tx):
        return pd.DataFrame(
            {"t_ns": [t_ms * 1_000_000], "node": ["leaf0"], "port": [3], "tx_bytes": [tx]}
        )

    s.add("links", link(0, 0))
    assert s.snapshot("r", "running").links == ()  # one sample: no rate yet
    s.add("links", link(100, 100_000))  # 800 kbit in 0.1 s: 8 Mbit/s
    (k,) = s.snapshot("r", "running").links
    assert (k.port, round(k.mbps, 6), round(k.pct, 6)) == ("leaf0→spine0", 8.0, 80.0)


def test_ttft_and_itl_so_far():
    s = Standing(ports(), requests_total=10)
    s.add("requests", pd.DataFrame({"ttft_ms": [100.0, 200.0, 300.0], "error": [None] * 3}))
    s.add("requests", pd.DataFrame({"ttft_ms": [np.nan], "error": ["kv transfer failed"]}))
    s.add("tokens", pd.DataFrame({"itl_ms": np.full(1000, 20.0)}))
    tr = s.snapshot("r", "running", requests_arrived=7).traffic
    assert (tr.requests_done, tr.requests_failed, tr.requests_in_flight) == (3, 1, 3)
    assert tr.ttft.n == 3 and tr.ttft.p50_ms == pytest.approx(200, rel=0.01)
    assert tr.itl.n == 1000 and tr.itl.p99_ms == pytest.approx(20, rel=0.01)
    text = screen(s.snapshot("r", "running", requests_arrived=7))
    assert "(n=3)" in lines_with(text, "TTFT")[0]


def test_a_spread_gives_quantiles_within_a_percent():
    rng = np.random.default_rng(3)
    x = rng.lognormal(3, 1.5, 20_000)
    sp = Spread()
    for part in np.array_split(x, 7):
        sp.add(part)
    for q in (0.5, 0.99):
        assert sp.quantile(q) == pytest.approx(np.quantile(x, q), rel=0.011)
    assert Spread().quantile(0.5) is None


def test_standing_against_a_limit():
    assert stand(None, 2.0) == "pending"
    assert stand(1.0, 2.0) == "ok"
    assert stand(1.7, 2.0) == "at risk"
    assert stand(2.5, 2.0) == "failing"
    assert stand(1.0, 2.0, ok=False) == "failing"
    assert stand(0.99, 0.9, lower=True) == "ok"
    assert stand(0.91, 0.9, lower=True) == "at risk"
    assert stand(0.5, 0.9, lower=True) == "failing"


def checks_of(s: Standing) -> dict[str, CheckStanding]:
    return {c.name: c for c in s.snapshot("r", "running").checks}


def test_late_flows_put_lateness_at_risk_then_failing():
    s = Standing(ports())
    assert checks_of(s)["lateness"].status == "pending"
    s.add("flows", pd.DataFrame({"lateness_ms": np.full(100, 0.1), "after": -1}))
    assert checks_of(s)["lateness"].status == "ok"
    s.add("flows", pd.DataFrame({"lateness_ms": np.full(10, 1.8), "after": -1}))
    assert checks_of(s)["lateness"].status == "at risk"
    s.add("flows", pd.DataFrame({"lateness_ms": np.full(10, 9.0), "after": -1}))
    assert checks_of(s)["lateness"].status == "failing"
    # rows a completed group released are not judged, as at the end of a run
    t = Standing(ports())
    t.add("flows", pd.DataFrame({"lateness_ms": [0.1, 50.0], "after": [-1, 4]}))
    assert checks_of(t)["lateness"].status == "ok"


def test_a_queue_that_drains_slower_than_its_rate_fails_dequeue_rate_across_chunks():
    s = Standing(ports())
    backlog = np.full(200, 60)  # one second of a standing queue, in two chunks
    slow = 6250 * 8 // 10  # 80 % of 10 Mbit/s
    s.add("queues", queue_rows("leaf0", 3, backlog[:100], slow))
    s.add("queues", queue_rows("leaf0", 3, backlog[100:], slow, 100 * PERIOD_NS, 100 * slow))
    c = checks_of(s)["dequeue_rate"]
    assert c.status == "failing" and "0.800×" in c.measured
    fair = Standing(ports())
    fair.add("queues", queue_rows("leaf0", 3, backlog[:100], 6250))
    fair.add("queues", queue_rows("leaf0", 3, backlog[100:], 6250, 100 * PERIOD_NS, 100 * 6250))
    assert checks_of(fair)["dequeue_rate"].status == "ok"


def test_a_chunk_read_as_arrow_folds_as_its_frame_does():
    import pyarrow as pa

    backlog = np.r_[np.full(100, 60), np.full(100, 3)]
    slow = 6250 * 8 // 10  # 80 % of 10 Mbit/s: dequeue_rate fails
    frames = [
        queue_rows("leaf0", 3, backlog, slow, drops=np.arange(200)),
        queue_rows("leaf1", 3, backlog[::-1], 6250),
    ]
    as_frames, as_arrow = Standing(ports()), Standing(ports())
    for rows in frames:
        as_frames.add("queues", rows)
        as_arrow.add("queues", pa.Table.from_pandas(rows, preserve_index=False))
    a, b = as_frames.snapshot("r", "running"), as_arrow.snapshot("r", "running")
    assert a.queues == b.queues and a.checks == b.checks
    assert {c.name: c.status for c in b.checks}["dequeue_rate"] == "failing"
    assert {q.port: q.drops for q in b.queues}["leaf0→spine0"] == 199


def test_a_machine_at_full_cpu_fails_the_cpu_check():
    s = Standing(ports())
    t = np.arange(20, dtype=np.int64) * 100_000_000
    s.add("cpu", pd.DataFrame({"t_ns": t, "cpu_pct": 50.0, "max_core_pct": 60.0, "steal_pct": 0}))
    assert checks_of(s)["cpu"].status == "ok"
    s.add(
        "cpu",
        pd.DataFrame(
            {"t_ns": t + 2_000_000_000, "cpu_pct": 99.0, "max_core_pct": 100.0, "steal_pct": 0}
        ),
    )
    assert checks_of(s)["cpu"].status == "failing"


def test_between_judgements_the_checks_stay_as_last_judged_and_the_rest_moves_on():
    s = Standing(ports())
    s.add("flows", pd.DataFrame({"lateness_ms": np.full(100, 0.1), "after": -1}))
    assert checks_of(s)["lateness"].status == "ok"
    s.add("flows", pd.DataFrame({"lateness_ms": np.full(10, 9.0), "after": -1}))
    s.add("queues", queue_rows("leaf0", 3, np.full(10, 7), 6250))
    kept = s.snapshot("r", "running", judge=False)
    assert {c.name: c for c in kept.checks}["lateness"].status == "ok"  # as last judged
    assert kept.queues and kept.queues[0].backlog_pkts == 7  # the queues are new
    assert checks_of(s)["lateness"].status == "failing"  # judged again
    fresh = Standing(ports())  # nothing judged yet: judged now, whatever is asked
    assert fresh.snapshot("r", "running", judge=False).checks


def test_a_sampler_that_kept_half_its_rate_is_failing():
    s = Standing(ports(), sampler_hz=200)
    s.add("queues", queue_rows("leaf0", 3, np.zeros(201), 0))  # 200 Hz for a second
    assert checks_of(s)["sampler_rate"].status == "ok"
    half = Standing(ports(), sampler_hz=400)
    half.add("queues", queue_rows("leaf0", 3, np.zeros(201), 0))
    assert checks_of(half)["sampler_rate"].status == "failing"


def test_offered_load_over_the_settled_flows():
    flows = pd.DataFrame(
        {
            "src": ["h0", "h2"],
            "dst": ["h2", "h0"],
            "bytes": [1_000_000, 1_000_000],
            "t_start_ns": [0, 0],
            "t_end_ns": [1_000_000_000, 1_000_000_000],
            "ok": [True, True],
        }
    )
    names = {n.name for n in FABRIC.hosts}
    assert {"h0", "h2"} <= names
    # 2 MB over 3 switches (leaf, spine, leaf) in 1 s: 48 Mbit/s of switch-hop work
    s = Standing(ports(), fabric=FABRIC, capacity_mbps=100.0)
    s.add("flows", flows)
    c = checks_of(s)["offered_load"]
    assert c.status == "ok" and "48 Mbit/s" in c.measured
    tight = Standing(ports(), fabric=FABRIC, capacity_mbps=40.0)
    tight.add("flows", flows)
    assert checks_of(tight)["offered_load"].status == "failing"
    assert checks_of(s)["unmodelled_loss"].status == "pending"


def test_flows_in_flight_are_those_sent_and_not_yet_settled():
    tracker = SimpleNamespace(sent_at={1: 0, 2: 0, 3: 0, 4: 0}, t_end={1: 5}, errors={2: "x"})
    fleet = SimpleNamespace(coordinator=SimpleNamespace(tracker=tracker))
    assert FlowProgress(fleet).in_flight() == 2
    assert FlowProgress(SimpleNamespace(coordinator=None)).in_flight() == 0

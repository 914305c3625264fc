"""A run's tables saved as it goes (chunks): what a killed run keeps, how it reads back,
and what its report says. No root: the agents run over loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.measurement.sampler_process import _Saver
from experiments.measurement.samplers import QueueSampler
from experiments.orchestration.live import LiveTables
from experiments.orchestration.runner import Recorded, write_tables
from experiments.output import chunks
from experiments.output.report import write_report
from experiments.output.results import load_run, read_table, write_json, write_table
from topologies.scale import Scale
from traffic.agents import AgentFleet

CC = "cubic" if os.geteuid() == 0 else "reno"
T0 = 5_000_000_000


def queue_rows(first: int, n: int) -> pd.DataFrame:
    t = T0 + np.arange(first, first + n, dtype=np.int64) * 5_000_000
    return pd.DataFrame(
        {
            "t_ns": t,
            "node": "leaf0",
            "port": 1,
            "backlog_pkts": np.arange(n),
            "backlog_bytes": 0,
            "drops": 0,
            "sent_bytes": 0,
        }
    )


def batches() -> list[pd.DataFrame]:
    return [queue_rows(0, 10), queue_rows(10, 7), queue_rows(17, 12)]


def in_progress_run(run_dir: Path, spec: dict | None = None) -> None:
    """What a killed run's folder has besides its chunks: the summary written at its start
    and its resolved spec (``spec``, default a serving one the schema no longer reads)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(
        run_dir,
        "summary",
        {
            "experiment": "serving-basic",
            "run_id": run_dir.name,
            "partial": True,
            "error": "run in progress",
        },
    )
    spec = spec or {
        "name": "serving-basic",
        "scale": {"bandwidth": 1e-4},
        "workloads": [{"kind": "serving"}],
    }
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(spec))


def test_a_writer_killed_after_three_batches_leaves_all_three(tmp_path):
    script = (
        "import sys, time, numpy as np, pandas as pd\n"
        "from experiments.output.chunks import ChunkWriter\n"
        "w = ChunkWriter(sys.argv[1], 'queues')\n"
        "for k in range(10**6):\n"
        "    w.append(pd.DataFrame({'t_ns': np.arange(k * 100, k * 100 + 100)}))\n"
        "    if k == 2: print('three', flush=True); time.sleep(60)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "three"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    table = read_table(tmp_path, "queues")
    assert table["t_ns"].tolist() == list(range(300))
    assert not (tmp_path / "queues.parquet").exists()


def test_a_truncated_or_garbage_last_chunk_is_skipped_and_the_rest_read(tmp_path):
    in_progress_run(tmp_path)
    writer = chunks.ChunkWriter(tmp_path, "queues")
    paths = [writer.append(b) for b in batches()]
    data = paths[-1].read_bytes()
    paths[-1].write_bytes(data[: len(data) // 2])  # cut short, as a power loss may leave it
    (paths[-1].parent / "000004.parquet").write_bytes(b"not parquet")
    run = load_run(tmp_path)
    assert run.recovered == ("queues",)
    assert len(run.queues) == 17
    assert run.queues["backlog_pkts"].tolist() == list(range(10)) + list(range(7))
    assert [s.split(":")[0] for s in run.skipped_chunks("queues")] == [
        "000003.parquet",
        "000004.parquet",
    ]


def test_a_chunk_being_written_is_not_read(tmp_path):
    writer = chunks.ChunkWriter(tmp_path, "queues")
    writer.append(batches()[0])
    (writer.folder / ".000002.parquet.abc.tmp").write_bytes(b"half")
    assert len(read_table(tmp_path, "queues")) == 10
    assert chunks.ChunkWriter(tmp_path, "queues").append(batches()[1]).name == "000002.parquet"


def test_compact_writes_what_a_one_shot_write_does_and_removes_the_chunks(tmp_path):
    one_shot, chunked = tmp_path / "one", tmp_path / "chunked"
    one_shot.mkdir()
    writer = chunks.ChunkWriter(chunked, "queues")
    for b in batches():
        writer.append(b)
    write_table(one_shot, "queues", pd.concat(batches(), ignore_index=True))
    assert chunks.compact(chunked, "queues") == chunked / "queues.parquet"
    pd.testing.assert_frame_equal(read_table(chunked, "queues"), read_table(one_shot, "queues"))
    assert not (chunked / chunks.PARTIAL).exists()
    assert chunks.compact(chunked, "queues") is None  # nothing left to gather


def test_an_old_style_run_loads_as_before(tmp_path):
    in_progress_run(tmp_path)
    write_json(tmp_path, "summary", {"run_id": "r", "partial": False, "error": None})
    write_table(tmp_path, "queues", queue_rows(0, 5))
    run = load_run(tmp_path)
    assert run.recovered == ()
    assert len(run.queues) == 5 and run.flows is None


def test_report_of_a_killed_run_names_what_was_recovered_and_what_is_missing(tmp_path):
    in_progress_run(tmp_path)
    chunks.write_clock(tmp_path, T0)
    writer = chunks.ChunkWriter(tmp_path, "queues")
    for b in batches():
        writer.append(b)  # 29 rows, the last 140 ms after t0
    text = write_report([tmp_path]).read_text()
    assert "This run never finished" in text and "run in progress" in text
    assert "fidelity verdict and the run's metrics were not computed" in text
    assert "- queues: 29 rows, up to 0.14 s after t0" in text
    assert "Absent (nothing of them was saved): flows, requests, tokens, links, cpu." in text
    assert "The run failed" not in text


def test_a_killed_dilated_runs_wall_clock_chunks_read_back_in_real_equivalent_time(tmp_path):
    spec = {
        "name": "incast",
        "duration_s": 10,
        "scale": {"bandwidth": 1e-4, "time_dilation": 4},
        "fabric": {"kind": "spine_leaf"},
        "workloads": [
            {"kind": "incast", "receiver": "h0", "senders": 2, "sru_bytes": 1000, "rounds": 1}
        ],
    }
    in_progress_run(tmp_path, spec)
    chunks.write_clock(tmp_path, T0)
    writer = chunks.ChunkWriter(tmp_path, "queues")
    for b in batches():
        writer.append(b)  # the last row 140 ms of wall time after t0: 35 ms real
    run = load_run(tmp_path)
    assert run.table("queues")["t_ns"].max() == T0 + 35_000_000
    assert "- queues: 29 rows, up to 0.035 s after t0" in write_report([tmp_path]).read_text()


def test_saved_sampler_rows_are_each_saved_once(tmp_path):
    q = QueueSampler({"s1-eth1": ("s1", 1), "s1-eth2": ("s1", 2)}, 100)

    def tick(t: int) -> None:
        for port in (0, 1):
            q._rows.extend((t, port, 3, 4500, 0, t * 10))

    saver = _Saver({"dir": str(tmp_path), "flush_s": 1.0}, {"queues": q})
    tick(1)
    tick(2)
    every = q.table()  # what the sampler holds before anything is saved
    saver.save()
    tick(3)
    saver.save()
    saver.save()  # nothing new: no chunk
    assert len(chunks.chunk_paths(tmp_path, "queues")) == 2
    saved = read_table(tmp_path, "queues")
    assert len(saved) == 6 and saved.iloc[:4].equals(every)
    assert len(q._rows) == 0  # saved rows leave memory: a long run's sampler stays flat
    with pytest.raises(ValueError, match="forgotten"):
        q.table()
    tick(4)  # sampled after the last save, at stop
    whole = tmp_path / "queues-whole.parquet"
    saver.write("queues", whole)  # the chunks streamed, then what is still held
    got = pd.read_parquet(whole)
    assert got["t_ns"].tolist() == [1, 1, 2, 2, 3, 3, 4, 4]
    pd.testing.assert_frame_equal(got.iloc[:6], saved)


def test_write_tables_gathers_the_chunks_of_a_table_the_run_never_completed(tmp_path):
    writer = chunks.ChunkWriter(tmp_path, "flows")
    writer.append(pd.DataFrame({"flow_id": [1, 2], "fct_ms": [3.0, 4.0]}))
    chunks.ChunkWriter(tmp_path, "queues").append(queue_rows(0, 3))
    rec = Recorded(tables={"queues": queue_rows(0, 8)})
    assert write_tables(tmp_path, rec) == {"queues": "complete", "flows": "recovered"}
    assert len(read_table(tmp_path, "queues")) == 8  # the complete table, not its chunks
    assert rec.tables["flows"]["fct_ms"].tolist() == [3.0, 4.0]
    assert not (tmp_path / chunks.PARTIAL).exists()


class LoopbackNet:
    def __init__(self, n: int) -> None:
        hosts = [SimpleNamespace(name=f"h{i}", ip=f"127.0.0.{i + 1}", server=i) for i in range(n)]
        by_name = {h.name: h for h in hosts}
        self.fabric = SimpleNamespace(hosts=hosts, node=by_name.__getitem__)


def test_flows_saved_during_a_run_match_the_final_table(tmp_path):
    from traffic.workloads import concat_schedules, incast

    schedule = concat_schedules(
        [
            incast("h0", ["h1", "h2"], 200_000_000, 3),
            incast("h0", ["h1", "h2"], 200_000_000, 3, start_ms=300, first_flow_id=100),
        ]
    )
    fleet = AgentFleet(LoopbackNet(3), tmp_path, schedule, Scale(1e-3), cc=CC, processes=1)
    with fleet, LiveTables(tmp_path, fleet, None, flush_s=0.02):
        flows = fleet.run(timeout_s=20)
        time.sleep(0.1)  # the thread's next flush takes the last round
    assert flows["ok"].all()
    saved = read_table(tmp_path, "flows").sort_values("flow_id").reset_index(drop=True)
    assert saved["flow_id"].tolist() == flows["flow_id"].tolist()  # each flow once
    assert len(chunks.chunk_paths(tmp_path, "flows")) > 1  # saved as it went, not at the end
    for col in ("t_release_ns", "t_start_ns", "t_end_ns", "fct_ms", "ok"):
        pd.testing.assert_series_equal(saved[col], flows[col], check_names=False)
    assert saved["t_issue_ns"].isna().all()  # only the workers know it, at the end
    assert chunks.read_clock(tmp_path) == fleet.t0_ns


@pytest.mark.parametrize("flush_s", [0, -1.0])
def test_a_flush_interval_must_be_positive(tmp_path, flush_s):
    with pytest.raises(ValueError, match="flush_s"):
        LiveTables(tmp_path, SimpleNamespace(coordinator=None), None, flush_s=flush_s)


def test_a_serving_driver_hands_each_settled_request_over_once():
    from experiments.spec.load import SPECS_DIR, expand, load_spec
    from topologies import rail_optimized
    from traffic.serving import build_serving, fabric_rate, simulate

    fabric = rail_optimized(servers=4, gpus_per_server=4)
    workload = expand(load_spec(SPECS_DIR / "serving-basic.yaml"))[0].config.workloads[0]
    driver = build_serving(workload, fabric, 1, 1000, None)
    seen: set[int] = set()
    assert driver.settled_tables(seen) is None  # nothing has arrived yet
    simulate(driver, fabric_rate(fabric), t0_ns=10**12)
    requests, tokens = driver.settled_tables(seen)
    pd.testing.assert_frame_equal(requests, driver.requests_table())
    pd.testing.assert_frame_equal(tokens, driver.tokens_table())
    assert driver.settled_tables(seen) is None

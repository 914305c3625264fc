"""``kvfabric run --live``'s thin effect, without root: a screen that follows a run's
folder as the sampler process and the live-saving thread fill it, redraws on its own
thread, and lets go of the terminal on exit (Ctrl-C too)."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from experiments.measurement.chunks import ChunkWriter
from experiments.orchestration.deployment import Deployment
from experiments.orchestration.envelope import DEFAULT
from experiments.orchestration.live_view import LiveScreen
from experiments.spec.typed import default_section
from topologies import spine_leaf
from topologies.scale import Scale

FABRIC = spine_leaf(2, 2, 2)


class FakeTables:
    """What the screen uses of ``LiveTables``: its observers and its progress."""

    def __init__(self) -> None:
        self.observers: list = []
        self.progress = SimpleNamespace(in_flight=lambda: 7)

    def saved(self, table: str, frame: pd.DataFrame) -> None:
        for see in self.observers:
            see(table, frame)


def prepared():
    return SimpleNamespace(
        fabric=FABRIC,
        plan=SimpleNamespace(driver=None),
        config=SimpleNamespace(fidelity=default_section("fidelity")),
        envelope=DEFAULT,
    )


def queue_chunk(t0_ns: int, backlog: int) -> pd.DataFrame:
    t = t0_ns + np.arange(20, dtype=np.int64) * 5_000_000
    return pd.DataFrame(
        {
            "t_ns": np.concatenate([t, t]),
            "node": ["leaf0"] * 20 + ["leaf1"] * 20,
            "port": [3] * 40,
            "backlog_pkts": [backlog] * 20 + [1] * 20,
            "backlog_bytes": [backlog * 1514] * 20 + [1514] * 20,
            "drops": 0,
            "sent_bytes": np.arange(40, dtype=np.int64) * 1000,
        }
    )


def recording_console() -> Console:
    return Console(file=io.StringIO(), record=True, width=140, force_terminal=True)


def wait_for(console: Console, text: str, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in console.export_text(clear=False):
            return True
        time.sleep(0.05)
    return False


def test_the_screen_follows_a_runs_chunks_as_they_appear(tmp_path):
    deployed = Deployment.of(FABRIC, Scale(1e-4))
    fleet = SimpleNamespace(t0_ns=time.monotonic_ns())
    tables = FakeTables()
    console = recording_console()
    with LiveScreen(console, refresh_s=0.05) as screen:
        task = screen.add_task("spine-leaf/ecmp: building")
        assert wait_for(console, "spine-leaf/ecmp: building")
        screen.update(task, description="spine-leaf/ecmp: running")
        with screen.watch(prepared(), deployed, tmp_path, fleet, tables, sampler_hz=200.0):
            writer = ChunkWriter(tmp_path, "queues")
            writer.append(queue_chunk(fleet.t0_ns, 30))
            tables.saved("flows", pd.DataFrame({"lateness_ms": [0.1, 0.2], "after": -1}))
            assert wait_for(console, "Hottest queues, packets (of 2)")
            assert wait_for(console, "7 in flight, 2 settled")
        screen.update(task, description="spine-leaf/ecmp: collecting")
        assert wait_for(console, "spine-leaf/ecmp: collecting")
    assert screen._thread is not None and not screen._thread.is_alive()
    assert screen._live is None
    text = console.export_text()
    hot = [line for line in text.splitlines() if "leaf0→spine0" in line]
    assert hot and "30" in hot[-1]  # named by its neighbour, at the backlog it had
    assert tables.observers == []  # the run's saving thread no longer feeds the screen


def test_ctrl_c_releases_the_terminal_and_the_thread():
    console = recording_console()
    screen = LiveScreen(console, refresh_s=0.05)
    with pytest.raises(KeyboardInterrupt), screen:
        screen.add_task("r: running")
        raise KeyboardInterrupt
    assert not screen._thread.is_alive()
    assert screen._live is None
    assert "r: running" in console.export_text()


def test_a_view_that_cannot_follow_the_run_says_so_and_the_run_goes_on(tmp_path):
    console = recording_console()
    broken = SimpleNamespace(fabric=None, plan=None, config=None, envelope=None)
    with LiveScreen(console, refresh_s=0.05) as screen:
        screen.add_task("r: running")
        with screen.watch(broken, None, tmp_path, None, FakeTables(), 200.0) as watch:
            assert watch is None
            assert wait_for(console, "could not follow this run")


def test_a_sampler_chunk_is_read_for_the_columns_the_view_folds(tmp_path):
    from experiments.analysis.standing import FOLDED
    from experiments.measurement.samplers import LINK_COLUMNS
    from experiments.orchestration.live_view import read_chunk

    rows = pd.DataFrame({c: np.arange(3, dtype=np.int64) for c in LINK_COLUMNS})
    rows["node"] = "leaf0"
    path = ChunkWriter(tmp_path, "links").append(rows)
    links = read_chunk(path, FOLDED["links"])  # an Arrow table, never made a frame
    assert links.column_names == ["t_ns", "node", "port", "tx_bytes"]
    assert links["tx_bytes"].to_pylist() == [0, 1, 2] and set(links["node"].to_pylist()) == {
        "leaf0"
    }
    assert list(read_chunk(path).columns) == LINK_COLUMNS

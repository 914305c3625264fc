"""A server's sampler chunks brought into the run here as the run goes (``ChunkPull``),
beside this machine's own, each writer numbering its own (``<seq>-<writer>``). The
"server" is this machine (``Server("localhost")`` runs the pull script in ``sh``)."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.measurement.server_samplers import ChunkPull
from experiments.output import chunks
from topologies.cluster.ssh import Server


def _rows(first: int, n: int) -> pd.DataFrame:
    return pd.DataFrame({"t_ns": range(first, first + n), "backlog_pkts": [1] * n})


def test_each_new_chunk_of_a_server_comes_over_once_labelled_with_its_server(tmp_path):
    there, here = tmp_path / "server", tmp_path / "run"
    on_server = chunks.ChunkWriter(there, "queues")  # what the server's samplers save
    local = chunks.ChunkWriter(here, "queues")  # this machine's own samplers
    pull = ChunkPull(
        Server("localhost"), str(there / chunks.PARTIAL), here, "s1", "root@10.0.0.11", flush_s=1.0
    )
    assert pull.pull_once() == 0  # nothing saved there yet
    on_server.append(_rows(0, 3))
    on_server.append(_rows(3, 2))
    local.append(_rows(100, 4))
    assert pull.pull_once() == 2
    assert pull.pull_once() == 0  # each chunk once
    on_server.append(_rows(5, 1))
    assert pull.pull_once() == 1
    names = [p.name for p in chunks.chunk_paths(here, "queues")]
    assert names == [
        "000001.parquet",
        "000001-s1.parquet",
        "000002-s1.parquet",
        "000003-s1.parquet",
    ]
    table = chunks.read_chunks(here, "queues").frame
    mine = table[table["server"] == "root@10.0.0.11"]
    assert sorted(mine["t_ns"]) == [0, 1, 2, 3, 4, 5]
    assert table["server"].isna().sum() == 4  # this machine's rows, as they were


def test_a_writer_name_other_than_letters_and_digits_is_refused():
    with pytest.raises(ValueError, match="lower-case letters and digits"):
        chunks.ChunkWriter("/nonexistent-never-made", "queues", writer="s-1")


def test_a_servers_rows_are_moved_onto_this_machines_clock(tmp_path):
    there, here = tmp_path / "server", tmp_path / "run"
    chunks.ChunkWriter(there, "queues").append(_rows(5_000, 2))  # that server's clock
    pull = ChunkPull(
        Server("localhost"),
        str(there / chunks.PARTIAL),
        here,
        "s2",
        "root@10.0.0.12",
        flush_s=1.0,
        offset_ns=5_000,
    )
    assert pull.pull_once() == 1
    assert chunks.read_chunks(here, "queues").frame["t_ns"].tolist() == [0, 1]


def test_a_writer_reads_back_only_its_own_chunks(tmp_path):
    mine, theirs = chunks.ChunkWriter(tmp_path, "cpu"), chunks.ChunkWriter(tmp_path, "cpu", "s1")
    mine.append(_rows(0, 2))
    theirs.append(_rows(10, 2).assign(server="root@x"))  # another schema: a server column
    mine.append(_rows(2, 1))
    assert [p.name for p in mine.paths()] == ["000001.parquet", "000002.parquet"]
    assert [p.name for p in theirs.paths()] == ["000001-s1.parquet"]

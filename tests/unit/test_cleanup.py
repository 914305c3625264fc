"""What ``kvfabric clean`` may remove: only what a dead run left."""

from __future__ import annotations


def test_clean_knows_a_scratch_folder_a_killed_run_left_from_one_in_use(tmp_path):
    import psutil

    from topologies.cleanup import SCRATCH_PREFIX, stale_scratch

    me = psutil.Process()
    mine = tmp_path / f"{SCRATCH_PREFIX}{me.pid}-{int(me.create_time() * 100)}-abc"
    dead = tmp_path / f"{SCRATCH_PREFIX}{me.pid}-{int(me.create_time() * 100) - 500}-def"
    older = tmp_path / f"{SCRATCH_PREFIX}x1y2z3"  # named before owners were recorded
    for path in (mine, dead, older):
        path.mkdir()
    assert stale_scratch(tmp_path) == [dead]  # same pid, another start: a reused pid

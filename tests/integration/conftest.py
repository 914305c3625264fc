"""Every integration test must leave no bridge or interface of a kvfabric run.

Runs owned by other live processes (another test session on the same
machine) are not this test's leftovers and are ignored.
"""

from __future__ import annotations

import os

import pytest

from topologies.cleanup import bridges, interfaces, records
from topologies.naming import owned


def owned_leftovers() -> set[str]:
    others = {r.prefix for r in records() if r.owner_pid != os.getpid() and r.owner_alive()}
    return {
        n
        for n in bridges() + interfaces()
        if owned(n) and owned(n) not in others and not n.startswith("kfzz")
    }


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = owned_leftovers()
    yield
    after = owned_leftovers() - before
    assert not after, f"the test left kvfabric resources behind: {sorted(after)}"

"""Every integration test must leave no bridge or interface of a kvfabric run."""

from __future__ import annotations

import pytest

from topologies.cleanup import bridges, interfaces
from topologies.naming import owned


def owned_leftovers() -> list[str]:
    return [n for n in bridges() + interfaces() if owned(n) and not n.startswith("kfzz")]


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = set(owned_leftovers())
    yield
    after = set(owned_leftovers()) - before
    assert not after, f"the test left kvfabric resources behind: {sorted(after)}"

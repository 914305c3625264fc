"""Shared fixtures. Root integration tests are skipped, with the reason, when
the machine cannot build a fabric; under CI they must not be skipped."""

from __future__ import annotations

import os

import pytest


def _cannot_emulate() -> str | None:
    from topologies.system import is_root, mininet_importable, ovs_version

    if not is_root():
        return "needs root (sudo make test)"
    if not mininet_importable():
        return "Mininet is not importable (sudo make setup)"
    if ovs_version() is None:
        return "Open vSwitch is not running (sudo make setup)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _cannot_emulate()
    if reason is None:
        return
    if os.environ.get("CI"):
        # In CI a skipped integration test would hide a broken install step.
        return
    for item in items:
        if "root" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))

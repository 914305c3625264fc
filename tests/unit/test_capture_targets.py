"""Capture points named in a spec or on the command line (pure, no root)."""

from __future__ import annotations

import pytest

from experiments.spec.capture import targets
from topologies import spine_leaf


def test_hosts_and_switch_ports_by_number_or_neighbour():
    fabric = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    got = targets(fabric, ["h0", "leaf0:spine1", "leaf0:4", "spine0:1"])
    assert [(t.name, t.node, t.port, t.is_host) for t in got] == [
        ("h0", "h0", 0, True),
        ("leaf0-4", "leaf0", 4, False),
        ("spine0-1", "spine0", 1, False),
    ]  # (leaf0:spine1 and leaf0:4 are one port: captured once)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("zz", "no node 'zz'"),
        ("leaf0:9", "leaf0:3 (spine0)"),
        ("h0:1", "write 'h0'"),
    ],
)
def test_a_bad_point_is_refused_with_what_is_allowed(entry, says):
    with pytest.raises(ValueError, match="capture") as exc:
        targets(spine_leaf(spines=2, leaves=2, hosts_per_leaf=2), [entry])
    assert says in str(exc.value)


def test_tcpdump_says_what_its_buffer_dropped():
    from experiments.measurement.capture import kernel_drops

    text = (
        "tcpdump: listening on any\n1200 packets captured\n"
        "1210 packets received by filter\n7 packets dropped by kernel\n"
    )
    assert kernel_drops(text) == 7
    assert kernel_drops("tcpdump: no such device") is None

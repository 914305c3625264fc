"""A cluster run is judged per server: every server's CPU must pass (one busy server
fails the run and is named), and every server's samplers are judged by name."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.analysis import fidelity as fd
from experiments.measurement.server_samplers import ClusterSamplers


def _cpu(pct: float, server: str) -> pd.DataFrame:
    return pd.DataFrame({"t_ns": range(100), "cpu_pct": pct, "max_core_pct": pct, "server": server})


def test_one_saturated_server_fails_the_cpu_check_and_is_named():
    calm = pd.concat([_cpu(40.0, "localhost"), _cpu(50.0, "root@10.251.0.11")])
    c = fd.servers_cpu_check(calm, 90)
    assert c["ok"] and "2 servers judged" in c["detail"]
    busy = pd.concat([calm, _cpu(99.0, "root@10.251.0.12")])
    c = fd.servers_cpu_check(busy, 90)
    assert not c["ok"] and c["value"] == 99.0
    assert (
        "worst server root@10.251.0.12" in c["detail"]
        and "failed on root@10.251.0.12" in c["detail"]
    )
    assert c["by_server"]["localhost"]["ok"] and not c["by_server"]["root@10.251.0.12"]["ok"]


def test_without_servers_the_one_machine_is_judged_as_before():
    one = _cpu(50.0, "x").drop(columns="server")
    assert fd.servers_cpu_check(one, 90) == fd.cpu_check(one, 90)


class _Part:
    def __init__(self, achieved: float) -> None:
        self.achieved = achieved

    def rates(self):
        return {"queues": {"achieved_hz": self.achieved, "requested_hz": 200.0}}


def test_every_servers_sampler_is_judged_under_its_own_name():
    samplers = ClusterSamplers.__new__(ClusterSamplers)
    samplers.parts = {"localhost": _Part(199.0), "root@10.251.0.12": _Part(90.0)}
    rates = samplers.rates()
    assert set(rates) == {"queues", "queues@root@10.251.0.12"}
    c = fd.sampler_rate_check(rates)
    assert not c["ok"] and "queues@root@10.251.0.12" in c["detail"]


def _links(sent_by_server):
    """A LinkSampler table: each server's one switch port sent ``bytes`` over the run."""
    rows = []
    for server, (node, sent) in sent_by_server.items():
        rows += [
            {"t_ns": 0, "node": node, "port": 1, "tx_bytes": 1000, "server": server},
            {"t_ns": 10**9, "node": node, "port": 1, "tx_bytes": 1000 + sent, "server": server},
        ]
    return pd.DataFrame(rows)


def test_each_server_is_judged_by_its_own_share_of_the_switch_hop_work():
    from topologies import spine_leaf

    fabric = spine_leaf(spines=1, leaves=2, hosts_per_leaf=2)
    flows = pd.DataFrame(
        [
            ["h0", "h2", 1_000_000, 0, 800_000_000],
            ["h0", "h1", 500_000, 200_000_000, 1_000_000_000],
        ],
        columns=["src", "dst", "bytes", "t_start_ns", "t_end_ns"],
    )
    # 28 Mbit/s of switch-hop work in all: more than one 20 Mbit/s machine carries...
    assert not fd.offered_load_check(flows, fabric, capacity_mbps=20)["ok"]
    # ...but split 3:1 over two servers' switches, 21 and 7 Mbit/s: the first is over
    split = _links({"root@a": ("leaf0", 3_000_000), "root@b": ("leaf1", 1_000_000)})
    c = fd.servers_offered_load_check(flows, fabric, 20, split)
    assert not c["ok"] and c["value"] == pytest.approx(21.0)
    assert "busiest server root@a" in c["detail"] and "over on root@a" in c["detail"]
    assert c["by_server"]["root@b"] == {"ok": True, "value": pytest.approx(7.0)}
    even = _links({"root@a": ("leaf0", 2_000_000), "root@b": ("leaf1", 2_000_000)})
    assert fd.servers_offered_load_check(flows, fabric, 20, even)["ok"]  # 14 each: fits
    # one machine (no server column): the whole work against its capacity, as before
    one = even.drop(columns="server")
    assert fd.servers_offered_load_check(flows, fabric, 20, one) == fd.offered_load_check(
        flows, fabric, 20
    )

"""A cluster run is judged per server: every server's CPU must pass (one busy server
fails the run and is named), and every server's samplers are judged by name."""

from __future__ import annotations

import pandas as pd

from experiments.analysis import fidelity as fd
from experiments.measurement.server_samplers import ClusterSamplers


def _cpu(pct: float, server: str) -> pd.DataFrame:
    return pd.DataFrame({"t_ns": range(100), "cpu_pct": pct, "max_core_pct": pct,
                         "server": server})  # fmt: skip


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

"""The report's pictures: ports named by their neighbour, utilisation in % of each
port's configured rate, drops over time, and latency tails on a log axis."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from experiments.output import plots
from topologies.generators import make_fabric


def test_ports_are_named_by_their_neighbour_and_carry_their_configured_rate():
    fabric = make_fabric("spine_leaf", spines=2, leaves=2, hosts_per_leaf=2, uplink_gbps=400)
    names = plots.port_names(fabric)
    uplinks = {v for (node, _), v in names.items() if node == "leaf0" and "spine" in v}
    assert uplinks == {"leaf0→spine0", "leaf0→spine1"}
    link = next(lk for lk in fabric.links if {lk.a, lk.b} == {"leaf0", "spine1"})
    capacity = plots.port_capacity_mbps(fabric, 1e-4)
    assert capacity[("leaf0", link.port_of("leaf0"))] == 400 * 1e-4 * 1e3  # 40 Mbit/s
    assert plots.port_capacity_mbps(fabric, None) == {}


def _links(rate_mbps: float, seconds: int = 4) -> pd.DataFrame:
    t = np.arange(seconds + 1, dtype=np.int64) * 1_000_000_000
    tx = (np.arange(seconds + 1) * rate_mbps * 1e6 / 8).astype(np.int64)
    return pd.DataFrame({"t_ns": t, "node": "leaf0", "port": 3, "tx_bytes": tx, "rx_bytes": 0})


def test_the_heatmap_colours_utilisation_in_percent_of_the_ports_rate(tmp_path, monkeypatch):
    seen = {}
    real = Figure.colorbar

    def spy(self, mappable, *args, **kwargs):
        seen["label"], seen["clim"] = kwargs.get("label"), mappable.get_clim()
        seen["data"] = np.asarray(mappable.get_array())
        return real(self, mappable, *args, **kwargs)

    monkeypatch.setattr(Figure, "colorbar", spy)
    cap = {("leaf0", 3): 40.0}
    names = {("leaf0", 3): "leaf0→spine1"}
    assert plots.link_heatmap(_links(30.0), tmp_path / "l.png", names=names, capacity_mbps=cap)
    assert "% of the port's rate" in seen["label"] and seen["clim"] == (0.0, 100.0)
    assert np.nanmax(seen["data"]) == np.float64(75.0)  # 30 of 40 Mbit/s
    assert plots.link_heatmap(_links(30.0), tmp_path / "r.png")  # no rates: Mbit/s
    assert "Mbit/s" in seen["label"]


def _queues(drops: list[int]) -> pd.DataFrame:
    n = len(drops)
    return pd.DataFrame(
        {
            "t_ns": np.arange(n, dtype=np.int64) * 50_000_000,
            "node": "leaf1",
            "port": 5,
            "backlog_pkts": 10,
            "drops": drops,
        }
    )


def test_drops_over_time_appear_only_when_a_queue_dropped(tmp_path):
    assert plots.drops_timeseries(_queues([0, 0, 0, 0]), tmp_path / "none.png") is None
    path = plots.drops_timeseries(
        _queues([0, 0, 5, 9, 9, 12]), tmp_path / "d.png", names={("leaf1", 5): "leaf1→spine0"}
    )
    assert path is not None and path.stat().st_size > 0


def test_latency_plots_add_a_log_tail_under_each_cdf(tmp_path, monkeypatch):
    scales = []
    real = Figure.savefig

    def spy(self, *args, **kwargs):
        scales.extend(ax.get_yscale() for ax in self.axes)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    requests = pd.DataFrame({"ttft_ms": np.linspace(100, 300, 50), "tpot_ms": 10.0})
    tokens = pd.DataFrame({"itl_ms": np.r_[np.full(990, 10.0), np.full(10, 200.0)]})
    assert plots.serving_cdf(requests, tokens, tmp_path / "s.png")
    assert scales == ["linear", "linear", "log", "log"]


def test_each_requests_ttft_splits_into_parts_that_add_up_to_it(tmp_path):
    from experiments.analysis.metrics.ttft_parts import PARTS, ttft_parts

    ms = 1_000_000
    requests = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "arrival_ns": [0, 10 * ms, 20 * ms],
            "first_token_ns": [100 * ms, 150 * ms, 90 * ms],
            "served": [True, True, False],
        }
    )
    flows = pd.DataFrame(  # request 1: two layers, the last sent at 110 ms, done at 130
        {
            "kind": ["kv_transfer"] * 3 + ["collective"],
            "request_id": [0, 1, 1, None],
            "t_sched_ns": [60 * ms, 70 * ms, 110 * ms, 5 * ms],
            "t_end_ns": [80 * ms, 100 * ms, 130 * ms, 6 * ms],
        }
    )
    parts = ttft_parts(requests, flows, "layer_pipelined").set_index("request_id")
    assert parts.loc[0, list(PARTS)].tolist() == [60.0, 20.0, 20.0]
    assert parts.loc[1, list(PARTS)].tolist() == [100.0, 20.0, 20.0]  # prefill ended at 110
    assert 2 not in parts.index  # not served
    assert (parts[list(PARTS)].sum(axis=1) == parts["ttft_ms"]).all()
    monolithic = ttft_parts(requests, flows, "monolithic").set_index("request_id")
    assert monolithic.loc[1, "wait_and_prefill_ms"] == 60.0  # its first (only) send
    assert ttft_parts(requests, flows[flows["kind"] != "kv_transfer"]) is None  # colocated
    assert plots.ttft_breakdown(parts.reset_index(), tmp_path / "b.png") is not None

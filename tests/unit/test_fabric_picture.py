"""The picture of the fabric: one line per link coloured by its load, the hottest queues
marked with their peak, for tree and direct fabrics alike, from hand-made tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib import colormaps
from matplotlib.colors import to_rgba

from experiments.output import fabric_picture as fp
from experiments.output import plots
from topologies.generators import make_fabric

PNG = b"\x89PNG\r\n\x1a\n"


def _fabric():
    return make_fabric("spine_leaf", spines=2, leaves=2, hosts_per_leaf=2, uplink_gbps=400)


def _port(fabric, a: str, b: str) -> tuple[str, int]:
    return (a, fabric.link_between(a, b).port_of(a))


def _links(rates_mbps: dict[tuple[str, int], float], seconds: int = 4) -> pd.DataFrame:
    """Cumulative tx counters of ports sending at a steady rate, sampled once a second."""
    t = np.arange(seconds + 1, dtype=np.int64) * 1_000_000_000
    frames = [
        pd.DataFrame(
            {
                "t_ns": t,
                "node": node,
                "port": port,
                "tx_bytes": (np.arange(seconds + 1) * mbps * 1e6 / 8).astype(np.int64),
                "rx_bytes": 0,
            }
        )
        for (node, port), mbps in rates_mbps.items()
    ]
    return pd.concat(frames, ignore_index=True)


def _queues(backlogs: dict[tuple[str, int], list[int]]) -> pd.DataFrame:
    rows = [
        {
            "t_ns": i * 100_000_000,
            "node": node,
            "port": port,
            "backlog_pkts": b,
            "backlog_bytes": b * 1514,
            "drops": 0,
            "sent_bytes": i * 15_140,
        }
        for (node, port), series in backlogs.items()
        for i, b in enumerate(series)
    ]
    return pd.DataFrame(rows)


def _link_lines(fig, fabric):
    ax = fig.axes[0]
    gids = {f"{lk.a}-{lk.b}" for lk in fabric.links}
    return {line.get_gid(): line for line in ax.lines if line.get_gid() in gids}


def _cmap_position(colour) -> float:
    """Where on the colormap a colour sits (0: no load, 1: 100 %)."""
    table = colormaps[fp.CMAP](np.linspace(0, 1, 256))
    return float(np.argmin(np.abs(table - np.asarray(to_rgba(colour))).sum(axis=1)) / 255)


def test_each_link_is_one_line_coloured_by_its_load():
    fabric = _fabric()
    capacity = plots.port_capacity_mbps(fabric, 1e-4)  # 400 Gbit/s -> 40 Mbit/s
    hot, warm, cool = (
        _port(fabric, "leaf0", "spine0"),
        _port(fabric, "spine1", "leaf1"),
        _port(fabric, "leaf1", "h2"),
    )
    rates = {hot: 38.0, warm: 16.0, cool: capacity[cool] * 0.05}
    load = fp.port_utilisation(_links(rates), capacity)
    assert load[hot] == pytest.approx(95.0) and load[warm] == pytest.approx(40.0)

    fig = fp.fabric_figure(fabric, load)
    lines = _link_lines(fig, fabric)
    assert len(lines) == len(fabric.links) == 8  # 4 uplinks + 4 host links
    position = {
        name: _cmap_position(lines[name].get_color())
        for name in ("leaf0-spine0", "leaf1-spine1", "h2-leaf1")
    }
    assert position["leaf0-spine0"] > position["leaf1-spine1"] > position["h2-leaf1"]
    assert position["leaf0-spine0"] == pytest.approx(0.95, abs=0.01)
    # a link whose ports were never sampled is grey, not "idle"
    assert to_rgba(lines["leaf0-spine1"].get_color()) == to_rgba(fp.UNSAMPLED)
    labels = [ax.get_ylabel() for ax in fig.axes[1:]]
    assert labels == [fp.COLORBAR_LABEL] and "% of capacity" in fp.COLORBAR_LABEL


def test_a_link_reads_as_loaded_as_its_busier_direction():
    fabric = _fabric()
    link = fabric.link_between("leaf0", "spine0")
    load = {_port(fabric, "leaf0", "spine0"): 10.0, _port(fabric, "spine0", "leaf0"): 70.0}
    assert fp.link_load(link, load) == 70.0
    assert fp.link_load(fabric.link_between("leaf1", "spine1"), load) is None


def test_the_hottest_queues_are_marked_with_their_peak():
    fabric = _fabric()
    into_h0 = _port(fabric, "leaf0", "h0")
    uplink = _port(fabric, "leaf1", "spine0")
    queues = _queues(
        {
            into_h0: [0, 30, 64, 50, 20],
            uplink: [0, 5, 9, 3, 0],
            _port(fabric, "spine0", "leaf0"): [0, 1, 0, 0, 0],
            _port(fabric, "spine1", "leaf0"): [0, 1, 2, 0, 0],
            _port(fabric, "leaf0", "h1"): [0, 0, 0, 0, 0],  # never held a packet
        }
    )
    hot = fp.hot_queues(queues)
    assert [(q.node, q.port, q.peak_pkts) for q in hot][:2] == [(*into_h0, 64.0), (*uplink, 9.0)]
    assert len(hot) == 3 and all(q.peak_pkts > 0 for q in hot)

    fig = fp.fabric_figure(fabric, {}, hot, plots.port_names(fabric))
    text = "\n".join(t.get_text() for t in fig.axes[0].texts)
    assert "1  leaf0→h0: peak 64 pkts" in text
    assert "2  leaf1→spine0: peak 9 pkts" in text
    assert "leaf0→h1" not in text


@pytest.mark.parametrize("kind", ["fat_tree", "rail_optimized", "dragonfly", "hyperx"])
def test_every_fabric_kind_is_drawn_with_every_link(kind, tmp_path):
    fabric = make_fabric(kind)
    positions = fp.layout(fabric)
    assert set(positions) == {n.name for n in fabric.nodes}
    assert len(set(positions.values())) == len(fabric.nodes)  # no two nodes on one spot
    switch = fabric.switches[0]
    port = fabric.links_of(switch.name)[0].port_of(switch.name)
    queues = _queues({(switch.name, port): [0, 4, 7, 1]})
    path = fp.write_fabric_picture(fabric, None, queues, {}, tmp_path / "f.png")
    assert path.read_bytes()[:8] == PNG
    assert len(_link_lines(fp.fabric_figure(fabric, {}), fabric)) == len(fabric.links)


def test_a_tree_is_drawn_hosts_below_leaves_below_spines():
    fabric = make_fabric("rail_optimized")
    y = {name: xy[1] for name, xy in fp.layout(fabric).items()}
    assert y["spine0"] > y["rail0"] > y["gpu0_0"] > y["nvl0"]


def test_ports_not_numbered_as_the_fabric_numbers_them_are_left_out():
    queues = _queues({("leaf0", "eth1"): [0, 3, 1]})  # a table from another tool
    assert fp.hot_queues(queues) == []
    links = _links({("leaf0", 1): 20.0}).assign(port="eth1")
    assert fp.port_utilisation(links, {("leaf0", 1): 40.0}) == {}


def test_no_picture_without_a_fabric_or_any_sampled_table(tmp_path):
    assert fp.write_fabric_picture(None, None, None, {}, tmp_path / "f.png") is None
    assert fp.write_fabric_picture(_fabric(), None, None, {}, tmp_path / "f.png") is None
    assert not (tmp_path / "f.png").exists()

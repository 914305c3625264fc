"""What each switch must forward when every GPU sends at its line rate (pure).

The one-machine figure (``topologies.shaping.switching_demand_mbps``) is the GPUs'
host-link capacity times the mean number of switches a path crosses. Spread over the
switches, it is the traffic each one forwards when every GPU sends its host-link rate,
split evenly over every other GPU, and every flow is split evenly over its fewest-hop
paths (hosts are endpoints, never transit). The per-switch figures add up to the
one-machine figure, so a machine's share of them is its share of that demand.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx

from .fabric import Fabric


def switch_work_gbps(fabric: Fabric) -> dict[str, float]:
    """Real-equivalent Gbit/s each switch forwards under the all-to-all at line rate."""
    switches = {n.name for n in fabric.switches}
    work = dict.fromkeys(sorted(switches), 0.0)
    gpus = [g.name for g in fabric.gpus]
    if len(gpus) < 2:
        return work
    # A host is split into a source that only leaves and a sink that only enters,
    # so no path runs through one.
    directed = nx.DiGraph()
    directed.add_nodes_from(switches)
    for link in fabric.links:
        if link.a in switches and link.b in switches:
            directed.add_edge(link.a, link.b)
            directed.add_edge(link.b, link.a)
            continue
        host, switch = (link.a, link.b) if link.b in switches else (link.b, link.a)
        directed.add_edge(("from", host), switch)
        directed.add_edge(switch, ("to", host))
    by_rate: dict[float, list[str]] = defaultdict(list)
    for gpu in gpus:
        by_rate[sum(lk.real_gbps for lk in fabric.links_of(gpu) if lk.kind == "host")].append(gpu)
    sinks = [("to", g) for g in gpus]
    for rate, senders in sorted(by_rate.items()):
        through = nx.betweenness_centrality_subset(
            directed, [("from", g) for g in senders], sinks, normalized=False
        )
        per_pair = rate / (len(gpus) - 1)
        for name in switches:
            work[name] += through[name] * per_pair
        for gpu in senders:  # the betweenness counts a GPU's paths to itself too
            attached = [lk.other(gpu) for lk in fabric.links_of(gpu)]
            for switch in attached:
                work[switch] -= per_pair / len(attached)
    return work

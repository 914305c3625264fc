"""The traffic a plan sends across each machine boundary of a placement (pure).

A message's path is the controller's: the policy's rules walked by
``controller.walk.trace``; where a select group gives several paths, the message's
bytes are split evenly over them (what hashing gives on average). Each time a path
crosses a cut link it counts once, in that direction, so a message that leaves a
machine and comes back counts twice. Per ordered machine pair and per cut link
direction: ``bytes`` (real-equivalent, as the plan gives them), ``messages`` (those
that cross at least once there) and ``peak_mbps``, the emulated Mbit/s at the
bandwidth scale over the busiest 100 ms window (``demand.WINDOW_NS``), each message
spread over its duration at its path's bottleneck rate, as ``demand`` spreads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from controller.policy import compute
from controller.rules import Group, Rule, RuleSet
from controller.walk import trace
from experiments.orchestration.demand import demand_of, message_table, plan_messages
from experiments.orchestration.plan import TrafficPlan, controller_params
from experiments.spec.config import RunConfig
from topologies import Fabric
from topologies.placement import Placement

PAIR_COLUMNS = ["from_machine", "to_machine", "bytes", "messages", "peak_mbps"]
LINK_COLUMNS = [
    "from_node",
    "to_node",
    "from_machine",
    "to_machine",
    "real_gbps",
    "bytes",
    "messages",
    "peak_mbps",
]


@dataclass(frozen=True)
class CrossTraffic:
    """What crosses each boundary: ``pairs`` (PAIR_COLUMNS) and ``links`` (LINK_COLUMNS),
    largest first; ``total_bytes``: every byte the plan sends, crossing or not."""

    pairs: pd.DataFrame
    links: pd.DataFrame
    total_bytes: float

    @property
    def crossing_bytes(self) -> float:
        return float(self.pairs["bytes"].sum()) if len(self.pairs) else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_bytes": self.total_bytes,
            "crossing_bytes": self.crossing_bytes,
            "pairs": self.pairs.to_dict("records"),
            "links": self.links.to_dict("records"),
        }


class _RulesBySwitch(RuleSet):
    """The same rules, looked up per switch once rather than at every trace."""

    def __init__(self, rules: RuleSet) -> None:
        super().__init__(rules.rules, rules.groups)
        self._by_switch: dict[str, tuple[list[Rule], list[Group]]] = {}

    def for_switch(self, switch: str) -> tuple[list[Rule], list[Group]]:
        if switch not in self._by_switch:
            self._by_switch[switch] = super().for_switch(switch)
        return self._by_switch[switch]


def cross_traffic(
    placement: Placement,
    fabric: Fabric,
    messages: pd.DataFrame,
    scale: float,
    policy: str = "shortest_path",
    policy_params: Mapping[str, Any] | None = None,
) -> CrossTraffic:
    """What ``messages`` (``src, dst, bytes, t_start_ns``; optionally ``scaled, proto,
    dscp, t_end_ns``: a schedule, or ``demand.plan_messages`` of a plan) send across
    ``placement``'s machine boundaries when ``policy`` routes them."""
    table = message_table(_with_defaults(messages), fabric, scale)
    table["message"] = range(len(table))
    total = float(table["bytes"].sum()) if len(table) else 0.0
    rules = _RulesBySwitch(compute(fabric, policy, params=dict(policy_params or {})))
    where = placement.machine_of
    rows = []
    for src, dst in table[["src", "dst"]].drop_duplicates().itertuples(index=False):
        paths = trace(fabric, rules, src, dst)
        for path in paths:
            for u, v in zip(path, path[1:], strict=False):
                if where[u] != where[v]:
                    rows.append((src, dst, u, v, 1.0 / len(paths)))
    hops = pd.DataFrame(rows, columns=["src", "dst", "from_node", "to_node", "fraction"])
    crossings = table.merge(hops, on=["src", "dst"])
    crossings["from_machine"] = crossings["from_node"].map(where)
    crossings["to_machine"] = crossings["to_node"].map(where)
    crossings["bytes"] *= crossings["fraction"]
    crossings["emulated"] = crossings["emulated"] * crossings["fraction"]
    crossings["hops"] = 1  # each crossing is one link's worth of the message
    pairs = _per(crossings, ["from_machine", "to_machine"], PAIR_COLUMNS)
    links = _per(crossings, ["from_node", "to_node", "from_machine", "to_machine"], LINK_COLUMNS)
    if len(links):
        links["real_gbps"] = [
            fabric.link_between(a, b).real_gbps
            for a, b in zip(links["from_node"], links["to_node"], strict=True)
        ]
    return CrossTraffic(pairs, links[LINK_COLUMNS], total)


def plan_cross_traffic(
    placement: Placement, fabric: Fabric, plan: TrafficPlan, config: RunConfig
) -> CrossTraffic:
    """What a run's traffic plan sends across ``placement``'s boundaries, routed by the
    run's own policy (the plan's serving driver is left unused: a copy of it runs)."""
    scale = config.scale.bandwidth
    messages = plan_messages(plan.schedule, plan.spare_driver(), fabric, scale)
    ctl = config.controller
    return cross_traffic(
        placement, fabric, messages, scale, ctl.policy, controller_params(ctl, config.seed)
    )


def _with_defaults(messages: pd.DataFrame) -> pd.DataFrame:
    out = messages.copy()
    if "t_start_ns" not in out:
        out["t_start_ns"] = out["t_sched_ns"]
    for name, value in (("scaled", True), ("proto", "tcp"), ("dscp", 0)):
        if name not in out:
            out[name] = value
    return out


def _per(crossings: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    out = []
    for key, group in crossings.groupby(keys, sort=True):
        peak = demand_of(group.reset_index(drop=True)).peak_switch_hop_mbps()
        out.append((*key, float(group["bytes"].sum()), group["message"].nunique(), peak))
    frame = pd.DataFrame(out, columns=[*keys, "bytes", "messages", "peak_mbps"])
    for name in columns:
        if name not in frame:
            frame[name] = 0.0
    return frame.sort_values(
        ["bytes", *keys], ascending=[False, *[True] * len(keys)], ignore_index=True
    )

"""The draft's fabric health indicators (Table 6) and what this emulator has of each."""

from __future__ import annotations

from experiments.bmwg.model import HealthIndicator

HEALTH = (
    HealthIndicator(
        "Switch control-plane CPU",
        "< 30%",
        "substitute",
        "the machine's CPU (cpu table: cpu_pct, max_core_pct), which runs every switch, "
        "the controller and the hosts; no per-switch control plane",
    ),
    HealthIndicator(
        "Switch memory (TCAM, buffer, control plane)",
        "< 70%",
        "not_feasible",
        "OVS has no TCAM and its memory is not sampled; buffer use is Buffer_utilization",
    ),
    HealthIndicator(
        "FEC (post-FEC BER)", "< 1e-12", "not_feasible", "veth links have no PHY or FEC"
    ),
    HealthIndicator("CRC errors", "0", "not_feasible", "veth links have no frame check errors"),
    HealthIndicator(
        "BGP/OSPF adjacency flaps",
        "0",
        "substitute",
        "link and controller events of the run (events.json faults, controller up/down)",
    ),
    HealthIndicator(
        "NIC RDMA QP state",
        "100% active",
        "substitute",
        "TCP flows that failed (flows.ok false, flows.error) stand in for QPs in error",
    ),
    HealthIndicator(
        "GPU–NIC PCIe Gen5 x16 bandwidth",
        "> 90% of theoretical",
        "not_feasible",
        "no GPU or PCIe: intra-node segments are modelled or zero",
    ),
)

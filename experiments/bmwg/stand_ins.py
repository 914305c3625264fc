"""What stands in here for what the draft's lab has, said once for every procedure.

The emulator's links are HTB-shaped drop-tail queues in Open vSwitch and its
transport is kernel TCP: no RDMA verbs, no RED/ECN marking, no PFC, no netem delay.
"""

from __future__ import annotations

from experiments.bmwg.model import Substitute

QP = Substitute(
    "RDMA queue pairs (QPs) of one NIC pair",
    "persistent TCP connections between the two hosts, one per stream (a workload's lane)",
)
COMPLETION = Substitute(
    "RDMA completion (PUT-with-signal, remote CQ poll)",
    "an application acknowledgement: the message's last byte read by the receiver",
)
PUT = Substitute(
    "one-sided RDMA PUT of a KV block",
    "one application-framed TCP message of the same real-equivalent size",
)
ECN = Substitute(
    "ECN CE marks (marking rate, onset, queue at onset)",
    "drop-tail drops and TCP retransmissions, and the sampled queue backlog",
)
ECN_THRESHOLD = Substitute(
    "the ECN marking threshold (100 KB–5 MB)",
    "the drop-tail queue limit (fabric.buffer_pkts, packets)",
)
PFC = Substitute(
    "PFC PAUSE frames and pause duration",
    "drop-tail drops and TCP retransmissions (the fabric is lossy)",
)
PFC_THRESHOLD = Substitute(
    "the PFC XOFF threshold (10 KB–1 MB)",
    "the drop-tail queue limit (fabric.buffer_pkts, packets)",
)
HOL = Substitute(
    "head-of-line blocking PAUSE imposes on other classes",
    "one-way delay of probes of another tenant through the same queues",
)
CC = Substitute(
    "DCQCN / UET congestion control",
    "kernel TCP congestion control (agents.cc: cubic, reno or bbr), loss-based",
)
NIC = Substitute(
    "NIC-to-NIC timing at DUT-N / DUT-PD",
    "application timestamps on the emulated hosts (kernel stack included)",
)
EP_RDMA = Substitute(
    "GPU-initiated RDMA all-to-all (DeepEP-style)",
    "an all-to-all of TCP messages over a full mesh of the EP group's hosts",
)
ROUTING_PROTOCOL = Substitute(
    "BGP/OSPF convergence and hardware fast reroute",
    "the OpenFlow controller's reroute after it hears of the failure (faults.detect_ms)",
)
SOAK = Substitute(
    "24 h of sustained load sampled every 15 min",
    "a time-compressed soak (quick 2 min, standard 30 min; draft 24 h) cut into windows",
)
QP_ERRORS = Substitute(
    "NIC QP errors and RDMA retransmissions",
    "failed flows (flows.ok, flows.error) and drops",
)

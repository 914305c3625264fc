"""TCP's own account of a run, per host: segments sent, segments retransmitted,
retransmission timeouts, and what the host's shaped egress queue dropped.

Every loss the emulation models happens at a shaped pfifo (a switch egress or
a host's own); TCP retransmits what was lost. Retransmissions far beyond those
drops mean packets were lost or stalled somewhere the emulation does not model
(OVS or a veth falling behind): the fidelity check ``unmodelled_loss``.

The counters are read from ``/proc/<pid>/net/{snmp,netstat}`` of a process in
each host's namespace (no command per host) and from one ``tc -s -j qdisc``
per host; ``parse_*`` are pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SNMP = {"Tcp": ("OutSegs", "RetransSegs")}
RECEIVER_DROPS = ("TCPBacklogDrop", "TCPOFODrop", "TCPZeroWindowDrop", "TCPRcvQDrop",
                  "RcvPruned", "OfoPruned")  # fmt: skip
NETSTAT = {"TcpExt": ("TCPTimeouts", "TCPDSACKRecvSegs", *RECEIVER_DROPS)}
FIELDS = ("out_segs", "retrans_segs", "spurious_segs", "timeouts", "receiver_drops",
          "egress_drops")  # fmt: skip


def parse_proc_table(text: str, wanted: Mapping[str, tuple[str, ...]]) -> dict[str, int]:
    """``/proc/net/snmp``-style text (a header line then a value line per
    protocol) -> {field: value} for the ``wanted`` {protocol: fields}."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for header, values in zip(lines[::2], lines[1::2], strict=False):
        proto, _, names = header.partition(":")
        if proto not in wanted:
            continue
        row = dict(zip(names.split(), values.partition(":")[2].split(), strict=False))
        for name in wanted[proto]:
            if name in row:
                out[name] = int(row[name])
    return out


def parse_qdisc_drops(tc_json: str) -> int:
    """Drops of every pfifo in ``tc -s -j qdisc show`` output."""
    qdiscs = json.loads(tc_json or "[]")
    return sum(int(q.get("drops", 0)) for q in qdiscs if q.get("kind") == "pfifo")


def host_counters(net: Any, hosts: list[str]) -> dict[str, dict[str, int]]:
    """{host: {out_segs, retrans_segs, timeouts, egress_drops}} now."""
    out = {}
    for name in hosts:
        node = net.mn(name)
        proc = Path(f"/proc/{node.pid}/net")
        snmp = parse_proc_table((proc / "snmp").read_text(), SNMP)
        ext = parse_proc_table((proc / "netstat").read_text(), NETSTAT)
        tc, _, code = node.pexec("tc", "-s", "-j", "qdisc", "show")
        out[name] = {
            "out_segs": snmp.get("OutSegs", 0),
            "retrans_segs": snmp.get("RetransSegs", 0),
            # segments the receiver reported (D-SACK) as received twice: not lost
            "spurious_segs": ext.get("TCPDSACKRecvSegs", 0),
            "timeouts": ext.get("TCPTimeouts", 0),
            # segments the receiving stack threw away (full socket buffer, slow reader)
            "receiver_drops": sum(ext.get(k, 0) for k in RECEIVER_DROPS),
            "egress_drops": parse_qdisc_drops(tc) if code == 0 else 0,
        }
    return out


def delta(
    before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Per host, what the counters grew by between two readings."""
    return {h: {k: int(after[h][k]) - int(before[h].get(k, 0)) for k in FIELDS}
            for h in after if h in before}  # fmt: skip


def totals(per_host: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    return {k: sum(int(c.get(k, 0)) for c in per_host.values()) for k in FIELDS}

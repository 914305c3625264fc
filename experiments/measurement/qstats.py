"""Egress queue counters of many interfaces from one netlink qdisc dump.

Reads the bounded pfifo under each shaped egress (handle ``10:``), which is
where packets wait and overflow: backlog, drops and dequeued bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroute2 import IPRoute

PFIFO_HANDLE = 0x00100000  # tc handle "10:" (hex major 0x10)


@dataclass(frozen=True)
class QueueStats:
    backlog_pkts: int
    backlog_bytes: int
    drops: int
    sent_bytes: int
    sent_pkts: int


class QdiscReader:
    """Reads the egress queues of ``ifnames`` (in this network namespace)."""

    def __init__(self, ifnames: list[str]) -> None:
        self.ipr = IPRoute()
        self.by_index: dict[int, str] = {}
        for name in ifnames:
            found = self.ipr.link_lookup(ifname=name)
            if not found:
                self.ipr.close()
                raise LookupError(f"no interface named {name}")
            self.by_index[found[0]] = name

    def read(self) -> dict[str, QueueStats]:
        out: dict[str, QueueStats] = {}
        for q in self.ipr.get_qdiscs():
            name = self.by_index.get(q["index"])
            if name is None or q["handle"] != PFIFO_HANDLE:
                continue
            s = q.get_attr("TCA_STATS")
            out[name] = QueueStats(s["qlen"], s["backlog"], s["drop"], s["bytes"], s["packets"])
        return out

    def close(self) -> None:
        self.ipr.close()

    def __enter__(self) -> QdiscReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""TCP's own account of a run, per host: segments sent, segments retransmitted,
retransmission timeouts, and what the host's shaped egress queue dropped.

Every loss the emulation models happens at a shaped pfifo (a switch egress or
a host's own); TCP retransmits what was lost. Retransmissions far beyond those
drops mean packets were lost or stalled somewhere the emulation does not model
(OVS or a veth falling behind): the fidelity check ``unmodelled_loss``.

The counters are read from ``/proc/<pid>/net/{snmp,netstat}`` of a process in
each host's namespace (no command per host) and from one ``tc -s -j qdisc``
per host; ``parse_*`` are pure. ``ledger`` keeps, for events.json, every host counter
that moved and what the switch side counted (the switch ports' kernel drops, their
queues' drops, OVS's coverage counters): where to look when a loss is unexplained.
That is how the loss in OVS's own transmit buffer was found (``topologies.ovs_tx``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SNMP = {"Tcp": ("OutSegs", "RetransSegs")}
RECEIVER_DROPS = (
    "TCPBacklogDrop",
    "TCPOFODrop",
    "TCPZeroWindowDrop",
    "TCPRcvQDrop",
    "RcvPruned",
    "OfoPruned",
)
NETSTAT = {"TcpExt": ("TCPTimeouts", "TCPDSACKRecvSegs", *RECEIVER_DROPS)}
FIELDS = ("out_segs", "retrans_segs", "spurious_segs", "timeouts", "receiver_drops", "egress_drops")


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


def parse_all(text: str) -> dict[str, int]:
    """Every counter of a ``/proc/net/snmp``-style table as {"Proto.Name": value}."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for header, values in zip(lines[::2], lines[1::2], strict=False):
        proto, _, names = header.partition(":")
        for name, value in zip(names.split(), values.partition(":")[2].split(), strict=False):
            with contextlib.suppress(ValueError):
                out[f"{proto}.{name}"] = int(value)
    return out


def parse_link_drops(ip_json: str, names: set[str]) -> dict[str, int]:
    """Summed drop and error counters of the ``names`` interfaces in ``ip -s -j link``."""
    out: dict[str, int] = {}
    for link in json.loads(ip_json or "[]"):
        if link.get("ifname") not in names:
            continue
        for way in ("rx", "tx"):
            for k, v in (link.get("stats64") or {}).get(way, {}).items():
                if k not in ("bytes", "packets", "multicast") and isinstance(v, int):
                    out[f"{way}_{k}"] = out.get(f"{way}_{k}", 0) + v
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
        if net.place_of(name):  # on another server: ask there
            text, _, code = net.host_exec(
                name, ["sh", "-c", "cat /proc/net/snmp; echo ===; cat /proc/net/netstat"]
            )
            if code != 0:  # its server failed: no reading (``delta`` leaves it out)
                continue
            snmp_text, _, ext_text = text.partition("===\n")
        else:
            proc = Path(f"/proc/{node.pid}/net")
            snmp_text, ext_text = (proc / "snmp").read_text(), (proc / "netstat").read_text()
        snmp = parse_proc_table(snmp_text, SNMP)
        ext = parse_proc_table(ext_text, NETSTAT)
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
            "all": parse_all(snmp_text)
            | parse_all(ext_text)
            | (parse_qdisc_counters(tc) if code == 0 else {}),
        }
    return out


def parse_qdisc_counters(tc_json: str, names: set[str] | None = None) -> dict[str, int]:
    """Drops, requeues and overlimits by qdisc kind on the ``names`` devices (None: all)."""
    out: dict[str, int] = {}
    for q in json.loads(tc_json or "[]"):
        if names is not None and q.get("dev") not in names:
            continue
        for k in ("drops", "requeues", "overlimits"):
            key = f"qdisc_{q.get('kind')}_{k}"
            out[key] = out.get(key, 0) + int(q.get(k, 0))
    return out


def _run_here(args: list[str]) -> tuple[str, str, int]:
    res = subprocess.run(args, capture_output=True, text=True)
    return res.stdout, res.stderr, res.returncode


def switch_counters(intfs: set[str], run: Any = _run_here) -> dict[str, int]:
    """The switch ports' kernel-side drops and errors (root namespace), summed.
    ``run(args) -> (out, err, code)`` runs a command where the switches are."""
    out: dict[str, int] = {}
    text, _, code = run(["ip", "-s", "-j", "link", "show"])
    if code == 0:
        out |= parse_link_drops(text, intfs)
    text, _, code = run(["tc", "-s", "-j", "qdisc", "show"])
    if code == 0:
        out |= parse_qdisc_counters(text, intfs)
    text, _, code = run(["ss", "-0", "-m", "-p"])
    if code == 0:
        out["ovs_socket_drops"] = parse_ss_drops(text, "ovs-vswitchd")
    text, _, code = run(["ovs-appctl", "coverage/show"])
    if code == 0:
        out |= parse_coverage(text)
    return out


def fabric_switch_counters(net: Any, intfs: set[str]) -> dict[str, int]:
    """``switch_counters`` on every server that runs switches of ``net``, summed."""
    places = (
        net.by_place(sw.name for sw in net.fabric.switches)
        if hasattr(net, "by_place")
        else {"": []}
    )
    total: dict[str, int] = {}
    for place in places:
        got = switch_counters(intfs, lambda args, p=place: net.run_at(p, args))
        for k, v in got.items():
            total[k] = total.get(k, 0) + v
    return total


def parse_ss_drops(text: str, process: str) -> int:
    """Packets ``process``'s packet sockets dropped (full receive buffer: ``d`` of
    ``ss -0 -m -p`` skmem): OVS falling behind its ports."""
    total = 0
    for line in text.replace("\n\t", " ").splitlines():
        if f'"{process}"' in line and "skmem:(" in line:
            mem = line.split("skmem:(", 1)[1].split(")", 1)[0]
            for part in mem.split(","):
                if part.startswith("d") and part[1:].isdigit():
                    total += int(part[1:])
    return total


def parse_coverage(text: str) -> dict[str, int]:
    """``ovs-appctl coverage/show`` -> {"ovs_<event>": total}: among them the userspace
    datapath's own account of packets it dropped (``datapath_drop_*``, ``drop_action_*``)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "total:":
            out[f"ovs_{parts[0]}"] = int(parts[-1])
    return out


def ledger(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """What grew between two readings of ``{"hosts": host_counters(), "switches":
    switch_counters()}``: every host counter that moved (summed over hosts), and the switch
    ports' drops. Written to events.json so a loss can be looked for after the run."""
    hosts: dict[str, int] = {}
    for h, c in after["hosts"].items():
        old = before["hosts"].get(h, {}).get("all", {})
        for k, v in c.get("all", {}).items():
            if v != old.get(k, 0):
                hosts[k] = hosts.get(k, 0) + v - old.get(k, 0)
    sw = {k: v - before["switches"].get(k, 0) for k, v in after["switches"].items()}
    return {
        "hosts": dict(sorted(hosts.items())),
        "switch_ports": {k: v for k, v in sw.items() if v},
    }


def delta(
    before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Per host, what the counters grew by between two readings."""
    return {
        h: {k: int(after[h][k]) - int(before[h].get(k, 0)) for k in FIELDS}
        for h in after
        if h in before
    }


# where the ledger sees packets die outside the shaped queues (each not modelled)
UNMODELLED_PLACES = {
    "ovs_socket_drops": "OVS's receive sockets (OVS fell behind)",
    "rx_dropped": "switch ports' kernel receive",
    "tx_dropped": "switch ports' kernel transmit",
}


def unmodelled_places(counters: Mapping[str, Any]) -> dict[str, int]:
    """From a ``ledger``: the switch-side drops no shaped queue counts, by place."""
    sw = counters.get("switch_ports") or {}
    return {k: int(sw[k]) for k in UNMODELLED_PLACES if sw.get(k)}


def totals(per_host: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    return {k: sum(int(c.get(k, 0)) for c in per_host.values()) for k in FIELDS}

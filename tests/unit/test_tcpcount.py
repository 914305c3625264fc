"""Reading TCP's counters and a host's qdisc drops (pure parts, no root)."""

from __future__ import annotations

import json

from experiments import tcpcount

SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs
Tcp: 1 200 700090 488
Udp: InDatagrams
Udp: 5
"""
NETSTAT = """TcpExt: SyncookiesSent TCPTimeouts TCPDSACKRecvSegs
TcpExt: 0 7 31
IpExt: InNoRoutes
IpExt: 0
"""


def test_proc_tables_give_the_wanted_fields_only():
    assert tcpcount.parse_proc_table(SNMP, tcpcount.SNMP) == {"OutSegs": 700090, "RetransSegs": 488}
    ext = tcpcount.parse_proc_table(NETSTAT, tcpcount.NETSTAT)
    assert ext == {"TCPTimeouts": 7, "TCPDSACKRecvSegs": 31}


def test_qdisc_drops_sum_the_pfifos_only():
    tc = json.dumps([{"kind": "htb", "drops": 99}, {"kind": "pfifo", "drops": 4},
                     {"kind": "pfifo", "drops": 3}])  # fmt: skip
    assert tcpcount.parse_qdisc_drops(tc) == 7
    assert tcpcount.parse_qdisc_drops("") == 0


def test_delta_and_totals_over_hosts():
    zero = dict.fromkeys(tcpcount.FIELDS, 0)
    before = {"h0": zero, "h1": zero | {"out_segs": 10}}
    after = {"h0": zero | {"out_segs": 5, "retrans_segs": 1}, "h1": zero | {"out_segs": 30}}
    d = tcpcount.delta(before, after)
    assert d["h1"]["out_segs"] == 20
    assert tcpcount.totals(d)["out_segs"] == 25 and tcpcount.totals(d)["retrans_segs"] == 1

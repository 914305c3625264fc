"""Reading TCP's counters and a host's qdisc drops (pure parts, no root)."""

from __future__ import annotations

import json

from experiments.measurement import tcpcount

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
    tc = json.dumps(
        [{"kind": "htb", "drops": 99}, {"kind": "pfifo", "drops": 4}, {"kind": "pfifo", "drops": 3}]
    )
    assert tcpcount.parse_qdisc_drops(tc) == 7
    assert tcpcount.parse_qdisc_drops("") == 0


def test_delta_and_totals_over_hosts():
    zero = dict.fromkeys(tcpcount.FIELDS, 0)
    before = {"h0": zero, "h1": zero | {"out_segs": 10}}
    after = {"h0": zero | {"out_segs": 5, "retrans_segs": 1}, "h1": zero | {"out_segs": 30}}
    d = tcpcount.delta(before, after)
    assert d["h1"]["out_segs"] == 20
    assert tcpcount.totals(d)["out_segs"] == 25 and tcpcount.totals(d)["retrans_segs"] == 1


def test_every_counter_is_kept_for_the_ledger():
    every = tcpcount.parse_all(SNMP) | tcpcount.parse_all(NETSTAT)
    assert every["Tcp.RetransSegs"] == 488 and every["TcpExt.TCPDSACKRecvSegs"] == 31
    assert every["Udp.InDatagrams"] == 5


def test_switch_port_drops_are_summed_over_the_fabric_ports_only():
    ip = json.dumps(
        [
            {
                "ifname": "s1-eth1",
                "stats64": {"rx": {"bytes": 9, "dropped": 2}, "tx": {"dropped": 1}},
            },
            {"ifname": "eth0", "stats64": {"rx": {"dropped": 50}}},
        ]
    )
    assert tcpcount.parse_link_drops(ip, {"s1-eth1"}) == {"rx_dropped": 2, "tx_dropped": 1}
    tc = json.dumps(
        [
            {"dev": "s1-eth1", "kind": "pfifo", "drops": 4, "requeues": 0, "overlimits": 0},
            {"dev": "eth0", "kind": "pfifo", "drops": 9},
        ]
    )
    assert tcpcount.parse_qdisc_counters(tc, {"s1-eth1"})["qdisc_pfifo_drops"] == 4
    assert tcpcount.parse_qdisc_counters(tc)["qdisc_pfifo_drops"] == 13


def test_ovs_coverage_totals_are_read():
    text = """Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=1:
drop_action_of_pipeline   0.0/sec     0.1/sec        0.0100/sec   total: 44
netdev_sent              20.0/sec    22.5/sec       29.7136/sec   total: 53853
"""
    assert tcpcount.parse_coverage(text) == {
        "ovs_drop_action_of_pipeline": 44,
        "ovs_netdev_sent": 53853,
    }


def test_the_ledger_keeps_what_moved():
    before = {
        "hosts": {"h0": {"all": {"Tcp.RetransSegs": 5, "Udp.InDatagrams": 1}}},
        "switches": {"qdisc_pfifo_drops": 3, "tx_dropped": 0},
    }
    after = {
        "hosts": {
            "h0": {"all": {"Tcp.RetransSegs": 9, "Udp.InDatagrams": 1}},
            "h1": {"all": {"Tcp.RetransSegs": 2}},
        },
        "switches": {"qdisc_pfifo_drops": 10, "tx_dropped": 0},
    }
    got = tcpcount.ledger(before, after)
    assert got == {"hosts": {"Tcp.RetransSegs": 6}, "switch_ports": {"qdisc_pfifo_drops": 7}}


def test_ovs_socket_drops_are_read_from_ss():
    text = (
        'p_raw 0 0 [0]:* * users:(("ovs-vswitchd",pid=7,fd=313)) '
        "skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)\n"
        'p_raw 0 0 [3]:s1-eth1 * users:(("ovs-vswitchd",pid=7,fd=40))\n\t'
        "skmem:(r0,rb4194304,t0,tb212992,f0,w0,o0,bl0,d12)\n"
        'p_raw 0 0 [3]:eth0 * users:(("tcpdump",pid=9,fd=3)) skmem:(r0,d99)\n'
    )
    assert tcpcount.parse_ss_drops(text, "ovs-vswitchd") == 12

"""Sizing Open vSwitch's transmit buffer (pure parts, no root)."""

from __future__ import annotations

from topologies.ovs_tx import needed_bytes, tx_socket_inodes

PACKET = """sk               RefCnt Type Proto  Iface R Rmem   User   Inode
00000000dbbd9ace 2      3    0000   0     0 0      0      51421932
0000000011111111 3      3    0003   17    1 0      0      51421999
0000000022222222 3      3    0000   23    1 0      0      51422000
"""


def test_the_transmit_socket_is_the_unbound_protocol_0_one():
    # bound receive sockets (an interface, or ETH_P_ALL) are not it
    assert tx_socket_inodes(PACKET) == {"51421932"}
    assert tx_socket_inodes(PACKET.splitlines()[0]) == set()


def test_the_buffer_holds_every_switch_queue_full_twice_over():
    assert needed_bytes([64, 64], truesize=4096) == 2 * 4096 * 128
    # far beyond the kernel's 208 KiB default for a modest fabric (192 ports x 64 packets)
    assert needed_bytes([64] * 192) > 100 * 212_992

"""Open vSwitch's transmit buffer, sized for the queues a fabric builds.

The userspace datapath sends every packet for every system (veth) port through one
AF_PACKET socket (netdev-linux's ``af_packet_sock``: unbound, protocol 0). A packet stays
charged to that socket's send buffer until its device has transmitted it, that is for
as long as it waits in a shaped egress queue. The kernel's default buffer
(``net.core.wmem_default``, 208 KiB: about 90 full-size packets) is far less than the
shaped queues of a fabric hold together, so once they fill, OVS's sends fail with
ENOBUFS and it drops the packet where no queue counts it. That was the loss the fidelity
check ``unmodelled_loss`` kept finding (186-343 retransmissions per ``noisy-neighbour``
run that no queue had dropped; ``ss -0 -m`` showed the socket at 210,048 of 212,992
bytes), and it coupled ports: one congested egress made packets for every other port
fail.

``TxBuffer`` raises that socket's buffer to what the fabric's queues can hold for the
life of a fabric and puts the old size back afterwards.

What remains: when a shaped queue drops a packet, the kernel answers OVS's
``sendmmsg`` with ENOBUFS and OVS (``netdev_linux_sock_batch_send``) abandons the rest
of that batch for the port, uncounted by any queue. That costs a fraction of the
queue's own drops (a test into a 256-packet queue: 157 lost beyond 4,838 drops with the
default receive buffers; 624 beyond 4,243 when OVS's receive buffers were raised to 4 MiB,
because OVS then forwards in fuller batches, so they are left as they are); in an
incast into a shallow queue it was 36 % beyond them (390 beyond 1,086 drops: 16
senders, a 21-frame queue). The check ``unmodelled_loss`` credits them to the queue
from the switch's bytes in less bytes out (``fidelity.batch_losses``): they arrive back
to back at a full queue, where a tail-drop switch drops them too. A head-drop queue
(``pfifo_head_drop`` answers NET_XMIT_CN, not an error) would avoid it at the price of
dropping the oldest packet instead of the newest. The socket belongs to
ovs-vswitchd; it is reached with ``pidfd_getfd(2)`` (a second descriptor of the same
socket, root only) and resized with ``SO_SNDBUFFORCE``. ``tx_socket_inodes`` and
``needed_bytes`` are pure.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("kvfabric.ovs")

# Send buffer one queued full-size frame holds: its skb's truesize (2,304 bytes for a
# 1,514-byte frame: a 2 KiB data buffer plus the sk_buff), rounded up with room to spare.
PACKET_TRUESIZE = 4096


def packet_truesize(frame_bytes: int) -> int:
    """Send buffer one queued frame of ``frame_bytes`` holds: its data buffer (a power
    of two with the skb's shared info) twice over, as ``PACKET_TRUESIZE`` is for 1,514."""
    return 2 * (1 << (frame_bytes + 320 - 1).bit_length())


SO_SNDBUFFORCE = 32
SYS_PIDFD_GETFD = 438  # x86_64 and the generic syscall table alike
PIDFILE = Path(os.environ.get("OVS_RUNDIR", "/var/run/openvswitch")) / "ovs-vswitchd.pid"


def tx_socket_inodes(proc_net_packet: str) -> set[str]:
    """Inodes of the unbound protocol-0 packet sockets in ``/proc/<pid>/net/packet``
    text: the socket the userspace datapath transmits through."""
    out = set()
    for line in proc_net_packet.splitlines()[1:]:
        f = line.split()
        if len(f) >= 9 and f[3] == "0000" and f[4] == "0":
            out.add(f[8])
    return out


def needed_bytes(queue_limits: Iterable[int], truesize: int = PACKET_TRUESIZE) -> int:
    """Send buffer for every shaped switch queue full at once (``queue_limits``: each
    switch egress queue's packet limit), twice over for the packets in flight."""
    return 2 * truesize * sum(queue_limits)


def _vswitchd_pid(pidfile: Path = PIDFILE) -> int:
    return int(pidfile.read_text().split()[0])


def _borrow(pid: int, inodes: set[str]) -> list[socket.socket]:
    """Our own descriptors of ``pid``'s sockets with those inodes."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    found = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    mine = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(fd), 0)
                    if mine < 0:
                        raise OSError(ctypes.get_errno(), "pidfd_getfd")
                    found.append(socket.socket(fileno=mine))
    finally:
        os.close(pidfd)
    return found


class TxBuffer:
    """The userspace datapath's transmit buffer, at least ``size`` bytes while held.

    ``raise_to()`` returns what it found and set (``{"before", "now"}`` in bytes) or
    None where there is no such socket (kernel datapath, OVS not sending yet, no
    permission: logged); ``restore()`` puts every resized socket back."""

    def __init__(self) -> None:
        self._old: list[tuple[socket.socket, int, int]] = []  # socket, option, old size

    def raise_to(self, size: int, pidfile: Path = PIDFILE) -> dict[str, int] | None:
        """``pidfile``: the ovs-vswitchd whose socket it is (a local cluster's server
        has its own)."""
        try:
            pid = _vswitchd_pid(pidfile)
            socks = _borrow(pid, tx_socket_inodes(Path(f"/proc/{pid}/net/packet").read_text()))
        except (OSError, ValueError) as exc:
            log.warning("cannot size Open vSwitch's transmit buffer: %s", exc)
            return None
        if not socks:
            return None
        info = {"before": 0, "now": 0}
        for s in socks:
            old = s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            info["before"] = max(info["before"], old)
            if old < size:
                s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, size // 2)  # the kernel doubles
                self._old.append((s, SO_SNDBUFFORCE, old))
            else:
                s.close()
            info["now"] = max(info["now"], old, size)
        return info

    def restore(self) -> None:
        while self._old:
            s, option, old = self._old.pop()
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, option, old // 2)
            s.close()

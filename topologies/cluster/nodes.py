"""Mininet Cluster Edition's node and link classes, subclassed where kvfabric needs
more than they give (``mininet.examples.cluster``, in Debian's mininet package):

- ``ClusterHost`` / ``ClusterSwitch``: ``RemoteHost`` / ``RemoteOVSSwitch`` reached
  with the server's own ssh options (``Server.ssh_args``: the local cluster's
  ``ssh -F`` file) over one multiplexed connection per server (``controlPath``);
- ``RemoteVXLANLink``: beside the edition's ``RemoteGRELink`` (this kernel has no
  GRE), a link whose two ends on different servers are the two ends of a
  point-to-point VXLAN tunnel over the servers' own network; inside one server it is
  the usual veth pair. Its MTU is the fabric's: the underlay must carry 50 bytes more
  (outer Ethernet is not counted: IPv4 20 + UDP 8 + VXLAN 8 + inner Ethernet 14).

Each link's VNI is the run's (``vni_base``) plus its number, so two runs on the same
servers never share one. The edition's ``RemoteSSHLink`` (tap over ``ssh -w``) stays
available as ``link: ssh``.
"""

from __future__ import annotations

import shlex
from typing import Any

from mininet.examples.cluster import RemoteGRELink, RemoteHost, RemoteLink, RemoteOVSSwitch
from mininet.link import Link
from mininet.util import quietRun

from ..shell_output import TolerantShell

VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50  # bytes the underlay carries beyond the inner IP packet


class _SshOptions:
    """Set ``sshbase`` from the server's own ssh command before the edition's
    ``RemoteMixin`` builds its ``sshcmd`` from it; and quote a remote command's
    arguments, which ssh would otherwise join with spaces for the remote shell to
    split again (``bash -c "a; b"`` arrived as ``bash -c a; b``)."""

    def __init__(self, name: str, ssh_base: list[str] | None = None, **kwargs: Any) -> None:
        if ssh_base is not None:
            self.sshbase = [*ssh_base, "-q", "-tt"]
        super().__init__(name, **kwargs)

    def _popen(self, cmd: Any, sudo: bool = True, tt: bool = True, **params: Any) -> Any:
        if getattr(self, "isRemote", False) and not isinstance(cmd, str):
            cmd = [shlex.quote(str(c)) for c in cmd]
        return super()._popen(cmd, sudo=sudo, tt=tt, **params)  # type: ignore[misc]


class ClusterHost(TolerantShell, _SshOptions, RemoteHost):
    pass


class ClusterSwitch(TolerantShell, _SshOptions, RemoteOVSSwitch):
    pass


class RemoteVXLANLink(RemoteGRELink):
    """A fabric link; across servers, a VXLAN tunnel (see the module's docstring)."""

    vni_base = 1 << 12  # set per run (``ClusterNetwork``)
    _count = 0
    mtu = 1500

    def makeIntfPair(
        self,
        intfname1: str,
        intfname2: str,
        addr1: str | None = None,
        addr2: str | None = None,
        node1: Any = None,
        node2: Any = None,
        deleteIntfs: bool = True,
    ) -> Any:  # # noqa: N802 (Mininet's name)
        node1 = self.node1 if node1 is None else node1
        node2 = self.node2 if node2 is None else node2
        if getattr(node1, "server", "localhost") == getattr(node2, "server", "localhost"):
            return Link.makeIntfPair(
                intfname1, intfname2, addr1, addr2, node1, node2, deleteIntfs=deleteIntfs
            )
        self.makeTunnel(node1, node2, intfname1, intfname2, addr1, addr2)
        self.tunnel = 1  # what RemoteGRELink.stop reads: delete both ends
        return None

    def makeTunnel(
        self,
        node1: Any,
        node2: Any,
        intfname1: str,
        intfname2: str,
        addr1: str | None = None,
        addr2: str | None = None,
    ) -> None:  # # noqa: N802
        if node2.server == "localhost":  # the local end first, as the edition does
            return self.makeTunnel(node2, node1, intfname2, intfname1, addr2, addr1)
        ip1, ip2 = node1.serverIP, node2.serverIP
        if node1.server == "localhost":  # the address this machine reaches node2's server from
            ip1 = quietRun(f"ip route get {ip2}").split(" src ")[1].split()[0]
        cls = type(self)
        cls._count += 1
        vni = cls.vni_base + cls._count
        for node, name, addr, local, remote in (
            (node1, intfname1, addr1, ip1, ip2),
            (node2, intfname2, addr2, ip2, ip1),
        ):
            node.rcmd(f"ip link delete {name}")
            out = node.rcmd(
                f"ip link add name {name} type vxlan id {vni} local {local} "
                f"remote {remote} dstport {VXLAN_PORT} nolearning"
            )
            if out.strip():
                raise RuntimeError(f"VXLAN link {name} on {node.server}: {out.strip()}")
            if addr:
                node.rcmd(f"ip link set {name} address {addr}")
            node.rcmd(f"ip link set dev {name} mtu {cls.mtu} up")
            if not RemoteLink.moveIntf(name, node):
                raise RuntimeError(f"moving {name} into {node} on {node.server} failed")
        return None

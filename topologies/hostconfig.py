"""Per-host addressing as data: static neighbour entries and NVLink routes.

Every GPU has one address (on its network port, ``eth0``). A peer in the same
server is reached over the NVLink port with a /32 route, so that traffic never
touches the network; every other peer over ``eth0``. ARP is static.
"""

from __future__ import annotations

from collections.abc import Callable

from .fabric import Fabric, port_mac


def network_port(fabric: Fabric, host: str) -> int:
    """The host's port towards the scale-out network (its first non-NVLink link)."""
    for link in fabric.links_of(host):
        if link.kind != "nvlink":
            return link.port_of(host)
    raise ValueError(f"host {host} has no network link")


def ip_commands(fabric: Fabric, host: str, ifname: Callable[[str, int], str]) -> list[list[str]]:
    """``ip`` argument lists (for ``ip -batch``) that give ``host`` a permanent
    neighbour entry for every other host and a /32 NVLink route to same-server peers."""
    my_net = network_port(fabric, host)
    nvl = fabric.nvlink_switch_of(host)
    my_nvl_port = fabric.port(host, nvl) if nvl else None
    cmds: list[list[str]] = []
    for peer in fabric.hosts:
        if peer.name == host:
            continue
        if my_nvl_port is not None and fabric.same_server(host, peer.name):
            dev = ifname(host, my_nvl_port)
            mac = port_mac(peer.number, fabric.port(peer.name, nvl))  # type: ignore[arg-type]
            cmds.append(["route", "replace", f"{peer.ip}/32", "dev", dev])
        else:
            dev = ifname(host, my_net)
            mac = port_mac(peer.number, network_port(fabric, peer.name))
        cmds.append(
            ["neigh", "replace", peer.ip or "", "lladdr", mac, "dev", dev, "nud", "permanent"]
        )
    return cmds

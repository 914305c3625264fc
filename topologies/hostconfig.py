"""Per-host addressing as data: static neighbour entries and NVLink routes.

Every GPU has one address (on its network port, ``eth0``). A peer in the same
server is reached over the NVLink port with a /32 route, so that traffic never
touches the network; every other peer over ``eth0``. ARP is static.

``host_routes`` lists every route a host has (the connected one its address makes and
the NVLink ones), so what changes routes later (``topologies.transport``) replaces
exactly those.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from .fabric import Fabric, port_mac

HOST_PREFIX_LEN = 8  # every host's address is <ip>/8: one connected route reaches all


def network_port(fabric: Fabric, host: str) -> int:
    """The host's port towards the scale-out network (its first non-NVLink link)."""
    for link in fabric.links_of(host):
        if link.kind != "nvlink":
            return link.port_of(host)
    raise ValueError(f"host {host} has no network link")


def host_address(fabric: Fabric, host: str) -> str:
    """The host's address with its prefix, as the builder gives it (``10.0.0.1/8``)."""
    return f"{fabric.node(host).ip}/{HOST_PREFIX_LEN}"


def host_routes(fabric: Fabric, host: str, ifname: Callable[[str, int], str]) -> list[list[str]]:
    """Every route of ``host`` as ``ip route replace`` arguments (without them): the
    connected route its address makes on the network port, as the kernel made it, and a
    /32 over the NVLink port to each same-server peer."""
    address = host_address(fabric, host)
    network = ipaddress.ip_interface(address).network
    dev = ifname(host, network_port(fabric, host))
    routes = [
        [str(network), "dev", dev, "proto", "kernel", "scope", "link", "src", address.split("/")[0]]
    ]
    nvl = fabric.nvlink_switch_of(host)
    if nvl:
        nvl_dev = ifname(host, fabric.port(host, nvl))
        for peer in fabric.hosts:
            if peer.name != host and fabric.same_server(host, peer.name):
                routes.append([f"{peer.ip}/32", "dev", nvl_dev])
    return routes


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

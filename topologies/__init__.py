"""Fabrics as pure data (no root, no Mininet) and, in ``builder``, the Mininet builder."""

from .fabric import Fabric, FabricError, Link, Node, host_ip, port_mac
from .generators import GENERATORS, defaults, fat_tree, make_fabric, rail_optimized, spine_leaf

__all__ = [
    "GENERATORS",
    "Fabric",
    "FabricError",
    "Link",
    "Node",
    "defaults",
    "fat_tree",
    "host_ip",
    "make_fabric",
    "port_mac",
    "rail_optimized",
    "spine_leaf",
]

"""Fabrics as pure data (``fabric``, ``generators``, ``naming``, ``scale``, ``shaping``,
``qos``, ``hostconfig``, ``transport``, ``placement``, ...: no root, no Mininet; the
package exports the fabric and its generators) and the modules that act on machines: ``builder`` (a
fabric built as a Mininet network on this machine), ``machine`` (what this machine can
emulate), ``processes`` (commands and helper processes), ``cleanup`` and ``ovs_tx``;
``cluster`` spreads a fabric over several machines (Mininet in its ``network`` and
``nodes``). See docs/architecture.md."""

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

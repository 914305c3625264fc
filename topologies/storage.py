"""Storage nodes: the hosts of the flash KV tier, attached to the fabric like GPUs.

A fabric generator's ``storage_nodes`` (how many), ``storage_attach`` (where) and
``storage_gbps`` (each storage node's link rate) add hosts ``storage0``, ``storage1``,
... of node kind ``storage``, each with one link of kind ``storage`` to a switch.
``storage_attach`` is a switch kind the fabric has (``spine``, ``leaf``, ``rail``,
``core``, ``router``: storage node k goes to the k-th switch of that kind, round robin) or one
switch's name (``spine1``, ``rail0``: every storage node on it). NVLink switches are
inside a server and never an attachment point.

Storage nodes are numbered after every GPU, so adding them changes no GPU's number,
address or port; they are hosts, so routes, static ARP, shaping and agents cover them
as they cover GPUs.
"""

from __future__ import annotations

from .fabric import FabricBuilder, FabricError

ATTACH_KINDS = ("spine", "leaf", "rail", "core", "router")
DEFAULT_ATTACH = "spine"


def attachment_switches(fb: FabricBuilder, gen: str, attach: object) -> list[str]:
    """The switches storage nodes attach to, in the order they take them."""
    switches = [n for n in fb.nodes if not n.is_host and n.kind != "nvlink"]
    kinds = sorted({n.kind for n in switches}, key=ATTACH_KINDS.index)
    if isinstance(attach, str):
        if attach in ATTACH_KINDS:
            chosen = [n.name for n in switches if n.kind == attach]
            if chosen:
                return chosen
        elif any(n.name == attach for n in switches):
            return [attach]
    names = [n.name for n in switches]
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    raise FabricError(
        f"{gen}: storage_attach={attach!r} is not allowed: must be an attachment point this"
        f" fabric has: a switch kind ({', '.join(kinds)}) or one of its switches ({shown})",
        "storage_attach",
    )


def attach_storage_nodes(
    fb: FabricBuilder, gen: str, count: int, attach: object, gbps: float, buffer_pkts: int
) -> list[str]:
    """Add ``count`` storage nodes to ``fb`` on the switches ``attach`` names (checked even
    when ``count`` is 0, so a spec's attachment point is refused before it matters)."""
    switches = attachment_switches(fb, gen, attach)
    nodes = []
    for k in range(count):
        node = fb.host(f"storage{k}", kind="storage")
        fb.link(node, switches[k % len(switches)], gbps, buffer_pkts, "storage")
        nodes.append(node)
    return nodes

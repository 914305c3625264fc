"""The capture points a spec's ``capture.at`` names on its fabric (pure): a host
(``gpu0_0``: all its NICs) or a switch port (``leaf0:3`` by number, ``leaf0:spine1`` by
the neighbour it faces). The schema checks each entry with ``targets``; the run's
captures (``experiments.measurement.capture``) listen where they point.
"""

from __future__ import annotations

from dataclasses import dataclass

from topologies.fabric import Fabric


@dataclass(frozen=True)
class Target:
    name: str  # the file stem: gpu0_0, leaf0-3
    node: str
    port: int
    is_host: bool


def targets(fabric: Fabric, where: list[str]) -> list[Target]:
    """Capture points for ``where`` entries (see the module doc); ValueError names the
    entry and what is allowed."""
    out: dict[str, Target] = {}
    for entry in where:
        node, _, port = str(entry).partition(":")
        try:
            n = fabric.node(node)
        except Exception:
            raise ValueError(
                f"capture {entry!r}: no node {node!r}; allowed: a host (gpu0_0) or "
                "switch:port (leaf0:3, or leaf0:spine1 by the neighbour it faces)"
            ) from None
        if n.is_host:
            if port:
                raise ValueError(
                    f"capture {entry!r}: a host is captured on all its NICs; write {node!r}"
                )
            t = Target(node, node, fabric.links_of(node)[0].port_of(node), True)
        else:
            ports = {lk.port_of(node): lk.other(node) for lk in fabric.links_of(node)}
            number = int(port) if port.isdigit() else None
            if number is None:
                number = next((p for p, other in ports.items() if other == port), None)
            if number not in ports:
                allowed = ", ".join(f"{node}:{p} ({o})" for p, o in sorted(ports.items()))
                raise ValueError(
                    f"capture {entry!r}: {node} has no port {port!r}; allowed: {allowed}"
                )
            t = Target(f"{node}-{number}", node, number, False)
        out[t.name] = t
    return list(out.values())

"""Routing for kvfabric fabrics, in rooms top to bottom (docs/architecture.md): what the
testbed starts (``process``: the controller process; ``ofctl``: rules installed without
one), the controller process's shim (``app`` and ``main``, the only os-ken; ``ofp``;
its Unix-socket ``channel``; ``tls``) and the pure core: the policy core (rules as data)
and the controller session (events in, OpenFlow changes out)."""

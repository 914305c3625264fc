"""Routing for kvfabric fabrics: a pure policy core (rules as data), a pure controller
session (events in, OpenFlow changes out) and the os-ken shim."""

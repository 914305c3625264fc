"""Routing for kvfabric fabrics: a pure policy core (rules as data) and the os-ken shim."""

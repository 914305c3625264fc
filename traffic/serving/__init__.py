"""Disaggregated LLM serving as a live driver: instances, routers, prefix cache, decode.

``build_serving`` turns the ``serving`` workload of a run's configuration (a
``ServingWorkload``, read by attribute) into a :class:`ServingDriver`
(``traffic.driver.Driver``); ``sim.simulate`` runs it over a fluid network model, the
agent fleet runs it over real packets.
"""

from .build import build_serving, read_arrivals
from .cache import Lookup, PrefixCachePool
from .driver import ServingDriver
from .instances import Instance, ServingError, TierMap, make_instances
from .routers import (
    ROUTERS,
    KvAffinity,
    LeastLoaded,
    RoundRobin,
    Router,
    RouterState,
    TopologyAware,
    make_router,
    router_rng,
)
from .sim import SimResult, fabric_rate, simulate

__all__ = [
    "ROUTERS",
    "Instance",
    "KvAffinity",
    "LeastLoaded",
    "Lookup",
    "PrefixCachePool",
    "RoundRobin",
    "Router",
    "RouterState",
    "ServingDriver",
    "ServingError",
    "SimResult",
    "TierMap",
    "TopologyAware",
    "build_serving",
    "fabric_rate",
    "make_instances",
    "make_router",
    "read_arrivals",
    "router_rng",
    "simulate",
]

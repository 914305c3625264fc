"""The traffic agents: the processes that send and receive every message of a run
over real kernel sockets, and the coordinator that drives them (the top room of
``traffic``: they run the schedules of ``workloads`` and the drivers of ``serving``;
the byte layout they speak is ``traffic.wire``, below them).

- ``records``: ``Sent`` and ``Received``, the one record type both ends share.
- ``kernel``: ``setns`` into a host's namespace, a nanosecond timer for asyncio.
- ``host``: one emulated host's sockets and its non-blocking send/receive paths.
- ``worker``: the agent process, serving many hosts on one event loop.
- ``launcher``: host grouping, worker processes and their control clients.
- ``auth``: the run's secret and the control channel's handshake (pure messages).
- ``channel``: a worker's TCP control channel: bind address, secret on stdin, port.
- ``sites``: workers started through a command prefix (ssh), controlled over TCP.
- ``coordinator``: the run's event loop over the workers' event streams (completion
  groups settled by ``traffic.workloads.deps``).
- ``merge``: planned rows and records into the flows table (pure).
- ``fleet``: ``AgentFleet``, which puts them together.
"""

from typing import Any

__all__ = ["FLOW_COLUMNS", "AgentFleet", "FleetError", "process_count"]
_HOMES = {
    "AgentFleet": "fleet",
    "process_count": "fleet",
    "FleetError": "launcher",
    "FLOW_COLUMNS": "merge",
}


def __getattr__(name: str) -> Any:
    """The fleet's names, imported on first use: a worker process (and ``traffic.header``,
    which shares ``traffic.wire``) must not load pandas and the workloads to start."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)

"""Workload models: spec parameters + a seed -> a schedule (``pandas.DataFrame``).

Every generator is a pure function returning one row per message with the
columns and the dependency semantics documented in ``schedule``. Sizes are
real-equivalent bytes; the runner applies the bandwidth scale. Those semantics run in
``deps`` (completion groups: the agents' coordinator and ``replay`` use it) and
``replay`` (a schedule as a live driver for the fluid simulator).
"""

from .alltoall import moe_alltoall
from .background import background
from .incast import incast
from .kv_transfer import kv_transfer, shard_overlap
from .probe import probe
from .schedule import (
    COLUMNS,
    WorkloadError,
    concat_schedules,
    empty_schedule,
    validate_schedule,
)

__all__ = [
    "COLUMNS",
    "WorkloadError",
    "background",
    "concat_schedules",
    "empty_schedule",
    "incast",
    "kv_transfer",
    "moe_alltoall",
    "probe",
    "shard_overlap",
    "validate_schedule",
]

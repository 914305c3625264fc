"""The flows a running fleet has settled so far, read from another thread.

    progress = FlowProgress(fleet)
    rows = progress.take()        # flows settled since the last take (FLOW_COLUMNS), or None

The coordinator's loop is the run's latency-critical path, so nothing here runs in it:
``take`` only slices lists the loop appends to (``Coordinator.received_log``,
``DependencyTracker.failures``, ``Coordinator.live``), which are append-only and whose
slices CPython copies in one step, and reads single dictionary entries. Each flow comes
out once, when it settles (received in full, or failed), through the same
``merge.flows_table`` as the run's final table. What only the workers know is missing
until then: ``t_issue_ns`` (so ``issue_lateness_ms``) is null, ``t_start_ns`` is the
instant in the message's header (the final table's fallback, equal to the sender's
``t_start_ns``), and a failure's error is the coordinator's, not the sender's own.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .merge import flows_table, live_frame
from .records import Received


class FlowProgress:
    """Follows ``fleet`` (a started ``AgentFleet``); see the module docstring."""

    def __init__(self, fleet: Any) -> None:
        self.fleet = fleet
        self._received = 0  # items of received_log taken
        self._failed = 0  # items of tracker.failures taken
        self._live = 0  # items of coordinator.live seen
        self._messages: dict[int, Any] = {}  # live flow id -> its Message
        self._planned: pd.DataFrame | None = None

    def take(self) -> pd.DataFrame | None:
        """The flows settled since the previous call, or ``None`` if none (or the fleet's
        run has not begun)."""
        coord = self.fleet.coordinator
        if coord is None:
            return None
        tracker = coord.tracker
        # The logs first, then the live messages: a live flow is in ``live`` before it
        # can be received or fail, so each flow taken has its message.
        received = coord.received_log[self._received :]
        failed = tracker.failures[self._failed :]
        fresh = coord.live[self._live :]
        self._received += len(received)
        self._failed += len(failed)
        self._live += len(fresh)
        self._messages.update((m.flow_id, m) for m in fresh)
        if not received and not failed:
            return None
        outcomes = {item[1]: (True, "") for item in received}
        outcomes |= {fid: (False, tracker.errors.get(fid, "failed")) for fid in failed}
        t_end = {item[1]: item[2] for item in received}
        records = [Received(item[1], item[2], 0, item[3], "", True, "")
                   for item in received if len(item) > 3]  # fmt: skip
        release = {fid: tracker.release_ns.get(fid) for fid in outcomes}
        release = {fid: t for fid, t in release.items() if t is not None}
        live = [self._messages[f] for f in outcomes if f in self._messages]
        static = [f for f in outcomes if f not in self._messages]
        planned = self._plan().loc[static] if static else self._plan().iloc[:0]
        fleet = self.fleet
        return flows_table(planned.reset_index(drop=True),
                           live_frame(live, fleet.scale) if live else None, outcomes,
                           release, t_end, [], records, fleet.cc,
                           fleet.connection)  # fmt: skip

    def _plan(self) -> pd.DataFrame:
        if self._planned is None:
            self._planned = self.fleet.planned.set_index("flow_id", drop=False)
            self._planned.index.name = None
        return self._planned

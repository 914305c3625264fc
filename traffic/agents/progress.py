"""The flows a running fleet has settled so far, read from another thread.

    progress = FlowProgress(fleet)
    rows = progress.take()        # flows settled since the last take (FLOW_COLUMNS), or None
    progress.saved(rows)          # they are on disk: the coordinator may forget them

The coordinator's loop is the run's latency-critical path, so nothing here runs in it:
``take`` pops what the loop appended to ``Coordinator.received_log`` (a deque), slices
``DependencyTracker.failures`` (append-only; CPython copies a slice in one step), and
reads single dictionary entries (``Coordinator.live``, the tracker's instants). Each
flow comes out once, when it settles (received in full, or failed), through the same
``merge.flows_table`` as the run's final table. What only the workers know is missing
until then: ``t_issue_ns`` (so ``issue_lateness_ms``) is null, ``t_start_ns`` is the
instant in the message's header (the final table's fallback, equal to the sender's
``t_start_ns``), and a failure's error is the coordinator's, not the sender's own;
the final table lays the workers' records over these rows (``merge.with_records``).

``saved`` hands the flow ids of rows the caller has saved to the coordinator, which
then forgets them; it does so only when the fleet can read those rows back at the end
(``fleet.saved_flows`` is set), so the final table still has every flow.
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
        self._failed = 0  # items of tracker.failures taken
        self._planned: pd.DataFrame | None = None

    def take(self) -> pd.DataFrame | None:
        """The flows settled since the previous call, or ``None`` if none (or the fleet's
        run has not begun)."""
        coord = self.fleet.coordinator
        if coord is None:
            return None
        tracker = coord.tracker
        log = coord.received_log
        received = [log.popleft() for _ in range(len(log))]
        failed = tracker.failures[self._failed :]
        self._failed += len(failed)
        if not received and not failed:
            return None
        outcomes = {item[1]: (True, "") for item in received}
        outcomes |= {fid: (False, tracker.errors.get(fid, "failed")) for fid in failed}
        t_end = {item[1]: item[2] for item in received}
        records = [
            Received(item[1], item[2], 0, item[3], "", True, "")
            for item in received
            if len(item) > 3
        ]
        release = {fid: tracker.release_ns.get(fid) for fid in outcomes}
        release = {fid: t for fid, t in release.items() if t is not None}
        # A live flow is in ``live`` before it can be received or fail.
        messages = {f: coord.live.get(f) for f in outcomes}
        live = [m for m in messages.values() if m is not None]
        static = [f for f, m in messages.items() if m is None]
        planned = self._plan().loc[static] if static else self._plan().iloc[:0]
        fleet = self.fleet
        return flows_table(
            planned.reset_index(drop=True),
            live_frame(live, fleet.scale) if live else None,
            outcomes,
            release,
            t_end,
            [],
            records,
            fleet.cc,
            fleet.connection,
        )

    def in_flight(self) -> int:
        """Flows sent and not yet received or failed, about (``kvfabric run --live``):
        sizes of the tracker's dictionaries only, read in one step each, never a pass
        over them; a flow that failed before it was sent makes it one too low."""
        coord = self.fleet.coordinator
        if coord is None:
            return 0
        tracker = coord.tracker
        return max(0, len(tracker.sent_at) - len(tracker.t_end) - len(tracker.errors))

    def saved(self, flows: pd.DataFrame) -> None:
        """``flows`` (rows ``take`` returned) are saved: the coordinator may forget them."""
        coord = self.fleet.coordinator
        if coord is not None and getattr(self.fleet, "saved_flows", None) is not None:
            coord.saved.extend(flows["flow_id"].tolist())

    def _plan(self) -> pd.DataFrame:
        if self._planned is None:
            self._planned = self.fleet.planned.set_index("flow_id", drop=False)
            self._planned.index.name = None
        return self._planned

"""The coordinator's tables saved while the run goes on, so a killed run keeps them.

    with fleet, LiveTables(run_dir, fleet, driver, flush_s=2.0):
        flows = fleet.run(...)

Every ``flush_s`` seconds a thread of the runner appends, as one chunk each
(``experiments.output.chunks``), the flows that settled since the last flush
(``traffic.agents.progress``) and, with a serving driver, the requests that settled and
their tokens; the run's t0 goes to ``partial/clock.json`` once it is fixed. The
complete tables written at the end of the run replace the chunks.

Once a chunk of flows is on disk the coordinator may forget those flows
(``FlowProgress.saved``): the fleet reads them back from the chunks for the run's final
table (``AgentFleet.saved_flows``), so the runner's memory follows the flows in flight,
not the length of the run.

Why a thread, and why it is harmless to the coordinator: the coordinator's state lives
in this process, and the loop must not do this work itself. The thread takes only what
is new (list slices, no copy of the run so far), in Python steps that hand the GIL back
within the fleet's 0.5 ms switch interval, and one small pyarrow conversion per table
per flush (a few hundred rows every two seconds in a busy run; parquet encoding and the
write release the GIL). It keeps the process's ordinary priority on purpose: a thread
at a lower priority holding the GIL while the scheduler keeps it off the CPU would make
the coordinator wait for it. Its first failure (a full disk) is logged and ends the
live saving, never the run.

``observers`` (``kvfabric run --live``: ``experiments.orchestration.live_view``) are
handed each chunk as it is saved, in this thread: they must only keep it (a deque
append), never work on it here.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Self

from experiments.output.chunks import ChunkWriter, read_chunks, write_clock
from traffic.agents.progress import FlowProgress

log = logging.getLogger("kvfabric.live")

LIVE_TABLES = ("flows", "requests", "tokens")  # saved by this module
SAMPLED_TABLES = ("queues", "links", "cpu")  # saved by the sampler process


class LiveTables:
    """See the module docstring. ``driver``: the run's live driver, or ``None``; its
    requests and tokens are saved when it has ``settled_tables``."""

    def __init__(
        self, run_dir: str | os.PathLike, fleet: Any, driver: Any = None, flush_s: float = 2.0
    ) -> None:
        if not flush_s > 0:
            raise ValueError(f"flush_s={flush_s!r}; must be > 0")
        self.run_dir, self.flush_s = run_dir, flush_s
        self.progress = FlowProgress(fleet)
        self.fleet = fleet
        self.driver = driver if hasattr(driver, "settled_tables") else None
        self.writers: dict[str, ChunkWriter] = {}
        self._seen_requests: set[int] = set()
        self._clock_written = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failed: str | None = None
        # each called with (table, frame) after a chunk is saved: the live view's feed
        self.observers: list[Callable[[str, Any], None]] = []
        fleet.saved_flows = self.saved_flows

    def save(self) -> None:
        """One flush: what settled since the previous one."""
        if not self._clock_written and self.fleet.t0_ns is not None:
            write_clock(self.run_dir, self.fleet.t0_ns)
            self._clock_written = True
        flows = self.progress.take()
        if self._append("flows", flows):
            self.progress.saved(flows)
        if self.driver is not None:
            tables = self.driver.settled_tables(self._seen_requests)
            if tables is not None:
                self._append("requests", tables[0])
                self._append("tokens", tables[1])

    def _append(self, name: str, frame: Any) -> bool:
        """Save ``frame`` as the next chunk of table ``name``; True if it was saved."""
        if frame is None or not len(frame):
            return False
        if name not in self.writers:
            self.writers[name] = ChunkWriter(self.run_dir, name)
        self.writers[name].append(frame)
        for observe in self.observers:
            try:
                observe(name, frame)
            except Exception as exc:  # a watcher's failure never costs the saving
                log.warning("a watcher of the live tables failed, dropped: %s", exc)
                self.observers.remove(observe)
                break
        return True

    def saved_flows(self) -> Any:
        """Every flow saved so far (the fleet's final table reads back the flows its
        coordinator forgot), or ``None``."""
        recovered = read_chunks(self.run_dir, "flows")
        if recovered is not None and recovered.skipped:
            log.warning("saved flows that could not be read back: %s", recovered.skipped)
        return None if recovered is None else recovered.frame

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            try:
                self.save()
            except Exception as exc:
                self.failed = f"{type(exc).__name__}: {exc}"
                log.warning("saving the run's tables as it goes failed, given up: %s", exc)
                return

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._loop, name="kvfabric-live-tables", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc_type is not None and self.failed is None:
            # The run is aborted before the complete tables exist: keep what is known.
            try:
                self.save()
            except Exception as error:
                log.warning("the last save of the run's tables failed: %s", error)


def live_record(sampler_flush_s: float, flush_s: float) -> dict[str, Any]:
    """What the summary of a run in progress says of its live tables: a reader of a run
    that never finished learns from it which tables it can hope to find, and how stale."""
    return {
        "folder": "partial",
        "tables": dict.fromkeys(SAMPLED_TABLES, sampler_flush_s)
        | dict.fromkeys(LIVE_TABLES, flush_s),
        "note": "seconds between saves of each table's new rows; a killed run keeps them "
        "up to its last save (flows without t_issue_ns; requests and tokens only with a "
        "serving workload)",
    }

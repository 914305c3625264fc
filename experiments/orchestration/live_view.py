"""``kvfabric run --live``: the run as it stands on the terminal, redrawn once a second.

    with LiveScreen(console) as screen:            # instead of the progress bar
        run_spec(..., progress=screen, live=screen)

    # in the runner, while the traffic runs:
    with fleet, LiveTables(...) as tables, screen.watch(p, deployed, run_dir, fleet, tables):
        fleet.run(...)

``LiveScreen`` owns a ``rich.live.Live`` and one thread of its own that redraws it every
``refresh_s``; it also takes the runner's phase reports (``add_task``/``update``, what the
progress bar took), which only store two numbers and a string, since the runner makes
them from the coordinator's loop. While a run's traffic goes, ``watch`` lets the thread
look at what that run has already recorded, and nothing more (no sampling of its own):

- the sampler process's chunks (queues, links, cpu; ``<run>/partial/<table>/``), each
  read once, when it appears, and only the columns ``Standing`` folds (``FOLDED``), in
  this thread (pyarrow's thread pool would cost more than it saves on a chunk this
  small);
- the flows, requests and tokens chunks the live-saving thread (``LiveTables``) hands its
  observers as it saves them (kept here by one deque append in that thread);
- counts read in one step each: flows in flight (``FlowProgress.in_flight``), requests
  arrived (``ServingDriver.arrived``).

The rows are folded into ``experiments.analysis.standing.Standing`` and drawn by
``experiments.output.live_view``. The thread keeps to the discipline of
``experiments.orchestration.live``: it works on one chunk at a time, in Python steps and
short library calls (parquet decoding releases the GIL), never a pass over the run's
whole tables, so the coordinator's loop is not held up. A failure of the view (a chunk
it cannot read is skipped) is shown on the screen and never costs the run. Everything is
released in ``__exit__``, Ctrl-C included: the thread is stopped and joined, the Live
stopped, the last screen left on the terminal.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Self

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.live import Live

from experiments.analysis.standing import FOLDED, LiveSnapshot, Port, Standing
from experiments.measurement.chunks import chunk_paths
from experiments.orchestration.live import SAMPLED_TABLES
from experiments.output.live_view import live_view
from topologies.shaping import frame_bytes

log = logging.getLogger("kvfabric.live_view")

# Once a second: the sampler saves its chunks once a second and the live tables every
# two, so a faster redraw would mostly show the same rows again, and a redraw is the view's
# largest cost (about 10 ms of CPU for rich to lay out the tables of a 40-port fabric).
REFRESH_S = 1.0
# The checks as they stand are worked out every few redraws: each folds the run so far
# (the CPU samples' p95, every port's standing-queue stretches), and between two of them
# a check moves little; queues, links and latencies are redrawn every time.
JUDGE_EVERY_S = 3.0


class RunWatch:
    """What one run has recorded so far, folded into ``standing`` as it appears (see the
    module docstring). ``fleet``: the run's ``AgentFleet``; ``tables``: its
    ``LiveTables`` (the flows, requests and tokens it saves); ``driver``: the serving
    driver, or ``None``."""

    def __init__(
        self,
        run_dir: str | Path,
        standing: Standing,
        fleet: Any,
        tables: Any,
        driver: Any = None,
        duration_s: float | None = None,
    ) -> None:
        self.run_dir, self.standing = Path(run_dir), standing
        self.fleet, self.tables, self.duration_s = fleet, tables, duration_s
        self.driver = driver if hasattr(driver, "arrived") else None
        self.read: set[Path] = set()
        self.saved: deque[tuple[str, Any]] = deque()
        self.skipped: list[str] = []
        self.judged_ns = 0  # when the checks were last worked out (monotonic)
        tables.observers.append(self._saved)

    def _saved(self, table: str, frame: Any) -> None:  # in the live-saving thread
        self.saved.append((table, frame))

    def poll(self) -> None:
        """Fold in what was recorded since the previous poll."""
        for table in SAMPLED_TABLES:
            for path in chunk_paths(self.run_dir, table):
                if path in self.read:
                    continue
                self.read.add(path)
                try:
                    self.standing.add(table, read_chunk(path, FOLDED.get(table)))
                except Exception as exc:  # gone (the run compacted it), or cut short
                    self.skipped.append(f"{table}/{path.name}: {type(exc).__name__}")
        while self.saved:
            self.standing.add(*self.saved.popleft())

    def snapshot(self, run: str, phase: str) -> LiveSnapshot:
        t0 = self.fleet.t0_ns
        now = time.monotonic_ns()
        judge = now - self.judged_ns >= JUDGE_EVERY_S * 1e9
        if judge:
            self.judged_ns = now
        elapsed = (now - t0) / 1e9 if t0 is not None else None
        note = f"skipped unreadable chunks: {', '.join(self.skipped[-3:])}" if self.skipped else ""
        return self.standing.snapshot(
            run,
            phase,
            elapsed_s=elapsed,
            duration_s=self.duration_s,
            flows_in_flight=self.tables.progress.in_flight(),
            requests_arrived=self.driver.arrived(now) if self.driver is not None else None,
            note=note,
            judge=judge,
        )

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.tables.observers.remove(self._saved)


def read_chunk(path: Path, columns: tuple[str, ...] | None = None) -> pd.DataFrame | pa.Table:
    """A chunk's ``columns`` (all if None), decoded in the calling thread: as the Arrow
    table read when ``columns`` are named (``Standing`` folds them as arrays; a frame
    would cost as much again), else as a frame."""
    with pq.ParquetFile(path) as chunk:
        table = chunk.read(columns=columns and list(columns), use_threads=False)
    return table if columns else table.to_pandas(use_threads=False)


def standing_of(p: Any, deployed: Any, sampler_hz: float) -> Standing:
    """The ``Standing`` of a prepared run (``runner.Prepared``) on its deployment: every
    switch egress named by its neighbour, with its shaped rate and buffer (wall clock)."""
    from experiments.output.plots import port_names

    names = port_names(p.fabric)
    ports = {
        (e.node, e.port): Port(
            names.get((e.node, e.port), f"{e.node}:{e.port}"), e.rate_bps, e.queue_pkts
        )
        for e in deployed.plan
        if not p.fabric.node(e.node).is_host
    }
    driver = p.plan.driver
    return Standing(
        ports,
        thresholds=p.config.fidelity,
        fabric=p.fabric,
        capacity_mbps=p.envelope.capacity_mbps,  # per wall second, as the chunks read
        sampler_hz=sampler_hz,
        requests_total=len(driver.requests) if hasattr(driver, "arrived") else None,
        frame=frame_bytes(deployed.scale.mtu),
    )


class LiveScreen:
    """The live view on ``console`` (see the module docstring); stands in for the
    progress bar the runner reports its phases to."""

    def __init__(self, console: Console, refresh_s: float = REFRESH_S) -> None:
        if not refresh_s > 0:
            raise ValueError(f"refresh_s={refresh_s!r}; must be > 0")
        self.console, self.refresh_s = console, refresh_s
        self.run, self.phase = "", "starting"
        self.total: float | None = None
        self.completed: float | None = None
        self.watched: RunWatch | None = None
        self.last: LiveSnapshot | None = None  # the run's last, kept on while it collects
        self.failed: str | None = None
        self._live: Live | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cpu_s = {"fold": 0.0, "draw": 0.0}  # the view thread's own, by step

    # ----- what the runner reports (from the coordinator's loop: store, nothing more) ----
    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:
        self.run, _, self.phase = description.partition(": ")
        self.total, self.completed, self.last = total, None, None
        return 0

    def update(
        self,
        task: int,
        description: str | None = None,
        total: float | None = None,
        completed: float | None = None,
        **_: Any,
    ) -> None:
        if description is not None:
            self.run, _, self.phase = description.partition(": ")
        if total is not None:
            self.total = total
        if completed is not None:
            self.completed = completed

    @contextlib.contextmanager
    def watch(
        self,
        p: Any,
        deployed: Any,
        run_dir: Path,
        fleet: Any,
        tables: Any,
        sampler_hz: float,
        duration_s: float | None = None,
    ) -> Iterator[RunWatch | None]:
        """Show what run ``p`` records while the block runs; the view's own failure to
        set up is shown, never raised."""
        try:
            watch = RunWatch(
                run_dir,
                standing_of(p, deployed, sampler_hz),
                fleet,
                tables,
                p.plan.driver,
                duration_s,
            )
        except Exception as exc:
            log.debug("live view not set up", exc_info=True)
            self.failed = f"the live view could not follow this run: {exc}"
            yield None
            return
        with self.follow(watch):
            yield watch

    @contextlib.contextmanager
    def follow(self, watch: RunWatch) -> Iterator[RunWatch]:
        """Show ``watch`` while the block runs (``watch`` builds one for a prepared run;
        the ``agent-cost`` benchmark builds its own)."""
        self.watched = watch
        try:
            yield watch
        finally:
            self.watched = None
            watch.close()

    # ----- the screen ------------------------------------------------------------------------
    def frame(self) -> LiveSnapshot:
        """What the screen shows now."""
        watch = self.watched
        if watch is not None:
            try:
                watch.poll()
                self.last = watch.snapshot(self.run or "run", self.phase)
                return self.last
            except Exception as exc:
                log.debug("live view failed", exc_info=True)
                self.failed = f"the live view stopped following the run: {exc}"
                self.watched = None
        if self.last is not None:
            return replace(self.last, phase=self.phase, note=self.failed or self.last.note)
        return LiveSnapshot(
            self.run or "kvfabric run",
            self.phase,
            elapsed_s=self.completed,
            duration_s=self.total,
            note=self.failed or "",
        )

    def _draw(self) -> None:
        """One redraw; its thread's CPU seconds are added to ``cpu_s`` (folding the new
        rows and judging, then laying out and writing the screen)."""
        t0 = time.thread_time()
        shown = self.frame()
        t1 = time.thread_time()
        if self._live is not None:
            self._live.update(live_view(shown), refresh=True)
        self.cpu_s["fold"] += t1 - t0
        self.cpu_s["draw"] += time.thread_time() - t1

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self._draw()
            except Exception as exc:  # the screen is not worth the run
                log.warning("the live view failed, stopped: %s", exc)
                return

    def __enter__(self) -> Self:
        self._live = Live(console=self.console, auto_refresh=False, transient=False)
        self._live.start()
        try:
            self._thread = threading.Thread(
                target=self._loop, name="kvfabric-live-view", daemon=True
            )
            self._thread.start()
        except BaseException:
            self._live.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            if self._thread is not None:
                self._thread.join()
        finally:
            live, self._live = self._live, None
            if live is not None:
                with contextlib.suppress(Exception):
                    live.update(live_view(self.frame()), refresh=True)
                live.stop()

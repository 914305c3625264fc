"""Keeping Python's cyclic garbage collector out of the hot path.

A full (generation 2) collection walks every live object: with a run's rows,
tracker entries and driver state that took 38-78 ms in the coordinator of a
64-GPU serving run, and the messages due meanwhile went out that late.
``no_full_collections()`` freezes what exists (it is never scanned again) and
keeps generation 2 from running while the body runs; young generations still
collect, so cyclic garbage made meanwhile is bounded. The previous thresholds
come back on exit, and the frozen objects rejoin the heap.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

NEVER = 1 << 30


@contextlib.contextmanager
def no_full_collections() -> Iterator[None]:
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(old[0], old[1], NEVER)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()

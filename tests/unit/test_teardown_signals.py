"""A Ctrl-C during a fabric's teardown waits for the teardown to end
(``builder._signals_held``), also when the run has other threads, to which the kernel
may deliver the signal: a teardown cut short leaves bridges and the run's record."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from topologies.builder import _signals_held


@pytest.fixture
def another_thread():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    yield
    stop.set()
    t.join()


def _teardown(signum: int, steps: list[str]) -> None:
    """A teardown that is signalled twice while it works."""
    with _signals_held():
        os.kill(os.getpid(), signum)
        os.kill(os.getpid(), signum)
        for _ in range(20):
            time.sleep(0.005)  # an unheld handler runs here
        steps.append("torn down")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_teardown_is_delivered_once_after_it(another_thread, signum):
    steps: list[str] = []
    old = signal.signal(signum, lambda s, f: steps.append(f"handled {s}"))
    try:
        _teardown(signum, steps)
    finally:
        signal.signal(signum, old)
    assert steps == ["torn down", f"handled {signum}"]


def test_ctrl_c_during_teardown_interrupts_only_after_it(another_thread):
    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        _teardown(signal.SIGINT, steps)
    assert steps == ["torn down"]


def test_the_handlers_are_the_callers_again_after_teardown():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with _signals_held():
        pass
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before

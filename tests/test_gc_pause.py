"""The cycle collector is paused while a deep queue loads and runs again after the last
load ends, whatever the threads and errors; a collector the process disabled stays so."""

from __future__ import annotations

import gc
import threading

import pytest

from grid_tasks.gc_pause import collector_paused


def test_the_collector_runs_again_after_the_outermost_pause():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer load still runs
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the load failed")
    assert gc.isenabled()


def test_overlapping_pauses_of_threads_end_with_the_last():
    inside, release = threading.Event(), threading.Event()

    def load() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    other = threading.Thread(target=load)
    other.start()
    inside.wait(10)
    with collector_paused():
        pass
    assert not gc.isenabled()  # the other thread's load goes on
    release.set()
    other.join(10)
    assert gc.isenabled()


def test_a_collector_disabled_by_the_process_stays_disabled():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()

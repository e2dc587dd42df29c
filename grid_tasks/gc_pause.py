"""Pausing Python's cycle collector while a deep queue is loaded.

Loading an RM's idle queue builds one core job (and a few small containers) per
queued job, and every one of them outlives the load.  The cycle collector runs every
few hundred allocations and, as the survivors pile up, repeatedly walks all of them
(its oldest generation is walked whenever it grew by a quarter): with 100,000 jobs
that was over half of a first load's CPU time, for objects that form no cycle.  So
the load runs with the collector paused; it runs again once the last load of the
process ends (threads of a shared scheduler worker may load at once).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cycle collector disabled (as it was after the outermost
    pause of this process ends; reference counting frees objects meanwhile)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()

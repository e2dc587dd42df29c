"""An idle node daemon's event loop wakes when something is due, not every 10 s.

A Celery worker's event loop (kombu's ``Hub``) waits for its sockets and timers, but
never longer than 10 s: its ``fire_timers`` caps the wait (``max_delay=10``), and so
does the worker's timer (``Timer(max_interval=10.0)``, in Celery's ``Timer`` step).  A
busy worker never notices.  An idle node daemon does: with a 30 s BRPOP and 30 s
timers (:mod:`grid_tasks.node.worker_config`), the cap alone woke its main thread
three times in 30 s, each wake-up as costly as a BRPOP re-arm.

The cap is a safety net for work queued from other threads without waking the loop
(``Hub.call_soon`` has no waker).  A node daemon runs its tasks in the loop's own
thread (the solo pool); its other threads (heartbeat, job managers, watchdog beats)
send over their own connections and queue nothing on the loop.  So the loop may wait
as long as its longest poll: a message still wakes BRPOP at once, a signal still ends
the wait, and every timer still fires on time.

Neither cap is a setting, so :func:`wake_only_when_due` sets both on the worker's hub
before its loop is made (the node daemon bootstep's ``start``; the consumer makes the
loop after).
"""

from __future__ import annotations

import functools
from typing import Any


def wake_only_when_due(hub: Any, seconds: float) -> None:
    """Let ``hub`` (kombu's ``Hub``) wait up to ``seconds`` when nothing is due."""
    hub.timer.max_interval = float(seconds)
    # The hub's timer iterator reads the cap when it is made: make it again.
    hub.__dict__.pop("scheduler", None)
    hub.fire_timers = functools.partial(type(hub).fire_timers, hub, max_delay=seconds)

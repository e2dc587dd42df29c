"""Test tasks for the Redis-restart test (not a test module): acks-late tasks that hold
their delivery unacknowledged while Redis goes away under the worker."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import shared_task

from grid_tasks.celery_app import LAUNCH_CRITICAL

HOLD = "tests.node.restart_tasks.hold"
WHOAMI = "tests.node.restart_tasks.whoami"


@shared_task(name=HOLD, **LAUNCH_CRITICAL)
def hold(marker_dir: str, seconds: float) -> int:
    """Mark that the delivery runs (unacknowledged: acks late), sleep, mark the end."""
    stamp = time.monotonic_ns()
    Path(marker_dir, f"running-{stamp}").touch()
    time.sleep(seconds)
    Path(marker_dir, f"done-{stamp}").touch()
    return os.getpid()


@shared_task(name=WHOAMI)
def whoami() -> int:
    """The worker's PID: proves a task still runs, and in which process."""
    return os.getpid()

"""A launch-critical test task whose first delivery hangs (so its worker can be killed)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import shared_task

from grid_tasks.celery_app import LAUNCH_CRITICAL


@shared_task(name="tests.node.lost_tasks.launch_once", bind=True, **LAUNCH_CRITICAL)
def launch_once(self, marker_dir: str) -> dict:
    """Idempotent by its marker files: each delivery records itself; the first one hangs."""
    marker = Path(marker_dir)
    attempts = sorted(marker.glob("attempt-*"))
    (marker / f"attempt-{len(attempts) + 1}-{os.getpid()}").touch()
    if not attempts:
        time.sleep(120)  # the test SIGKILLs this worker meanwhile
    return {"pid": os.getpid(), "attempt": len(attempts) + 1}

"""A periodic probe for the HA beat tests: every run is recorded in Redis.

``grid-tasks beat --include tests.ha.probe`` schedules :data:`PROBE` every
``GRID_TASKS_TEST_PROBE_EVERY`` seconds on its own queue; a worker running it
appends ``"<time> <beat identity>"`` to :data:`RUNS_KEY` on the settings' Redis.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import shared_task

PROBE = "tests.ha.probe.tick"
QUEUE = "ha-probe"
RUNS_KEY = "test:ha:probe:runs"
EVERY = float(os.environ.get("GRID_TASKS_TEST_PROBE_EVERY", "0.5"))

BEAT_SCHEDULE = {
    "ha-probe": {"task": PROBE, "schedule": EVERY,
                 "options": {"queue": QUEUE, "shadow": "ha probe"}},
}


@shared_task(name=PROBE, bind=True, ignore_result=True)
def tick(self: Any) -> None:
    """Record when this run happened and which beat sent it."""
    from grid_tasks.settings import app_settings

    sender = getattr(self.request, "grid_beat", None) or "?"
    client = redis.Redis.from_url(app_settings(self.app).redis_url)
    try:
        client.rpush(RUNS_KEY, f"{time.time():.6f} {sender}")
    finally:
        client.close()


def runs(client: redis.Redis) -> list[tuple[float, str]]:
    """Every recorded run as (time, beat identity)."""
    out = []
    for raw in client.lrange(RUNS_KEY, 0, -1):
        at, sender = raw.decode().split(" ", 1)
        out.append((float(at), sender))
    return out

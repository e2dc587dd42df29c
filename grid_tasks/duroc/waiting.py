"""Waiting for a coallocated job's end on events instead of polling SQL.

Every change of a coallocated job's SQL state (released, DONE, FAILED) is announced
on its pub/sub channel once committed; a waiter also listens to the channels of its
subjobs' GRAM jobs (their ends settle the job's fate).  Each event triggers one
fresh look; with no event at all, a look every ``safety_s`` seconds still notices
what no event announced (a lost announcement: they are fire and forget).
"""

from __future__ import annotations

import time
from typing import Any

from redis.exceptions import RedisError

from grid_tasks.events import channel as gram_channel
from grid_tasks.gram.errors import WaitTimeoutError

COALLOC_CHANNEL = "grid_tasks:duroc:coalloc:{}:events"


def announce(client: Any, job_id: int, state: str) -> None:
    """Tell the job's waiters its SQL state changed (fire and forget: they look anyway)."""
    try:
        client.publish(COALLOC_CHANNEL.format(job_id), state)
    except (RedisError, OSError):
        pass


def wait_for_end(coallocator: Any, job_id: int, timeout: float | None,
                 safety_s: float = 1.0) -> Any:
    """Block until the job is DONE or FAILED; its final CoallocStatus.

    WaitTimeoutError (carrying the last status) after ``timeout`` seconds.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    pubsub = coallocator.services.redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(COALLOC_CHANNEL.format(job_id))
    watched: set[int] = set()
    try:
        while True:
            status = coallocator.subjob_states(job_id)  # a pure read
            if status.terminal:
                return status
            fresh = {s.gram_job for s in status.subjobs if s.gram_job is not None} - watched
            if fresh:  # subscribe, then look again: an end may precede the subscription
                pubsub.subscribe(*[gram_channel(g) for g in sorted(fresh)])
                watched |= fresh
                continue
            left = safety_s if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError(f"coallocated job {status.id} still "
                                       f"{status.state.value} after {timeout:g} s", status)
            if pubsub.get_message(timeout=min(left, safety_s)) is not None:
                while pubsub.get_message(timeout=0) is not None:
                    pass  # one look answers every event queued so far
    finally:
        pubsub.close()

"""A scheduler process loads the idle queues of the RMs it iterates before its first task.

Maui holds its job table in memory from one iteration to the next, and so does a
scheduler process here (:mod:`~grid_tasks.scheduling.idle_queue`: each RM's queue
image and the core's facts about it).  A new process - a restart, a failover, an RM's
own ``grid-tasks worker --iterations`` - would build them in its first iteration:
with 100,000 idle jobs that iteration took seconds where the next ones take a
fraction of one.  So as a worker that consumes iteration queues starts, before it
takes any task, it loads each of those RMs as its first iteration would and runs the
core once in memory (the ranking's columns, the verdicts): nothing is written, and a
failure only leaves that RM to be loaded by its first iteration (logged).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from celery.signals import celeryd_after_setup
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from grid_tasks.db import session_scope
from grid_tasks.errors import GridTasksError
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.queues import ITERATION_PREFIX
from grid_tasks.scheduling.runner import slurm_scheduled
from grid_tasks.scheduling.state import load_scheduler
from grid_tasks.services import Services, services_for

log = logging.getLogger(__name__)


def warm_queues(services: Services, rms: Iterable[str]) -> dict[str, float]:
    """Load each RM's idle queue and the core's facts about it, as its first iteration
    would, and run the core once in memory; the seconds each took (an RM that could
    not be loaded is left out, logged)."""
    registry = NodeRegistry(services.redis, services.settings.heartbeat_ttl)
    took = {}
    for rm in rms:
        if slurm_scheduled(services, rm):
            continue  # Slurm keeps its own queue: nothing of it is kept here
        began = time.perf_counter()
        now = services.clock.time()
        try:
            with session_scope(services.sessions) as session:  # reads only
                load_scheduler(session, rm, now=now, registry=registry, kept=True).iterate(now)
        except (GridTasksError, SQLAlchemyError, RedisError) as exc:
            log.warning("warm start: %s left to its first iteration: %s", rm, exc)
            continue
        took[rm] = time.perf_counter() - began
    return took


def iterated_rms(queue_names: Iterable[str]) -> list[str]:
    """The RMs whose iteration queues (``iterate.<rm>``) are among ``queue_names``."""
    prefix = f"{ITERATION_PREFIX}."
    return sorted(name[len(prefix):] for name in queue_names if name.startswith(prefix))


def _at_worker_setup(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """``celeryd_after_setup``: the worker's queues are known, it consumes nothing yet."""
    app = getattr(instance, "app", None)
    if app is None or getattr(app, "grid_settings", None) is None:
        return
    rms = iterated_rms(app.amqp.queues.consume_from or ())
    if not rms:
        return
    took = warm_queues(services_for(app), rms)
    if took:
        log.info("warm start: %s", ", ".join(f"{rm} {s:.2f} s" for rm, s in took.items()))


celeryd_after_setup.connect(_at_worker_setup, weak=False, dispatch_uid="grid_tasks.warm_start")

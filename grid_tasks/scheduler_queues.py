"""Which RMs' iteration queues a worker consumes, kept in step with the topology.

Every RM's iterations and node watch travel on a queue of its own
(:func:`~grid_tasks.queues.iteration_queue`).  A worker of the shared ``scheduler``
queue (``grid-tasks worker --scheduler``, or a plain ``celery -A grid_tasks.celery_app
worker``) also consumes the iteration queue of every RM the topology does not mark
``scheduler = "own"``; an RM so marked is served by its own ``grid-tasks worker
--iterations RM`` (``grid-tasks up`` starts one per RM so marked).

Nothing sent is dropped, but a message can wait for a consumer:

* a topology file changed under a running grid (an RM added) - the workers look at
  the file every :data:`RECHECK_S` seconds and start consuming the new RM's queue, so
  its first iterations wait that long at most;
* an RM newly marked ``own`` stays served here too until these workers restart:
  dropping its queue before its own worker runs would leave it unserved;
* an RM marked ``own`` whose ``--iterations`` worker is not running: its iterations
  wait in its queue (Redis keeps them; the trigger's queued marker lets one more
  through every 10 s) until that worker starts.  The shared workers log, at start,
  which RMs they leave to a worker of their own.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from celery import Celery, bootsteps

from grid_tasks.errors import GridTasksError
from grid_tasks.queues import SCHEDULER_QUEUE, iteration_queue
from grid_tasks.settings import app_settings
from grid_tasks.topology import GridTopology, SchedulerPlacement, load_topology

log = logging.getLogger(__name__)

#: Seconds between two looks at the topology file's modification time.
RECHECK_S = 5.0


def shared_iteration_queues(topology: GridTopology) -> list[str]:
    """The iteration queues the shared scheduler workers consume: every RM's not
    marked ``scheduler = "own"``."""
    return [iteration_queue(rm) for rm in topology.iterations(SchedulerPlacement.SHARED)]


def own_iteration_rms(topology: GridTopology) -> list[str]:
    """The RMs whose iterations run in a worker of their own."""
    return topology.iterations(SchedulerPlacement.OWN)


def serves_scheduler_queue(app: Celery) -> bool:
    """Whether a worker of ``app`` consumes the shared scheduler queue (no ``-Q``: the
    default queue, which is it)."""
    queues = app.amqp.queues
    return queues._consume_from is None or SCHEDULER_QUEUE in queues.consume_from


class TopologyWatch:
    """The topology file as last read; :meth:`changed` reads it again when its
    modification time moved (None while unreadable: logged, nothing changes)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.stamp: float | None = None

    def changed(self) -> GridTopology | None:
        """The topology if the file changed since the last call, else None."""
        try:
            stamp = os.stat(self.path).st_mtime
        except OSError:
            return None
        if stamp == self.stamp:
            return None
        self.stamp = stamp
        try:
            return load_topology(self.path)
        except GridTasksError as exc:
            log.warning("topology %s unreadable; iteration queues unchanged: %s",
                        self.path, exc)
            return None


def follow_topology(consumer: Any, watch: TopologyWatch) -> list[str]:
    """Start consuming the iteration queue of each shared RM the topology gained since
    ``watch`` last looked; the queues added (on the consumer's own thread: its timer)."""
    topology = watch.changed()
    if topology is None:
        return []
    added = []
    for name in shared_iteration_queues(topology):
        if not consumer.task_consumer.consuming_from(name):
            log.warning("topology changed: now serving %s", name)
            consumer.add_task_queue(name)
            added.append(name)
    return added


class IterationQueuesStep(bootsteps.StartStopStep):
    """Worker bootstep: a shared scheduler worker also consumes the shared RMs'
    iteration queues (from the start, and those of RMs added to the topology later)."""

    label = "grid iteration queues"
    # after the steps that narrow a worker without -Q to its node or gatekeeper queue:
    # only then does "no -Q" mean the default (scheduler) queue
    requires = ("grid_tasks.node.daemon:NodeDaemonStep", "grid_tasks.node.harness:HarnessStep")

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.watch: TopologyWatch | None = None
        if not serves_scheduler_queue(worker.app):
            return
        self.watch = TopologyWatch(app_settings(worker.app).topology_file)
        topology = self.watch.changed()
        if topology is None:
            log.warning("no topology at %s: iteration queues follow once it can be read",
                        self.watch.path)
            return
        queues = worker.app.amqp.queues
        for name in shared_iteration_queues(topology):
            # queues[name]: declared as -Q and the senders' routes declare it (its own
            # direct exchange), not bound to the default exchange as a bare name would be
            queues.select_add(queues[name])
        own = own_iteration_rms(topology)
        if own:
            log.info("iterations of %s left to their own workers (grid-tasks worker "
                     "--iterations RM); unserved until those run", ", ".join(own))


class IterationQueuesFollow(bootsteps.StartStopStep):
    """Consumer bootstep: every :data:`RECHECK_S` seconds, start consuming the iteration
    queue of each RM the topology gained (never stop one: see the module doc)."""

    label = "grid iteration queues follow"
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None

    def start(self, consumer: Any) -> None:
        step = next((s for s in consumer.controller.steps
                     if isinstance(s, IterationQueuesStep)), None)
        if step is None or step.watch is None:
            return
        watch = step.watch
        self.tref = consumer.timer.call_repeatedly(
            RECHECK_S, lambda: follow_topology(consumer, watch))

    def stop(self, consumer: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    shutdown = stop


def install(app: Celery) -> None:
    """Add both steps to ``app``'s workers (inert in a worker not serving ``scheduler``)."""
    app.steps["worker"].add(IterationQueuesStep)
    app.steps["consumer"].add(IterationQueuesFollow)

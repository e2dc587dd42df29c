"""Worker heaps kept out of the garbage collector's full passes (a worker bootstep that
``grid-tasks worker`` installs; in-process test workers and clients are left alone).

A worker holds Celery, kombu, SQLAlchemy, the Maui core and every grid_tasks module:
about 100,000 tracked objects that live as long as the process.  Each full (oldest
generation) collection walked all of them: 50-95 ms with the interpreter stopped,
in the middle of whatever task was running.  bench_duroc saw it as the start of one
coallocated job in twelve delayed by that much (the gatekeeper's Maui iteration).

So a worker, once started, imports the modules its tasks import on first use, collects
once and moves everything then alive to the permanent generation (``gc.freeze``);
after its first :data:`REFREEZE_AFTER_TASKS` tasks, when the caches those built
(compiled statements, connection pools, the idle queue) stand, it does so once more.
Collections then walk only what tasks create; true garbage is still collected (only
objects alive at the two freezes are exempt, and a collection runs first).
"""

from __future__ import annotations

import gc
import importlib
import logging
import threading
from typing import Any

from celery import Celery, bootsteps
from celery.signals import task_postrun

log = logging.getLogger(__name__)

#: What the tasks of some role import lazily (inside functions), so that the startup
#: freeze finds them in memory already.
PRELOAD = (
    "grid_tasks.client",
    "grid_tasks.duroc.control",
    "grid_tasks.duroc.store",
    "grid_tasks.gram.jobmanager",
    "grid_tasks.gram.report_sender",
    "grid_tasks.gram.report_writer",
    "grid_tasks.gram.submission",
    "grid_tasks.scheduling.iteration",
    "grid_tasks.scheduling.state",
    "grid_tasks.scheduling.idle_queue",
    "grid_tasks.scheduling.grid_reservations",
    "grid_tasks.schedmods",
)
#: Tasks after which the heap is frozen a second time (once per process).
REFREEZE_AFTER_TASKS = 50

_state = {"tasks": -1}  # -1: not a worker that froze its heap (clients, tests)
_lock = threading.Lock()


def freeze_heap(preload: tuple[str, ...] = PRELOAD) -> int:
    """Import ``preload``, collect, freeze; how many objects are frozen now."""
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # an optional part missing: its tasks fail anyway
            log.warning("heap freeze: %s not preloaded: %s", name, exc)
    from sqlalchemy.orm import configure_mappers

    configure_mappers()  # mapper set-up, else done (and left unfrozen) on first query
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _after_task(**_: Any) -> None:
    with _lock:
        if _state["tasks"] < 0 or _state["tasks"] > REFREEZE_AFTER_TASKS:
            return
        _state["tasks"] += 1
        if _state["tasks"] <= REFREEZE_AFTER_TASKS:
            return
    frozen = freeze_heap(())
    log.info("heap frozen again after %d tasks: %d objects", REFREEZE_AFTER_TASKS, frozen)


class FrozenHeapStep(bootsteps.StartStopStep):
    """Worker bootstep: freeze the started worker's heap (see the module doc)."""

    label = "frozen heap"

    def start(self, worker: Any) -> None:
        frozen = freeze_heap()
        with _lock:
            _state["tasks"] = 0
        log.info("heap frozen at start: %d objects out of full collections", frozen)


def install(app: Celery) -> None:
    """Add the frozen-heap bootstep to ``app``'s workers."""
    app.steps["worker"].add(FrozenHeapStep)
    task_postrun.connect(_after_task, weak=False, dispatch_uid="grid_tasks.node.heap")

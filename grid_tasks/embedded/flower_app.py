"""The Celery app Flower runs with (``celery -A grid_tasks.embedded.flower_app flower``):
the grid's own app, and every queue of the topology on Flower's broker page.

Flower's broker page lists the queues its workers said they consume (``inspect
active_queues``), asked once when Flower starts and again only on a workers refresh;
with no answer at all it falls back to the app's default queue.  Started beside the
workers (``grid-tasks up --flower``, compose), it listed ``scheduler`` alone, and a
worker still starting then would stay missing.  Here the queues of the topology are
declared (``task_queues``, in Flower's app only: a worker consumes every declared
queue it is not told otherwise) and always listed beside the workers' own.
"""

from __future__ import annotations

from typing import Any

from flower.views import BaseHandler
from kombu import Exchange, Queue

from grid_tasks.celery_app import app
from grid_tasks.errors import GridTasksError
from grid_tasks.queues import SCHEDULER_QUEUE, gatekeeper_queue, iteration_queue, node_queue
from grid_tasks.settings import app_settings
from grid_tasks.topology import GridTopology, load_topology

__all__ = ["app", "topology_queues"]


def topology_queues(topology: GridTopology) -> list[str]:
    """Every queue of ``topology``'s grid: the scheduler's, each RM's iterations' and
    gatekeeper's, and each node daemon's."""
    return [SCHEDULER_QUEUE, *(iteration_queue(rm) for rm in topology.rms),
            *(gatekeeper_queue(rm) for rm in topology.rms),
            *(node_queue(n.rm, n.name) for n in topology.iter_nodes())]


def _declared() -> list[str]:
    """The queues of the grid's topology; the scheduler's alone if it is unreadable
    (Flower still starts: the page then shows what the workers say)."""
    try:
        return topology_queues(load_topology(app_settings(app).topology_file))
    except GridTasksError:
        return [SCHEDULER_QUEUE]


def _with_declared_queues(handler: Any) -> list[str]:
    """Flower's queue names for its broker page: the workers' and the declared ones."""
    return sorted(set(_workers_queue_names(handler)) | set(QUEUES))


QUEUES: list[str] = _declared()
# as Celery declares a queue it meets in a route: a task Flower sends still gets there
app.conf.task_queues = [Queue(name, Exchange(name), routing_key=name) for name in QUEUES]
_workers_queue_names = BaseHandler.get_active_queue_names
BaseHandler.get_active_queue_names = _with_declared_queues  # type: ignore[method-assign]

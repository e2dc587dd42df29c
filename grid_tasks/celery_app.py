"""The one Celery application of grid_tasks, its queues and routes.

Queues:

* ``scheduler`` (:data:`SCHEDULER_QUEUE`) - Maui iterations, brokers, DUROC chord
  bodies and Celery's own ``celery.accumulate`` / ``celery.chord_unlock``;
* ``iterate.<rm>`` (:func:`iteration_queue`) - one resource manager's Maui iterations
  and node watch: the shared scheduler workers consume those of every RM not marked
  ``scheduler = "own"`` in the topology, an RM's own ``--iterations`` worker its own;
* ``gram.<rm>`` (:func:`gatekeeper_queue`) - the GRAM gatekeeper of one resource manager;
* ``node.<rm>.<node>`` (:func:`node_queue`) - one node daemon.

Routing is by task name and, for node and gatekeeper tasks, by the ``rm`` and
``node`` keyword arguments (see :class:`GridRouter`), so callers write
``task.apply_async(kwargs={"rm": "rmA", "node": "node1", ...})`` and never spell a queue.

Task modules are listed per role (:func:`task_modules`): a node daemon imports only
its own, light ones; gatekeepers and the scheduler import them all.  Tasks that launch
processes must be idempotent and declared with ``**LAUNCH_CRITICAL`` (acks late,
rejected on worker loss): with the broker transport options below, a task whose worker
dies comes back within about ``visibility_timeout + 5`` seconds.

Run a worker with ``celery -A grid_tasks.celery_app worker`` (settings from
``GRID_TASKS_*``) or, better, ``grid-tasks worker``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import kombu
from celery import Celery
from celery.app.amqp import AMQP
from celery.signals import beat_init, worker_init
from celery.worker.request import Request

from grid_tasks.errors import ConfigError, ConnectivityError, GridTasksError
from grid_tasks.node import daemon, harness
from grid_tasks.node.worker_config import node_worker_config
# re-exported: callers know the queue names as the app's
from grid_tasks.queues import (  # noqa: F401
    HOUSEKEEPING_TASKS,
    ITERATION_TASKS,
    SCHEDULER_QUEUE,
    QueueNameError,
    gatekeeper_queue,
    iteration_queue,
    node_queue,
    readable,
)
from grid_tasks import scheduler_queues
from grid_tasks.security.config import is_tls_url
from grid_tasks.security.connections import check_redis
from grid_tasks.security.inspection import on_daemon_start
from grid_tasks.security.signing import GridTask, setup_signing, signing_config
from grid_tasks.settings import Settings, app_settings
from grid_tasks.topology import load_topology

log = logging.getLogger(__name__)

#: Task options for launch-critical tasks: ``@app.task(**LAUNCH_CRITICAL)``.
LAUNCH_CRITICAL: dict[str, Any] = {"acks_late": True, "reject_on_worker_lost": True}

# Seconds between kombu's scans for unacked messages whose visibility timeout
# passed.  kombu's default (10 s x throttle 10) would leave a lost task lost for
# ~100 s; this brings it back within visibility_timeout + 5 s.
UNACKED_RESTORE_INTERVAL = 5


def restore_interval(visibility_timeout: float) -> int:
    """Scan period for lost tasks: 5 s, or less for (test-sized) short visibility timeouts."""
    return max(1, min(UNACKED_RESTORE_INTERVAL, int(visibility_timeout // 2)))


#: Task events a housekeeping task still sends (see :class:`QuietRequest`).
LOUD_EVENTS: frozenset[str] = frozenset({"task-failed", "task-retried"})


class QuietRequest(Request):
    """A housekeeping task's request in the worker: silent in Flower unless it fails.

    Celery's per-task ``send_events = False`` silences every event of a task, its
    failures too; this request keeps those.  A failure is announced with the
    ``task-received`` it skipped first, so Flower shows the failed task by its name.
    """

    def send_event(self, type: str, **fields: Any) -> None:
        eventer = self._eventer
        if type not in LOUD_EVENTS or not (eventer and eventer.enabled):
            return
        eventer.send("task-received", uuid=self.id, name=self.name, args=self.argsrepr,
                     kwargs=self.kwargsrepr, root_id=self.root_id, parent_id=self.parent_id)
        eventer.send(type, uuid=self.id, **fields)


#: Task options of housekeeping tasks (:data:`grid_tasks.queues.HOUSEKEEPING_TASKS`):
#: ``@shared_task(**HOUSEKEEPING)``.  ``send_events`` off also stops the worker's
#: ``task-received``, sent before any request method runs.
HOUSEKEEPING: dict[str, Any] = {"send_events": False,
                                "Request": "grid_tasks.celery_app:QuietRequest"}

#: Tasks outside ``grid_tasks.gram`` that run at a resource manager's gatekeeper
#: (routed to ``gram.<rm>`` by their ``rm`` keyword argument).
GATEKEEPER_TASKS: frozenset[str] = frozenset({
    "grid_tasks.duroc.tasks.watch_subjob", "grid_tasks.duroc.tasks.submit_subjob",
    "grid_tasks.reservation_tasks.set_reservation",
    "grid_tasks.reservation_tasks.release_reservations"})


class GridRouter:
    """Routes tasks by module and by their ``rm``/``node`` keyword arguments.

    * ``grid_tasks.node.*`` and any task given both ``rm`` and ``node`` -> node queue;
    * ``grid_tasks.gram.*`` given ``rm`` -> gatekeeper queue;
    * an RM's iteration and node watch (:data:`ITERATION_TASKS`) -> its iteration queue,
      whoever sends them (triggers, beat, the lock watch): no sender spells the queue;
    * Celery's chord helpers and everything else -> scheduler queue.
    """

    def __call__(self, name: str, args: Any, kwargs: Any, options: Any,
                 task: Any = None, **_: Any) -> dict[str, str] | None:
        kwargs = kwargs or {}
        rm, node = kwargs.get("rm"), kwargs.get("node")
        if name.startswith("grid_tasks.node.") and rm and node:
            return {"queue": node_queue(rm, node)}
        if name in ITERATION_TASKS and rm:
            return {"queue": iteration_queue(rm)}
        if (name.startswith("grid_tasks.gram.") or name in GATEKEEPER_TASKS) and rm:
            if node and kwargs.get("on_node", False):
                return {"queue": node_queue(rm, node)}
            return {"queue": gatekeeper_queue(rm)}
        return None  # falls through to task_routes, then the default queue


TASK_ROUTES: list[Any] = [
    GridRouter(),
    {
        "celery.accumulate": {"queue": SCHEDULER_QUEUE},
        "celery.chord_unlock": {"queue": SCHEDULER_QUEUE},
        "celery.backend_cleanup": {"queue": SCHEDULER_QUEUE},
        "grid_tasks.*": {"queue": SCHEDULER_QUEUE},
    },
]


#: What a node daemon runs: launches and node checks.  It holds no database
#: credentials, so these never load SQLAlchemy (nor lark): a daemon starts quickly.
NODE_TASK_MODULES: tuple[str, ...] = ("grid_tasks.gram.tasks", "grid_tasks.node.tasks")
#: What gatekeepers and the scheduler run besides: the doors (GRAM, DUROC,
#: reservations), the recording of node reports, the iterations, the RM side of the
#: metascheduler protocol.
SERVICE_TASK_MODULES: tuple[str, ...] = (
    "grid_tasks.scheduling.rm_tasks", "grid_tasks.duroc.tasks", "grid_tasks.gram.gatekeeper",
    "grid_tasks.gram.report_tasks", "grid_tasks.reservation_tasks",
    "grid_tasks.scheduling.tasks")


def task_modules(*, node_only: bool = False) -> list[str]:
    """The task modules a worker imports: a node daemon's alone (``node_only``), or
    every one (gatekeepers, the scheduler, a ``celery -A`` worker)."""
    return sorted(NODE_TASK_MODULES if node_only else NODE_TASK_MODULES + SERVICE_TASK_MODULES)


#: Periodic per-RM tasks: task name -> seconds between runs.  Beat sends each one
#: for every resource manager of the topology, with ``kwargs={"rm": <name>}``.
PERIODIC: dict[str, float] = {}


def register_periodic(task_name: str, every: float) -> None:
    """Have beat run ``task_name`` every ``every`` seconds for each resource manager.

    Call it at import time of the task module (e.g. the Maui iteration per RM).
    """
    if every <= 0:
        raise GridTasksError(f"periodic task {task_name!r}: interval must be positive")
    PERIODIC[task_name] = float(every)


def beat_schedule(topology: Any) -> dict[str, dict[str, Any]]:
    """Beat entries: every :data:`PERIODIC` task once per resource manager."""
    entries: dict[str, dict[str, Any]] = {}
    for task_name, every in sorted(PERIODIC.items()):
        verb = task_name.rsplit(".", 1)[-1].replace("_", " ")
        for rm in topology.rms:
            entries[f"{task_name}[{rm}]"] = {
                "task": task_name, "schedule": every, "kwargs": {"rm": rm},
                "options": {**readable(verb, rm=rm), "expires": every},
            }
    return entries


def _install_beat_schedule(sender: Any = None, **_: Any) -> None:
    """At beat start (task modules imported by then), add the per-RM entries."""
    settings = app_settings(sender.app)
    try:
        topology = load_topology(settings.topology_file)
    except GridTasksError as exc:
        log.error("beat: no per-RM schedule: %s", exc)
        return
    sender.scheduler.update_from_dict(beat_schedule(topology))


def security_config(settings: Settings) -> dict[str, Any]:
    """Signing (``auth`` serializer) and ``rediss://`` TLS options for ``settings``."""
    conf = signing_config(settings.signing)
    if is_tls_url(settings.broker_url):
        conf["broker_use_ssl"] = settings.redis_tls.redis_kwargs()
    if is_tls_url(settings.result_backend):
        conf["redis_backend_use_ssl"] = settings.redis_tls.redis_kwargs()
    return conf


#: Redis broker options.  Sockets never block for ever: without a timeout a consumer whose
#: event loop reads a BRPOP reply that never comes (a half-open connection, or a
#: readiness event left over from a dropped socket) waits in ``recv`` for good: it
#: stops consuming and cannot even be shut down (kombu's own BRPOP health check runs
#: on that same, blocked loop).  With one, the read fails after 10 s (BRPOP replies
#: within 1 s), which is a connection error: the consumer reconnects.
REDIS_TRANSPORT_OPTIONS: dict[str, Any] = {
    "socket_timeout": 10.0,
    "socket_connect_timeout": 5.0,
    "socket_keepalive": True,
    # One list per queue, not kombu's four (priority steps 0, 3, 6, 9).  No message
    # here carries a priority, and every BRPOP names every consumed queue at every
    # step: a scale harness consuming 500 node queues sent 2,000 keys per BRPOP, and
    # those BRPOPs were the largest part of Redis's CPU at 1,000 nodes.  A priority a
    # sender does give lands in the same list (kombu rounds it down to step 0), so
    # nothing is stranded; consumers without this option still read that list.
    "priority_steps": [0],
}


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery configuration for ``settings`` (a plain dict, easy to inspect in tests)."""
    transport = {
        "visibility_timeout": max(1, int(settings.visibility_timeout)),
        "unacked_restore_interval": restore_interval(settings.visibility_timeout),
        "unacked_restore_throttle": 1,
    }
    if settings.broker_url.startswith(("redis://", "rediss://", "unix://")):
        transport.update(REDIS_TRANSPORT_OPTIONS)
    conf = {
        "broker_url": settings.broker_url,
        "result_backend": settings.result_backend,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_default_queue": SCHEDULER_QUEUE,
        "task_routes": TASK_ROUTES,
        "task_acks_late": False,  # opt in per task with LAUNCH_CRITICAL
        "task_reject_on_worker_lost": False,
        "task_track_started": True,
        "task_send_sent_event": True,
        "worker_send_task_events": True,
        "worker_prefetch_multiplier": 1,  # one reserved launch at a time per slot
        "broker_transport_options": transport,
        "result_backend_transport_options": {"visibility_timeout": transport["visibility_timeout"]},
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": 3,
        # Survive a Redis restart: Celery's reconnect path crashes kombu's Redis
        # transport when deliveries are unacknowledged (see grid_tasks.node.consumer).
        "worker_consumer": "grid_tasks.node.consumer:ResilientConsumer",
        "result_expires": 24 * 3600,
        "enable_utc": True,
        "timezone": "UTC",
        "worker_hijack_root_logger": False,
    }
    conf.update(security_config(settings))
    return conf


class ReadableAMQP(AMQP):
    """Task-sent events name a task by its shadow, as the worker's events do, and
    housekeeping tasks send none.

    Celery puts the plain task name in the client's ``task-sent`` event, and Flower
    lets that event overwrite the readable name whenever it arrives after the
    worker's ``task-received``: "grid_tasks.node.tasks.node_check" instead of
    "check node on rmA/node1", depending on timing.  ``task_send_sent_event`` is
    global; a beat's iterations would each still show in Flower as a task SENT.
    """

    def as_task_v2(self, task_id: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        message = super().as_task_v2(task_id, name, *args, **kwargs)
        if name in HOUSEKEEPING_TASKS:
            return message._replace(sent_event=None)
        shadow = message.headers.get("shadow")
        if shadow and message.sent_event is not None:
            message.sent_event["name"] = shadow
        return message


def create_app(settings: Settings | None = None, *, main: str = "grid_tasks",
               defer_security: bool = False) -> Celery:
    """A configured Celery app for ``settings`` (default: from the environment).

    Signing that cannot start (no key yet) raises :class:`ConfigError`; with
    ``defer_security`` (the module-level app, imported by every ``celery -A``
    command and by Flower) the app is made anyway but fails closed: it cannot
    sign, accepts only signed messages, and a worker started from it exits
    with the error.
    """
    settings = settings or Settings.from_env()
    app = Celery(main, set_as_current=False, amqp=ReadableAMQP, task_cls=GridTask)
    conf = celery_config(settings)
    app.conf.update(conf)
    app.grid_settings = settings  # type: ignore[attr-defined]
    node_only = _serves_only_a_node(app)
    app.conf.update(include=task_modules(node_only=node_only))
    if node_only and settings.lean_nodes:  # cheap when idle: see grid_tasks.node.worker_config
        rm, node = daemon.node_identity(app)  # a harness names no single node
        app.conf.update(node_worker_config(conf, rm or "harness", node or f"{os.getpid()}"))
    try:
        setup_signing(app, settings.signing)  # process-wide: refuses unsigned messages
    except ConfigError as exc:
        if not defer_security:
            raise
        _refuse_to_work(app, exc)
    daemon.install(app)  # node daemon lifecycle (registration, heartbeats)
    harness.install(app)  # the scale harness's (inert unless asked for)
    scheduler_queues.install(app)  # shared RMs' iteration queues (inert off `scheduler`)
    return app


beat_init.connect(_install_beat_schedule, weak=False, dispatch_uid="grid_tasks.beat_schedule")
# Every worker and beat of the grid: jobs of the same uid must not read their secrets
# from /proc (see grid_tasks.security.inspection).
worker_init.connect(on_daemon_start, weak=False, dispatch_uid="grid_tasks.no_inspection")
beat_init.connect(on_daemon_start, weak=False, dispatch_uid="grid_tasks.no_inspection_beat")

def _serves_only_a_node(app: Celery) -> bool:
    """Whether this process is a node daemon (``grid-tasks worker --rm RM --node NODE``
    names its node in the environment before making the app; one that also serves the
    scheduler queue includes every module itself)."""
    rm, node = daemon.node_identity(app)
    # the variable's presence only: a malformed one is reported by the worker, not here
    return bool(rm and node or app.conf.get("grid_tasks_harness")
                or os.environ.get(harness.ENV_HARNESS))


def _refuse_to_work(app: Celery, exc: ConfigError) -> None:
    """A worker or beat started from ``app`` stops at once with ``exc``."""
    def stop(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            log.critical("%s", exc)
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(1)  # celery's signal dispatch swallows plain exceptions

    worker_init.connect(stop, weak=False)
    beat_init.connect(stop, weak=False)


app: Celery = create_app(defer_security=True)
app.set_current()


def check_connectivity(settings: Settings, timeout: float = 3.0) -> None:
    """Fail fast with a one-line :class:`ConnectivityError` if broker or Redis is unreachable."""
    ssl_opts = settings.redis_tls.redis_kwargs() if is_tls_url(settings.broker_url) else False
    conn = kombu.Connection(settings.broker_url, connect_timeout=timeout, ssl=ssl_opts)
    try:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=timeout)
    except Exception as exc:  # kombu raises transport-specific errors
        raise ConnectivityError(f"cannot reach the broker at {conn.as_uri()}: "
                                f"{_first_line(exc)}") from None
    finally:
        conn.release()
    check_redis(settings, settings.redis_url, timeout)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]

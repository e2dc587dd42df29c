"""The node daemon: a worker bootstep that registers a node and heartbeats.

A worker is a node daemon when it knows its identity: the app setting
``grid_tasks_node = (rm, node)`` (tests, embedded use) or the environment
variables ``GRID_TASKS_RM`` and ``GRID_TASKS_NODE`` (``grid-tasks worker`` sets
them; plain ``celery -A grid_tasks.celery_app worker`` reads them too).  It then
consumes its node queue, registers its resources (as configured in the
topology; a node the topology lacks is refused before anything is registered) and refreshes a heartbeat key with a TTL from a
thread.  A worker with only ``GRID_TASKS_RM`` is that RM's gatekeeper.  It also
starts its watchdog process (:mod:`grid_tasks.node.watchdog`), which kills the jobs of
a daemon that stopped renewing their leases (frozen, or cut off from Redis).

A node daemon holds no database credentials: its durable registration is a
``record_node`` message to its RM's gatekeeper, which records it in SQL
(:mod:`grid_tasks.gram.report_tasks`), as it records the job managers' reports.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Any

from celery import Celery, bootsteps
from celery.worker import state as worker_state

from grid_tasks.effects import send_registration, trigger_iteration
from grid_tasks.errors import GridTasksError
from grid_tasks.leases import renew_bound
from grid_tasks.node.event_loop import wake_only_when_due
from grid_tasks.node.quiet_beat import QuietBeat, answer_due
from grid_tasks.node.registry import NodeRegistry, heartbeat_payload
from grid_tasks.node.resources import detect_resources, host_facts
from grid_tasks.node.watchdog import close_watchdogs, watchdog_for
from grid_tasks.node.worker_config import HUB_WAIT_S, LEAN_FLAG
from grid_tasks.queues import gatekeeper_queue, node_queue
from grid_tasks.security.startup import check_node_account
from grid_tasks.settings import Settings, app_settings
from grid_tasks.topology import load_topology

log = logging.getLogger(__name__)

ENV_RM = "GRID_TASKS_RM"
ENV_NODE = "GRID_TASKS_NODE"
#: sysexits.h: a configuration error (what systemd and supervisors report as such)
EX_CONFIG = 78


def node_identity(app: Celery, environ: Any = None) -> tuple[str | None, str | None]:
    """``(rm, node)`` this worker serves; either may be None."""
    configured = app.conf.get("grid_tasks_node")
    if configured:
        rm, node = configured
        return rm, node
    env = os.environ if environ is None else environ
    return env.get(ENV_RM) or None, env.get(ENV_NODE) or None


def node_resources(settings: Settings, rm: str, node: str) -> tuple[dict[str, Any], str]:
    """The node's resources and their source: ``configured`` (topology) or ``detected``."""
    try:
        return load_topology(settings.topology_file).node(rm, node).resources(), "configured"
    except GridTasksError as exc:
        log.warning("node %s/%s: %s; registering detected resources", rm, node, exc)
        return detect_resources(settings.state_dir if settings.state_dir.exists() else "/"), \
            "detected"


def refuse_unknown_node(settings: Settings, rm: str, node: str) -> None:
    """End a worker that would serve a node the topology does not have, before it
    registers anything (a plain ``celery worker`` with a mistyped ``GRID_TASKS_NODE``
    would otherwise log "ready" and leave a phantom node Down in every listing).

    Exits with ``EX_CONFIG`` (78), the reason in the log."""
    try:
        load_topology(settings.topology_file).node(rm, node)
    except GridTasksError as exc:
        reason = (f"node daemon {rm}/{node} refused to start: {exc} "
                  f"(topology {settings.topology_file}; set GRID_TASKS_RM/GRID_TASKS_NODE "
                  "to a node it lists, or GRID_TASKS_TOPOLOGY to the grid's topology)")
        log.critical("%s", reason)  # on stderr also before logging is set up
        raise SystemExit(EX_CONFIG) from None


class Heartbeat(threading.Thread):
    """Refreshes the node's heartbeat key every interval until stopped.

    With ``quiet`` (a lean daemon's :class:`~grid_tasks.node.quiet_beat.QuietBeat`),
    most beats are sent unanswered and :func:`~grid_tasks.node.quiet_beat.answer_due`
    picks the ones that are answered; without it every beat is."""

    def __init__(self, registry: NodeRegistry, rm: str, node: str, interval: float,
                 on_first: Any = None, on_revived: Any = None,
                 quiet: QuietBeat | None = None) -> None:
        super().__init__(name=f"heartbeat {rm}/{node}", daemon=True)
        self.registry, self.rm, self.node, self.interval = registry, rm, node, interval
        self.on_first = on_first
        self.on_revived = on_revived  # called when a beat finds the node had turned Unknown
        self.quiet = quiet
        self.stopped = threading.Event()
        self._sent = self._since_answered = 0  # beats that went out; since the last answer
        self._last_ok = False  # the previous beat went out without error
        self._last_at: float | None = None  # monotonic time it went out

    def run(self) -> None:
        if self.on_first is not None:
            # Its own thread: the first SQL record (imports, a busy database) must never
            # delay the beats past the TTL, or a starting node would flicker Unknown.
            threading.Thread(target=self._safely, args=(self.on_first,), daemon=True,
                             name=f"registration {self.rm}/{self.node}").start()
        due = time.monotonic()
        while True:
            # Beats keep to a fixed schedule: a slow beat does not push the next one later.
            due = max(due + self.interval, time.monotonic())
            if self.stopped.wait(due - time.monotonic()):
                return
            self._safely(self.heartbeat)

    def heartbeat(self) -> None:
        """One beat; ``active`` (tasks executing) lets the listing tell Idle from Running."""
        now, active, at = time.time(), len(worker_state.active_requests), time.monotonic()
        last_ok, self._last_ok = self._last_ok, False  # until this one went out
        quiet = self._quiet_turn(last_ok, at)
        if quiet is not None:
            quiet.send(heartbeat_payload(now, active), now)
            self._since_answered += 1
        else:
            revived = self.registry.heartbeat(self.rm, self.node, now, active=active)
            self._since_answered = 0
            if revived and self.on_revived is not None:
                log.warning("node %s/%s: heartbeat had expired (node was Unknown); back",
                            self.rm, self.node)
                self.on_revived()
        self._sent += 1
        self._last_ok, self._last_at = True, at

    def _quiet_turn(self, last_ok: bool, at: float) -> QuietBeat | None:
        """The quiet beat to send this beat with, or None: this one is answered."""
        if self.quiet is None:
            return None
        gap = None if self._last_at is None else at - self._last_at
        if answer_due(self._sent, self._since_answered, last_ok, gap,
                      self.registry.ttl_ms / 1000) or not self.quiet.supported():
            return None
        return self.quiet

    def _safely(self, action: Any) -> None:
        try:
            action()
        except Exception as exc:  # keep beating: a Redis blip must not kill the daemon
            first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            log.warning("node %s/%s: %s failed: %s", self.rm, self.node,
                        getattr(getattr(action, "func", action), "__name__", "heartbeat"), first)

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=self.interval + 1)


class NodeDaemonStep(bootsteps.StartStopStep):
    """Worker bootstep: node queue, registration, heartbeat thread, goodbye."""

    label = "grid node daemon"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.rm, self.node = node_identity(worker.app)
        self.heartbeat: Heartbeat | None = None
        queues = worker.app.amqp.queues
        if self.rm and self.node:
            refuse_unknown_node(app_settings(worker.app), self.rm, self.node)
            wanted = node_queue(self.rm, self.node)
        elif self.rm:
            wanted = gatekeeper_queue(self.rm)
        else:
            return
        # Without -Q a worker would consume the default (scheduler) queue too.
        if queues._consume_from is None:  # no public "was -Q given" accessor
            queues.select([wanted])
        else:
            queues.select_add(wanted)

    def start(self, worker: Any) -> None:
        if not (self.rm and self.node):
            return
        settings = app_settings(worker.app)
        # also for a plain `celery worker` (grid-tasks worker checked before starting)
        check_node_account(settings.gridmap_file, settings.single_user)
        registry = NodeRegistry.for_daemon(worker.app, settings)  # shared with job managers
        rm, node = self.rm, self.node
        resources, source = node_resources(settings, rm, node)
        registry.register(rm, node, resources, host_facts(), source, time.time())
        # started now, once: no launch waits for it (its job managers report to it)
        watchdog_for(renew_bound(settings))
        changed = functools.partial(node_changed, worker.app, registry.client, rm, node)

        def first() -> None:
            try:
                send_registration(worker.app, rm, node, resources, time.time())
            finally:  # the gatekeeper triggers the iteration again once it recorded it
                changed("registered")

        lean = bool(worker.app.conf.get(LEAN_FLAG))
        if lean and getattr(worker, "hub", None) is not None:
            wake_only_when_due(worker.hub, HUB_WAIT_S)
        self.heartbeat = Heartbeat(registry, rm, node, settings.heartbeat_interval,
                                   on_first=first,
                                   on_revived=functools.partial(changed, "back"),
                                   quiet=registry.quiet_beat(rm, node) if lean else None)
        self.heartbeat.start()
        log.info("node %s/%s registered (%s resources)", rm, node, source)

    def stop(self, worker: Any) -> None:
        if self.heartbeat is None:
            return
        close_watchdogs()  # what still runs dies with the daemon (as by PDEATHSIG)
        hb, self.heartbeat = self.heartbeat, None
        hb.stop()
        try:
            hb.registry.mark_down(hb.rm, hb.node, time.time())
        except GridTasksError as exc:
            log.warning("node %s/%s: could not say goodbye: %s", hb.rm, hb.node, exc)
            return
        node_changed(worker.app, hb.registry.client, hb.rm, hb.node, "down")

    # warm (stop), cold (terminate) and final (shutdown) exits all say goodbye once
    shutdown = terminate = stop


def node_changed(app: Celery, client: Any, rm: str, node: str, what: str) -> bool:
    """A node registered, went Down or came back: the RM's iteration runs at once
    (``client``: the daemon's Redis, its registry's).

    Never raises (a daemon must keep beating); returns whether a trigger went out.
    """
    try:
        trigger_iteration(app, rm, client=client)
    except Exception as exc:  # broker or Redis away: beat's next iteration catches up
        log.warning("node %s/%s %s: iteration not triggered: %s", rm, node, what, exc)
        return False
    log.info("node %s/%s %s: iteration of %s triggered", rm, node, what, rm)
    return True


def install(app: Celery) -> None:
    """Add the node daemon bootstep to ``app``'s workers."""
    app.steps["worker"].add(NodeDaemonStep)

"""The Maui iteration task: one per resource manager, locked, triggers folded.

Beat fires it every ``RMPOLLINTERVAL`` of each RM's maui.cfg (per-RM entries are
installed at beat start, over the foundation's default interval); events fire
it through :func:`grid_tasks.scheduling.trigger_iteration`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from celery import shared_task
from celery.signals import beat_init

from grid_tasks.celery_app import readable, register_periodic
from grid_tasks.scheduling import ITERATE, dirty_key, lock_key, queued_key, redis_client, trigger_iteration

log = logging.getLogger(__name__)

#: Default period when an RM's maui.cfg cannot be read (Maui's RMPOLLINTERVAL default).
DEFAULT_POLL_S = 30.0
#: The lock outlives a hung iteration by at most this long (seconds).
LOCK_TTL_MS = 60_000
#: Immediate re-runs after an iteration lost a race on a job row (optimistic locking).
CONFLICT_RERUNS = 3
#: One task runs at most this many iterations, or this long, before handing a pending
#: trigger to a fresh task: a steady stream of triggers must neither hold one worker
#: thread forever (a worker could not shut down) nor outlive the lock's TTL.
MAX_RUNS_PER_TASK = 20
MAX_TASK_S = 10.0

register_periodic(ITERATE, DEFAULT_POLL_S)

# KEYS: queued, lock, dirty.  ARGV: token, lock TTL (ms).  Takes the lock (1), clearing
# the pending trigger it runs for; else (0) marks one pending, so the holder runs again.
# One round trip, and EVAL: a registered script would ask SCRIPT EXISTS first.
_ACQUIRE = """
redis.call('DEL', KEYS[1])
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  redis.call('DEL', KEYS[3])
  return 1
end
redis.call('SET', KEYS[3], 1)
return 0
"""

# KEYS: lock, dirty.  Releases our lock; returns 1 if a trigger is pending.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return redis.call('EXISTS', KEYS[2])
"""


@shared_task(name=ITERATE, bind=True, ignore_result=True)
def iterate(self: Any, *, rm: str) -> int:
    """Run ``rm``'s iteration until no trigger is pending; returns how many ran."""
    return iterate_here(self.app, rm)


def iterate_here(app: Any, rm: str, events: Sequence[Any] = (), *, quick: bool = False) -> int:
    """Run ``rm``'s iteration in this process now, exactly as the iterate task does:
    under the RM's lock, until no trigger is pending; returns how many ran (0: another
    process holds the lock, and it runs once more for this call).

    A gatekeeper that has just stored a job calls this instead of triggering: the
    job's start then does not wait for a task to travel to a scheduler worker.
    ``events`` (committed job state changes, e.g. that job's PENDING) are published
    first, in the lock's round trip.  ``quick``: the first run is the quick pass
    (see :func:`~grid_tasks.scheduling.iteration.run_iteration`); runs for triggers
    that came in meanwhile are full ones."""
    from grid_tasks.events import publish

    client = redis_client(app)
    token = uuid.uuid4().hex
    pipe = client.pipeline(transaction=False)
    for event in events:
        publish(pipe, event)
    pipe.eval(_ACQUIRE, 3, queued_key(rm), lock_key(rm), dirty_key(rm), token, LOCK_TTL_MS)
    if not pipe.execute()[-1]:
        return 0  # the holder runs once more for us
    runs, busy, dirty, conflicts = 0, False, True, 0
    began = time.monotonic()
    try:
        while dirty:
            if runs >= MAX_RUNS_PER_TASK or time.monotonic() - began > MAX_TASK_S:
                client.set(dirty_key(rm), 1)  # the release below re-triggers for it
                break
            runs += 1
            busy, conflicted = _one(app, rm, client, quick=quick and runs == 1)
            conflicts += conflicted
            # a lost race on a job row is retried at once, not left to the next trigger
            dirty = bool(client.getdel(dirty_key(rm))) or (
                conflicted and conflicts <= CONFLICT_RERUNS)
    finally:
        # release and look for a trigger that slipped in after the last GETDEL, atomically
        dirty = bool(client.register_script(_RELEASE)(keys=[lock_key(rm), dirty_key(rm)],
                                                      args=[token]))
    if dirty:
        trigger_iteration(app, rm, client=client)
    elif busy:
        _watch(app, rm, client)
    return runs


def _one(app: Any, rm: str, client: Any, *, quick: bool = False) -> tuple[bool, bool]:
    """One iteration: (busy, lost a race on a job row)."""
    from grid_tasks.db import get_engine, session_factory
    from grid_tasks.db.engine import write_priority
    from grid_tasks.db.errors import ConcurrentUpdateError
    from grid_tasks.node.daemon import app_settings
    from grid_tasks.node.registry import NodeRegistry
    from grid_tasks.scheduling.iteration import run_iteration

    settings = app_settings(app)
    registry = NodeRegistry(client, settings.heartbeat_ttl)  # same Redis, no new connection
    sessions = session_factory(get_engine(settings.database_url))
    began = time.monotonic()
    try:
        with write_priority():  # every job's progress waits on this iteration's commit
            report = run_iteration(app, rm, sessions=sessions, redis=client, registry=registry,
                                   quick=quick)
    except ConcurrentUpdateError as exc:
        log.warning("iteration of %s lost a race, running again: %s", rm, exc)
        return True, True
    except Exception:
        log.exception("iteration of %s failed", rm)
        return True, False
    finally:
        _record(client, rm, time.monotonic() - began)
    return report.busy, False


def _record(client: Any, rm: str, elapsed: float) -> None:
    """The iteration's duration into the metrics histogram; metrics never stop scheduling."""
    from grid_tasks.metrics.iteration import record_iteration

    try:
        record_iteration(client, rm, elapsed)
    except Exception as exc:  # Redis hiccup: the next iteration records again
        log.warning("iteration duration of %s not recorded: %s", rm, exc)


def _watch(app: Any, rm: str, client: Any) -> None:
    """While jobs run, look again after one lease TTL, so a lost job manager is noticed
    without waiting for beat."""
    from grid_tasks.gram.report import lease_timing
    from grid_tasks.node.daemon import app_settings

    _, ttl = lease_timing(app_settings(app))
    if client.set(f"{queued_key(rm)}:watch", 1, nx=True, px=int(ttl * 1000)):
        app.send_task(ITERATE, kwargs={"rm": rm}, countdown=ttl, ignore_result=True,
                      **readable("iterate", rm=rm, why="watch"))


WATCH_NODES = "grid_tasks.scheduling.tasks.watch_nodes"


@shared_task(name=WATCH_NODES, bind=True, ignore_result=True)
def watch_nodes(self: Any, *, rm: str) -> list[str]:
    """Trigger ``rm``'s iteration when one of its nodes changed state, above all when a
    silent node's heartbeat expired (Unknown): beat runs it every heartbeat TTL."""
    from grid_tasks.node.daemon import app_settings
    from grid_tasks.node.registry import NodeRegistry
    from grid_tasks.scheduling.nodes import watch_nodes as watch

    client = redis_client(self.app)
    changes = watch(self.app, rm, NodeRegistry(client, app_settings(self.app).heartbeat_ttl))
    return [f"{c.node}: {c.before} -> {c.after}" for c in changes]


def _per_rm_schedule(sender: Any = None, **_: Any) -> None:
    """At beat start: each RM's iteration every RMPOLLINTERVAL of its own maui.cfg, and
    its node watch every heartbeat TTL (a silent node turns Unknown by TTL expiry)."""
    from grid_tasks.errors import GridTasksError
    from grid_tasks.node.daemon import app_settings
    from grid_tasks.topology import load_topology

    settings = app_settings(sender.app)
    try:
        topology = load_topology(settings.topology_file)
    except GridTasksError as exc:
        log.error("beat: no per-RM iteration schedule: %s", exc)
        return
    entries = {}
    for name, spec in topology.rms.items():
        every = poll_interval(spec.policy_file)
        entries[f"{ITERATE}[{name}]"] = {
            "task": ITERATE, "schedule": every, "kwargs": {"rm": name},
            "options": {**readable("iterate", rm=name), "expires": every}}
        ttl = float(settings.heartbeat_ttl)
        entries[f"{WATCH_NODES}[{name}]"] = {
            "task": WATCH_NODES, "schedule": ttl, "kwargs": {"rm": name},
            "options": {**readable("watch nodes", rm=name), "expires": ttl}}
    sender.scheduler.update_from_dict(entries)


def poll_interval(policy_file: Any) -> float:
    """RMPOLLINTERVAL of a maui.cfg in seconds (default 30 when unreadable or unset)."""
    if not policy_file:
        return DEFAULT_POLL_S
    from grid_tasks.errors import GridTasksError
    from grid_tasks.maui.cfg import load_maui_config

    try:
        value = float(load_maui_config(policy_file).get("RMPOLLINTERVAL"))
    except (GridTasksError, OSError, TypeError, ValueError) as exc:
        log.warning("RMPOLLINTERVAL of %s unreadable (%s); using %g s", policy_file, exc,
                    DEFAULT_POLL_S)
        return DEFAULT_POLL_S
    return value if value > 0 else DEFAULT_POLL_S


beat_init.connect(_per_rm_schedule, weak=False, dispatch_uid="grid_tasks.scheduling.per_rm")


PING = "grid_tasks.scheduling.tasks.ping"


@shared_task(name=PING)
def ping() -> str:
    """A no-op on the scheduler queue: the bare round trip the GRAM benchmark compares to."""
    return "pong"

"""Running a resource manager's iterations: one at a time per RM, triggers folded.

* the caller takes a non-blocking Redis lock (one iteration per RM at a time; short
  TTL, renewed while the holder lives: :mod:`grid_tasks.scheduling.lock`) and
  runs while ``GETDEL dirty`` returns a value, so triggers arriving during a run
  fold into ONE more run; after releasing it re-triggers if a flag slipped in
  (:func:`grid_tasks.effects.trigger_iteration` sets the flag);
* the iteration task runs this, and so does a gatekeeper that has just stored a job
  (:func:`iterate_here` with ``quick``): the job's start then waits for no task to
  travel to a scheduler worker;
* on the shared scheduler workers a costly RM's full iterations are spaced while other
  RMs' iterations wait (:mod:`grid_tasks.scheduling.spacing`): the held-off iteration
  is sent for the end of its rest, its trigger left pending, never dropped.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from grid_tasks.db.engine import write_priority
from grid_tasks.db.errors import ConcurrentUpdateError
from grid_tasks.effects import (KEY_PREFIX, QUEUED_TTL_S, dirty_key, lock_key, queued_key,
                                send_iteration, trigger_iteration)
from grid_tasks.errors import StorageUnavailable
from grid_tasks.events import publish
from grid_tasks.gram.report import lease_timing
from grid_tasks.metrics.iteration import record_iteration
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.scheduling.iteration import run_iteration
from grid_tasks.scheduling.lock import (ACQUIRE, LOCK_TTL_MS, RELEASE, TAKEN, LockKeeper,
                                         watch_key)
from grid_tasks.scheduling.rm_kinds import topology_of
from grid_tasks.scheduling.spacing import CostlySpacing, LastIteration
from grid_tasks.services import Services, per_process
from grid_tasks.topology import RMKind, SchedulerPlacement

log = logging.getLogger(__name__)

#: Immediate re-runs after an iteration lost a race on a job row (optimistic locking).
CONFLICT_RERUNS = 3
#: One task runs at most this many iterations, or this long, before handing a pending
#: trigger to a fresh task: a steady stream of triggers must neither hold one worker
#: thread forever (a worker could not shut down) nor hang on to the lock.
MAX_RUNS_PER_TASK = 20
MAX_TASK_S = 10.0
#: How long an RM's last full iteration figures are kept (its cost, for the spacing).
COST_TTL_S = 3600


def cost_key(rm: str) -> str:
    """The RM's last full iteration (:class:`LastIteration`), written by this module."""
    return f"{KEY_PREFIX}:{rm}:cost"


def iterate_here(services: Services, rm: str, events: Sequence[Any] = (), *,
                 quick: bool = False) -> int:
    """Run ``rm``'s iteration in this process now, under the RM's lock, until no
    trigger is pending; returns how many ran (0: another process holds the lock, and
    it runs once more for this call; or ``rm`` is a Slurm cluster, which schedules
    its jobs itself: :mod:`grid_tasks.scheduling.slurm_jobs`).

    ``events`` (committed job state changes, e.g. a just-stored job's PENDING) are
    published first, in the lock's round trip.  ``quick``: the first run is the quick
    pass (see :func:`~grid_tasks.scheduling.iteration.run_iteration`); runs for
    triggers that came in meanwhile are full ones."""
    client = services.redis
    if slurm_scheduled(services, rm):
        for event in events:
            publish(client, event)
        return 0
    token = uuid.uuid4().hex
    pipe = client.pipeline(transaction=False)
    for event in events:
        publish(pipe, event)
    lock = lock_key(rm)
    pipe.eval(ACQUIRE, 4, queued_key(rm), lock, dirty_key(rm), watch_key(lock), token,
              LOCK_TTL_MS)
    taken = pipe.execute()[-1]
    if taken != TAKEN:
        if taken < 0:  # look again when the lock lapses, in case its holder is dead
            send_iteration(services.app, rm, why="lock watch", countdown=-taken / 1000 + 0.05)
        return 0  # the holder runs once more for us
    keeper = lock_keeper(services)
    keeper.hold(lock, token)
    try:
        runs, busy, rest = _while_triggered(services, rm, quick)
    finally:
        keeper.drop(lock)
        # release and look for a trigger that slipped in after the last GETDEL, atomically
        dirty = bool(client.eval(RELEASE, 2, lock, dirty_key(rm), token))
    if rest > 0:
        _defer(services, rm, rest)
    elif dirty:
        trigger_iteration(services.app, rm, client=client)
    elif busy:
        _watch(services, rm)
    return runs


def _while_triggered(services: Services, rm: str, quick: bool) -> tuple[int, bool, float]:
    """Under the lock: run while a trigger is pending; (runs, busy, rest), ``rest`` > 0
    when the spacing holds the next full iteration off that long (its trigger pending)."""
    client = services.redis
    runs, busy, dirty, conflicts = 0, False, True, 0
    began = time.monotonic()
    while dirty:
        if runs >= MAX_RUNS_PER_TASK or time.monotonic() - began > MAX_TASK_S:
            client.set(dirty_key(rm), 1)  # the release re-triggers for it
            break
        full = not (quick and runs == 0)
        rest = _rest(services, rm) if full else 0.0
        if rest > 0:
            client.set(dirty_key(rm), 1)  # left pending for the iteration sent for later
            return runs, busy, rest
        runs += 1
        busy, conflicted = _one(services, rm, quick=not full)
        conflicts += conflicted
        # a lost race on a job row is retried at once, not left to the next trigger
        dirty = bool(client.getdel(dirty_key(rm))) or (
            conflicted and conflicts <= CONFLICT_RERUNS)
    return runs, busy, 0.0


def spacing(services: Services) -> CostlySpacing:
    """This process's spacing policy, chosen once."""
    return per_process(services.app, "iteration spacing", CostlySpacing)


def _rest(services: Services, rm: str) -> float:
    """Seconds ``rm``'s next full iteration rests: its last one's cost, and whether
    another RM of the shared workers has an iteration queued (one round trip)."""
    topology = topology_of(services.settings.topology_file)
    spec = topology.rms.get(rm) if topology is not None else None
    if spec is None or spec.scheduler is SchedulerPlacement.OWN:
        return 0.0  # a worker of its own: it holds up no other RM
    others = [queued_key(o) for o in topology.iterations(SchedulerPlacement.SHARED)
              if o != rm]
    if not others:
        return 0.0
    pipe = services.redis.pipeline(transaction=False)
    pipe.get(cost_key(rm))
    pipe.exists(*others)
    raw, waiting = pipe.execute()
    return spacing(services).rest(LastIteration.decode(raw), others_waiting=waiting > 0,
                                  now=services.clock.time())


def _defer(services: Services, rm: str, rest: float) -> None:
    """Send the held-off iteration for the end of its rest, unless one is queued already
    (it comes, takes the lock and runs or rests again): the trigger is never dropped.
    Meanwhile the queued marker folds new triggers into it."""
    ttl_ms = int((rest + QUEUED_TTL_S) * 1000)
    if services.redis.set(queued_key(rm), 1, nx=True, px=ttl_ms):
        send_iteration(services.app, rm, why="spacing", countdown=rest)


def slurm_scheduled(services: Services, rm: str) -> bool:
    """Whether ``rm`` is a Slurm cluster (its topology ``kind``): Slurm schedules it."""
    topology = topology_of(services.settings.topology_file)
    spec = topology.rms.get(rm) if topology is not None else None
    return spec is not None and spec.kind is RMKind.SLURM


def lock_keeper(services: Services) -> LockKeeper:
    """This process's keeper of iteration locks (one renewal thread)."""
    return per_process(services.app, "iteration lock keeper",
                       lambda: LockKeeper(services.redis))


def _one(services: Services, rm: str, *, quick: bool = False) -> tuple[bool, bool]:
    """One iteration: (busy, lost a race on a job row)."""
    client = services.redis
    registry = NodeRegistry(client, services.settings.heartbeat_ttl)  # no new connection
    began = time.monotonic()
    try:
        with write_priority():  # every job's progress waits on this iteration's commit
            report = run_iteration(services.app, rm, sessions=services.sessions, redis=client,
                                   registry=registry, now=services.clock.time(), quick=quick,
                                   settings=services.settings)
    except ConcurrentUpdateError as exc:
        log.warning("iteration of %s lost a race, running again: %s", rm, exc)
        return True, True
    except StorageUnavailable as exc:  # an outage: one line a run, not a traceback
        log.warning("iteration of %s waits for the database: %s", rm, exc)
        return True, False
    except Exception:
        log.exception("iteration of %s failed", rm)
        return True, False
    finally:
        elapsed = time.monotonic() - began
        _record(client, rm, elapsed, None if quick else services.clock.time())
    return report.busy, False


def _record(client: Any, rm: str, elapsed: float, ended: float | None) -> None:
    """The iteration's duration into the metrics histogram and, for a full one (``ended``
    given), as the RM's cost; metrics never stop scheduling."""
    try:
        record_iteration(client, rm, elapsed)
        if ended is not None:
            client.set(cost_key(rm), LastIteration(elapsed, ended).encode(), ex=COST_TTL_S)
    except Exception as exc:  # Redis hiccup: the next iteration records again
        log.warning("iteration duration of %s not recorded: %s", rm, exc)


def _watch(services: Services, rm: str) -> None:
    """While jobs run, look again after one lease TTL, so a lost job manager is noticed
    without waiting for beat."""
    _, ttl = lease_timing(services.settings)
    if services.redis.set(f"{queued_key(rm)}:watch", 1, nx=True, px=int(ttl * 1000)):
        send_iteration(services.app, rm, why="watch", countdown=ttl)

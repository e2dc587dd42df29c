"""Fencing a lost or unconfirmed launch: at most one copy of a part, no overcommit.

When recovery gives up on a launch (a job manager's lease expired, or the launch was
never confirmed) some of its processes may still run: on a node whose daemon is frozen
or cut off from Redis, or on the job's other nodes, whose job managers are alive.
Deleting the launch token used to be the signal to stop - but a job manager reads a
missing token as "Redis restarted", and a frozen daemon reads nothing at all.  So:

1. :func:`fence` writes a tombstone over the launch token (``keys.fenced``): live job
   managers of that launch read it within a lease interval and kill their processes;
   a job manager that cannot read it has, by then, not renewed its lease for the
   renewal bound, and it (or its daemon's watchdog process, if the daemon is frozen)
   kills them itself (:mod:`grid_tasks.gram.jobmanager`, :mod:`grid_tasks.node.watchdog`);
2. the launch's allocation is held in SQL (a ``fences`` row) until the fence deadline,
   the first sight of the loss plus :func:`grid_tasks.leases.fence_span`; the
   iteration counts it as busy (:func:`hold_in`), and a job that goes back to the
   queue waits on a ``fence`` hold until then (:func:`release_due`).

Compare HTCondor's job leases (a starter that cannot renew its lease kills its job)
and Slurm killing a job's processes on a node that comes back from DOWN.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select

from grid_tasks.db.models import Fence
from grid_tasks.db.models import Job as JobRow
from grid_tasks.errors import GridTasksError
from grid_tasks.gram import keys
from grid_tasks.maui import Job, Scheduler
from grid_tasks.scheduling.job_rows import epoch
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.utc import from_epoch

log = logging.getLogger(__name__)

#: The hold a fenced job waits on until its fence deadline.
FENCE_HOLD = "fence"

_DUE = select(Fence).where(Fence.rm == bindparam("rm"), Fence.deadline <= bindparam("now")) \
    .order_by(Fence.id)
_ACTIVE = select(Fence.id, Fence.nodes, Fence.mem_per_task, Fence.seen_at, Fence.deadline) \
    .where(Fence.rm == bindparam("rm"), Fence.deadline > bindparam("now")).order_by(Fence.id)


def fence(session: Any, row: JobRow, redis: Any, now: datetime, span: float, reason: str,
          requeue: bool) -> Fence:
    """Fence ``row``'s current launch: tombstone its token, hold its allocation until
    ``now + span``; ``requeue``: the job (still PENDING) waits on the fence hold."""
    redis.set(keys.token_key(row.id), keys.fenced(row.launch_token), ex=keys.TOKEN_TTL_S)
    memory = (row.request or {}).get("min_memory_mb")
    held = Fence(job_id=row.id, rm=row.rm, token=row.launch_token,
                 nodes={k: int(v) for k, v in (row.nodes_allocated or {}).items()},
                 mem_per_task=int(memory or 0), reason=reason, seen_at=now,
                 deadline=now + timedelta(seconds=span), requeue=requeue)
    session.add(held)
    if requeue:
        hold(row)
    log.warning("job %s fenced until %s: %s", row.id, held.deadline.isoformat(), reason)
    return held


def hold(row: JobRow) -> None:
    """The job forgets its allocation and waits on the fence hold (not in the queue)."""
    row.maui_state = MauiJobState.HOLD
    row.holds = sorted(set(row.holds or ()) | {FENCE_HOLD})
    row.nodes_allocated = {}
    row.launch_token = None


def release_due(session: Any, rm: str, now: datetime) -> list[int]:
    """Drop the fences of ``rm`` whose deadline has passed; a job waiting on one goes
    back to Idle (no deferral: a lost node is not the job's fault).  The job ids."""
    released = []
    for held in session.scalars(_DUE, {"rm": rm, "now": now}):
        row = session.get(JobRow, held.job_id)
        if row is not None and held.requeue and row.state is JobState.PENDING \
                and FENCE_HOLD in (row.holds or ()):
            row.holds = [h for h in row.holds if h != FENCE_HOLD]
            if row.maui_state is MauiJobState.HOLD and not row.holds:
                row.maui_state = MauiJobState.IDLE
            released.append(row.id)
        session.delete(held)
    if released:
        session.flush()
    return released


def hold_in(sched: Scheduler, session: Any, rm: str, now: float) -> int:
    """Count every unexpired fence of ``rm`` as a running job in ``sched`` until its
    deadline (the iteration's free-resource view); how many."""
    count = 0
    for fid, nodes, memory, seen, deadline in session.connection().execute(
            _ACTIVE, {"rm": rm, "now": from_epoch(now)}):
        if not nodes:
            continue
        start, end = epoch(seen) or now, epoch(deadline) or now
        job = Job(id=f"fence.{fid}", tasks=sum(int(v) for v in nodes.values()),
                  walltime=max(1.0, end - start), mem_per_task=int(memory or 0))
        try:
            sched.restore_running(job, start, {k: int(v) for k, v in nodes.items()}, now)
            count += 1
        except GridTasksError as exc:  # a node gone from the topology: nothing left to hold
            log.warning("rm %s: fence %s not held: %s", rm, fid, exc)
    return count


def next_deadline(session: Any, rm: str, now: datetime) -> datetime | None:
    """The earliest unexpired fence deadline of ``rm`` (its iteration is due then)."""
    return min((row[-1] for row in session.connection().execute(
        _ACTIVE, {"rm": rm, "now": now})), default=None)

"""An RM's plan from a kept digest, and the digest of a plan: the half of the plan cache
(:mod:`grid_tasks.ops.plan_cache`) that needs the Maui core, imported only when a plan
is made or replayed."""

from __future__ import annotations

from array import array
from datetime import datetime
from operator import attrgetter
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import Job as JobRow
from grid_tasks.maui import ACL, Reservation, Start
from grid_tasks.maui import Job as CoreJob
from grid_tasks.maui.model import ReservationKind
from grid_tasks.scheduling.job_rows import COLUMNS, core_job
from grid_tasks.scheduling.plan import Plan, load_plan, load_scheduler
from grid_tasks.utc import epoch

from .plan_digest import PlanDigest, Ranked

__all__ = ["digest_of", "load_plan", "ranked_of", "replay"]

_ID, _SUBMIT = attrgetter("id"), attrgetter("submit_time")


def digest_of(plan: Plan, mark: str, flagged: frozenset[int] | None = None) -> PlanDigest:
    """The digest of a full plan (one made by :func:`load_plan` with its iteration, and
    its scores or breakdowns); ``flagged``: its queued jobs with a hold or a dependency
    (:attr:`Ranked.flagged`), read under the same mark."""
    started = {int(k): dict(s.allocation) for k, s in plan.started.items() if k.isdigit()}
    reserved = {int(r.job_id): (r.start, r.end, dict(r.allocation))
                for r in plan.scheduler.reservations()
                if r.kind is ReservationKind.JOB and r.job_id and r.job_id.isdigit()}
    ranked = ranked_of(plan)
    ranked.flagged = flagged
    return PlanDigest(plan.rm, plan.t, mark, ranked, started, reserved)


def ranked_of(plan: Plan) -> Ranked:
    """The plan's idle jobs with their priorities in showq's order (priority down, then
    submission, unknown last, then id), sorted column-wise: a Python sort of 100,000
    tuples, and the tuples, cost a deep queue's plan a quarter of a second."""
    if plan.scores is not None:
        jobs, totals = list(plan.idle.values()), np.asarray(plan.scores, dtype=float)
    else:
        rows = plan.priorities or []
        jobs = [plan.idle[p.job_id] for p in rows]
        totals = np.fromiter((p.total for p in rows), float, len(rows))
    ids, submit = _ids_of(jobs), _submitted(jobs)
    keep = ids >= 0  # (the core's own probes are never queued; GRAM jobs only)
    ids, totals, submit = ids[keep], totals[keep], submit[keep]
    order = np.lexsort((ids, submit, -totals))
    cols = (array("q"), array("d"), array("d"))
    for col, values in zip(cols, (ids, totals, submit)):
        col.frombytes(np.ascontiguousarray(values[order]).tobytes())
    return Ranked(*cols)


def _ids_of(jobs: list[CoreJob]) -> np.ndarray:
    """Each job's GRAM id, -1 for an id that is not one (a C-speed conversion first: a
    test per job cost a 100,000-job plan 0.1 s, and queued ids are all numbers)."""
    names = list(map(_ID, jobs))
    if all(map(str.isdigit, names)):
        return np.fromiter(map(int, names), np.int64, len(names))
    return np.fromiter((int(i) if i.isdigit() else -1 for i in names), np.int64, len(names))


def _submitted(jobs: list[CoreJob]) -> np.ndarray:
    """Each job's submission time, infinite when unknown (0 or None: showq lists those
    last)."""
    times = list(map(_SUBMIT, jobs))
    if None in times:
        times = [t or np.inf for t in times]
    submit = np.asarray(times, dtype=float)
    submit[submit == 0] = np.inf
    return submit


def replay(session: Session, digest: PlanDigest, now: datetime, registry: Any = None) -> Plan:
    """A plan rebuilt from ``digest``: the scheduler without its idle queue, the digest's
    starts restored as running from the plan's instant and its job reservations placed."""
    sched = load_scheduler(session, digest.rm, now, registry, idle=False)
    t = epoch(now)
    if sched.pool is not None and digest.reserved:
        sched._leave_pool(t)  # noqa: SLF001 - job reservations live in the general engine
    wanted = list(digest.started) + list(digest.reserved)
    rows = {int(r.id): r for r in session.connection().execute(
        select(*COLUMNS).where(JobRow.id.in_(wanted)))} if wanted else {}
    for job_id, alloc in digest.started.items():
        if job_id in rows:
            sched.restore_running(core_job(rows[job_id]), min(digest.made, t), alloc, t)
    for job_id, (start, end, alloc) in digest.reserved.items():
        if job_id not in rows:
            continue
        job = core_job(rows[job_id])
        res = Reservation(name=f"job.{job.id}", start=start, end=end,
                          acl=ACL(jobs=frozenset({job.id})), tasks=job.tasks,
                          procs_per_task=job.procs_per_task, kind=ReservationKind.JOB,
                          job_id=job.id, allocation=dict(alloc))
        # (the same placement the iteration made: Scheduler._reserve_job)
        sched.job_res[job.id] = sched.engine.place(job, start, job.walltime, dict(alloc),
                                                   running=False, reservation=res)
    started = {str(k): Start(str(k), digest.made, dict(a)) for k, a in digest.started.items()}
    return Plan(digest.rm, now, sched, {}, None, None, started, queued=digest.ranked)

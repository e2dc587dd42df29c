"""A resource manager's plan: its scheduler loaded from SQL and run once in memory.

What ``showstart``, ``showbf`` and ``diagnose`` read (:mod:`grid_tasks.ops`), and what
the RM answers a broker's estimate with (:mod:`grid_tasks.scheduling.rm_service`): the
same core the live iteration runs, so both see running jobs, reservations and the idle
queue's priorities exactly as the RM does.  Nothing is written.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import Any

from sqlalchemy.orm import Session

from grid_tasks.maui import IterationResult, Job, PriorityBreakdown, Scheduler, Start
from grid_tasks.scheduling.state import core_job
from grid_tasks.scheduling.state import load_scheduler as load_live_scheduler
from grid_tasks.utc import epoch

_ID = attrgetter("id")


@dataclass
class Plan:
    """A loaded scheduler after one in-memory iteration at ``now``."""

    rm: str
    now: datetime
    scheduler: Scheduler
    idle: dict[str, Job]  # idle jobs as the core saw them before the iteration
    #: each idle job's ``diagnose -p`` breakdown before the iteration, highest first;
    #: None when the plan was made without (:func:`load_plan`'s ``breakdowns``)
    priorities: list[PriorityBreakdown] | None
    result: IterationResult | None = None
    started: dict[str, Start] = field(default_factory=dict)
    #: a plan replayed from a cached digest (:mod:`grid_tasks.ops.plan_cache`) loads no
    #: idle job: ``idle`` is empty and this holds the ids of the jobs its idle queue
    #: held; None when ``idle`` is the whole queue
    queued: Container[str] | None = None
    #: each idle job's total priority before the iteration, in ``idle``'s order (the
    #: breakdowns' totals, the same floats); None when not asked for
    scores: Sequence[float] | None = None

    def in_queue(self, job_id: str) -> bool:
        """Whether the job waited in the idle queue this plan was made from."""
        return job_id in self.idle if self.queued is None else job_id in self.queued

    @property
    def t(self) -> float:
        """``now`` on the core's time axis (POSIX seconds)."""
        return epoch(self.now)


def load_scheduler(session: Session, rm: str, now: datetime, registry: Any = None, *,
                   idle: bool = True) -> Scheduler:
    """The RM's scheduler with its SQL state (and node liveness from ``registry``);
    NotFoundError naming the known RMs for an unknown one (the loader's first read
    raises it).  ``idle=False``: without its idle queue (only what holds nodes)."""
    return load_live_scheduler(session, rm, now=epoch(now), registry=registry, idle=idle)


def core_view(row: Any) -> Job:
    """The Maui core's view of a SQL job row, exactly as the live loader builds it."""
    return core_job(row)


def load_plan(session: Session, rm: str, now: datetime, *, registry: Any = None,
              iterate: bool = True, breakdowns: bool = True, scores: bool = False) -> Plan:
    """:func:`load_scheduler`, priorities, and (``iterate``) one in-memory iteration.

    ``breakdowns``: note every idle job's ``diagnose -p`` breakdown (what diagnose and
    checkjob show); ``scores``: its total only (:attr:`Plan.scores`: what showq's order
    and a kept plan need, a fraction of the cost at depth).  A broker's estimate wants
    neither."""
    sched = load_scheduler(session, rm, now, registry)
    t = epoch(now)
    jobs, totals = sched.priority_scores(t) if scores else (sched.idle_jobs(), None)
    plan = Plan(rm, now, sched, dict(zip(map(_ID, jobs), jobs)),
                sched.diagnose_priority(t) if breakdowns else None, scores=totals)
    if iterate:
        plan.result = sched.iterate(t)
        plan.started = {s.job_id: s for s in plan.result.started}
    return plan

"""The RM's Maui core loaded from SQL and run once, for the planning commands.

showstart, showbf, diagnose and setres look at the scheduler the way its next
iteration will see it: :func:`load_plan` loads the RM's state with
:func:`grid_tasks.scheduling.state.load_scheduler`, notes each idle job's priority
breakdown, then runs one iteration *in memory* (nothing is written) so that
higher-priority jobs start or hold their reservations before a question is
answered.  The only place this package touches the live loader
(``load_scheduler`` and its ``core_job``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from grid_tasks.maui import IterationResult, Job, PriorityBreakdown, Scheduler, Start

from .common import check_rm, epoch
from .timefmt import OpsError, TimeFormatError, parse_duration

#: Walltime of a showstart request given without one (Maui's default is one hour too).
DEFAULT_WALLTIME = 3600.0


@dataclass
class Plan:
    """A loaded scheduler after one in-memory iteration at ``now``."""

    rm: str
    now: datetime
    scheduler: Scheduler
    idle: dict[str, Job]  # idle jobs as the core saw them before the iteration
    priorities: list[PriorityBreakdown]
    result: IterationResult | None = None
    started: dict[str, Start] = field(default_factory=dict)

    @property
    def t(self) -> float:
        """``now`` on the core's time axis (POSIX seconds)."""
        return epoch(self.now)


def load_scheduler(session: Session, rm: str, now: datetime, registry: Any = None) -> Scheduler:
    """The RM's scheduler with its SQL state (and node liveness from ``registry``)."""
    from grid_tasks.scheduling.state import load_scheduler as _load

    check_rm(session, rm)
    return _load(session, rm, now=epoch(now), registry=registry)


def core_view(row: Any) -> Job:
    """The Maui core's view of a SQL job row, exactly as the live loader builds it."""
    from grid_tasks.scheduling.state import core_job

    return core_job(row)


def load_plan(session: Session, rm: str, now: datetime, *, registry: Any = None,
              iterate: bool = True) -> Plan:
    """:func:`load_scheduler`, priorities, and (``iterate``) one in-memory iteration."""
    sched = load_scheduler(session, rm, now, registry)
    plan = Plan(rm, now, sched, {j.id: j for j in sched.idle_jobs()},
                sched.diagnose_priority(epoch(now)))
    if iterate:
        plan.result = sched.iterate(epoch(now))
        plan.started = {s.job_id: s for s in plan.result.started}
    return plan


def parse_request(text: str, *, option: str = "request") -> Job:
    """A showstart request: ``PROCS@DURATION`` (``4@2:00:00``) or ``PROCS`` alone."""
    procs_text, _, duration = text.partition("@")
    if not procs_text.strip().isdigit() or int(procs_text) < 1:
        raise TimeFormatError(f"{option}: cannot read {text!r} (expected PROCS@DURATION, "
                              f"e.g. 4@2:00:00)")
    walltime = parse_duration(duration, option=option) if duration else DEFAULT_WALLTIME
    if walltime == float("inf"):
        raise TimeFormatError(f"{option}: a request needs a finite duration, got {text!r}")
    return Job(id="showstart", tasks=int(procs_text), walltime=walltime)


def rsl_request(text: str) -> Job:
    """A showstart request from a single-job RSL (count, maxWallTime, minMemory)."""
    from grid_tasks.rsl import lower

    subjobs = lower(text, source="<showstart>")
    if len(subjobs) != 1:
        raise OpsError(f"showstart takes a single-job RSL, got a multi-request of "
                       f"{len(subjobs)} subjobs (ask each RM separately)")
    sub = subjobs[0]
    walltime = sub.max_wall_time_s or sub.max_time_s or DEFAULT_WALLTIME
    return Job(id="showstart", tasks=max(1, sub.count or 1), walltime=float(walltime),
               mem_per_task=int(sub.min_memory_mb or 0))

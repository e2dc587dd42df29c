"""What the planning commands ask about, read from the command line.

showstart, showbf, diagnose and setres look at the scheduler the way its next
iteration will see it: :func:`~grid_tasks.scheduling.plan.load_plan` (re-exported
here) loads the RM's state, notes each idle job's priority breakdown, then runs one
iteration *in memory* (nothing is written) so that higher-priority jobs start or
hold their reservations before a question is answered.  This module reads the
question when it is a ``PROCS@DURATION`` request; a single-job RSL is read by
:mod:`grid_tasks.ops.rsl_request` (the RSL parser: only for such a request).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from grid_tasks.maui import Job, PriorityBreakdown
# re-exported: the operator commands' plan is the RM's own
from grid_tasks.scheduling.plan import Plan, core_view, load_plan, load_scheduler  # noqa: F401

from .timefmt import TimeFormatError, parse_duration

#: Walltime of a showstart request given without one (Maui's default is one hour too).
DEFAULT_WALLTIME = 3600.0


def priorities(session: Session, rm: str, now: datetime, *,
               registry: Any = None) -> list[PriorityBreakdown]:
    """Every idle job of ``rm`` with the priority its scheduler gives it at ``now``,
    highest first: the one source of the priority ``diagnose -p``, ``checkjob`` and
    ``showq`` show (the SQL column is only its SYSTEM part)."""
    return load_plan(session, rm, now, registry=registry, iterate=False).priorities


def priority_of(breakdowns: list[PriorityBreakdown]) -> dict[int, float]:
    """Job id -> total priority of :func:`priorities`' rows (GRAM jobs only)."""
    return {int(p.job_id): p.total for p in breakdowns if p.job_id.isdigit()}


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

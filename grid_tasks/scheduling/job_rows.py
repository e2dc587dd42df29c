"""How the scheduler reads job rows: the columns, their order, and the core's view.

Shared by the live loader (:mod:`grid_tasks.scheduling.state`) and the cached idle
queue (:mod:`grid_tasks.scheduling.idle_queue`), which must see a job exactly alike.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement

from grid_tasks import utc
from grid_tasks.db.models import Job as JobRow
from grid_tasks.maui import Job
from grid_tasks.states import IDLE_MAUI_STATES, JobState, MauiJobState  # noqa: F401 - re-exported

#: Walltime assumed for a job whose RSL gives none (seconds).
DEFAULT_WALLTIME = 3600


def epoch(dt: datetime | None) -> float | None:
    """POSIX seconds of an aware (or naive UTC) datetime; None stays None."""
    return None if dt is None else utc.epoch(dt)


def _name(value: str | None) -> str | None:
    """A credential name, interned: a deep queue's jobs share a few names, and the
    driver hands a new string per row (about 50 bytes a job and credential)."""
    return None if value is None else sys.intern(value)


def core_job(row: Any) -> Job:
    """The Maui view of a job (ORM row or :func:`live_jobs` row): tasks of one
    processor, walltime, credentials, memory per task."""
    if hasattr(row, "min_memory_mb"):
        memory = row.min_memory_mb
    else:
        memory = (row.request or {}).get("min_memory_mb")
    return Job(
        id=str(row.id), tasks=max(1, row.tasks or 1), procs_per_task=1,
        walltime=float(row.walltime or DEFAULT_WALLTIME),
        submit_time=epoch(row.submit_time) or 0.0,
        user=_name(row.user), group=_name(row.group), account=_name(row.account),
        job_class=_name(row.job_class), qos=_name(row.qos), mem_per_task=int(memory or 0),
        holds=frozenset(row.holds or ()), early_start=bool(row.early_start),
    )


#: Columns the scheduler needs, read as plain rows: no RSL text, no ORM objects, and
#: of the request JSON only the memory requirement (decoding whole requests of a
#: thousand idle jobs cost more than the scheduling itself).  Labelled with the job's
#: attribute names where the column's differs: rows read by Core carry column names.
USER, GROUP, CLASS = (JobRow.user.label("user"), JobRow.group.label("group"),
                      JobRow.job_class.label("job_class"))
COLUMNS = (JobRow.id, JobRow.state, JobRow.maui_state, JobRow.tasks, JobRow.walltime,
           JobRow.submit_time, JobRow.start_time, USER, GROUP, JobRow.account,
           CLASS, JobRow.qos, JobRow.holds, JobRow.early_start,
           JobRow.nodes_allocated,
           JobRow.request["min_memory_mb"].as_integer().label("min_memory_mb"))
#: Those an idle job needs (:func:`core_job`): the queue can be long, each column costs.
IDLE_COLUMNS = (JobRow.id, JobRow.tasks, JobRow.walltime, JobRow.submit_time, USER,
                GROUP, JobRow.account, CLASS, JobRow.qos, JobRow.holds,
                JobRow.early_start, COLUMNS[-1])
#: The idle queue's order: priority, then submission.
ORDER = (JobRow.priority.desc(), JobRow.submit_time, JobRow.id)


def holding_nodes(rm: Any) -> ColumnElement[bool]:
    """Rows of ``rm`` that hold nodes: running, or starting.  Spelled as two index
    ranges joined by OR, (rm, ACTIVE) and (rm, PENDING, Starting): with ``rm`` outside
    the OR, SQLite filtered every row of the RM, a deep queue's 100,000 idle ones
    included, in every iteration (three reads of it were most of an unchanged one)."""
    return (((JobRow.rm == rm) & (JobRow.state == JobState.ACTIVE))
            | ((JobRow.rm == rm) & (JobRow.state == JobState.PENDING)
               & (JobRow.maui_state == MauiJobState.STARTING)))

"""``showq``: the queue of one RM (or the whole grid) in Maui's three sections, and the
live coallocated (DUROC) jobs with one line per subjob."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from grid_tasks.db import Job, Node
from grid_tasks.db.models import CoallocatedJob, Subjob
from grid_tasks.duroc.records import CoallocStatus, coalloc_status, store_id
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.errors import GridTasksError
from grid_tasks.states import JobState

from .common import Section, check_rm, finished_ids, section_of, state_word
from .plan import priorities, priority_of
from .timefmt import iso

_LIVE = [s for s in JobState if not s.terminal]


@dataclass(frozen=True)
class QueueRow:
    """One job line of showq."""

    job_id: int
    rm: str | None
    user: str | None
    state: str  # Maui's state word (Running, Idle, Hold, ...)
    gram_state: str
    procs: int
    walltime: float | None  # requested, seconds
    remaining: float | None  # active jobs: walltime left
    start_time: datetime | None
    submit_time: datetime | None
    #: idle jobs: the scheduler's priority (as ``diagnose -p``); None for the others
    priority: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "rm": self.rm, "user": self.user, "state": self.state,
                "gram_state": self.gram_state, "procs": self.procs, "walltime": self.walltime,
                "remaining": self.remaining, "start_time": iso(self.start_time),
                "submit_time": iso(self.submit_time),
                "priority": None if self.priority is None else round(self.priority, 4)}


@dataclass
class Queue:
    """showq's sections and summary counts."""

    rm: str | None
    now: datetime
    active: list[QueueRow] = field(default_factory=list)
    idle: list[QueueRow] = field(default_factory=list)
    blocked: list[QueueRow] = field(default_factory=list)
    procs_total: int = 0
    nodes_total: int = 0
    nodes_active: int = 0
    #: live coallocated jobs (with a subjob at ``rm`` when one is given), by id
    coallocations: list[CoallocStatus] = field(default_factory=list)

    @property
    def procs_active(self) -> int:
        return sum(r.procs for r in self.active)

    @property
    def total_jobs(self) -> int:
        return len(self.active) + len(self.idle) + len(self.blocked)

    def percent(self, part: int, whole: int) -> float:
        return 100.0 * part / whole if whole else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rm": self.rm, "now": iso(self.now),
            "active": [r.to_dict() for r in self.active],
            "idle": [r.to_dict() for r in self.idle],
            "blocked": [r.to_dict() for r in self.blocked],
            "coallocations": [c.to_dict() for c in self.coallocations],
            "summary": {
                "total_jobs": self.total_jobs, "active_jobs": len(self.active),
                "idle_jobs": len(self.idle), "blocked_jobs": len(self.blocked),
                "procs_active": self.procs_active, "procs_total": self.procs_total,
                "procs_percent": round(self.percent(self.procs_active, self.procs_total), 2),
                "nodes_active": self.nodes_active, "nodes_total": self.nodes_total,
                "nodes_percent": round(self.percent(self.nodes_active, self.nodes_total), 2),
                "coallocated_jobs": len(self.coallocations),
            },
        }


def _row(job: Job, section: Section, now: datetime, priority: float | None) -> QueueRow:
    state = state_word(job, section)
    remaining = None
    if section is Section.ACTIVE and job.walltime and job.start_time is not None:
        remaining = job.walltime - (now - job.start_time).total_seconds()
    return QueueRow(job.id, job.rm, job.user, state, JobState(job.state).value, job.procs,
                    float(job.walltime) if job.walltime else None, remaining, job.start_time,
                    job.submit_time, priority)


#: Barrier entries of one coallocated job: subjob address -> the coordination store's
#: ``SubjobInfo`` (``entered``/``size``); empty when unknown (store purged or unreachable).
Entries = Callable[[int], dict[int, Any]]


def barrier_entries(settings: Any) -> Entries:
    """An :data:`Entries` reading the grid's coordination store; every failure to reach
    it (Redis down, job purged) reads as "unknown" so showq still works from SQL."""
    holder: dict[str, Any] = {}

    def entries(job_id: int) -> dict[int, Any]:
        try:
            if "store" not in holder:
                holder["store"] = CoordinationStore.from_settings(settings)
            snap = holder["store"].snapshot(store_id(job_id))
        except (GridTasksError, OSError, ValueError):
            return {}
        return {s.address: s for s in snap.subjobs}
    return entries


def live_coallocations(session: Session, rm: str | None,
                       entries: Entries | None = None) -> list[CoallocStatus]:
    """Coallocated jobs not ended yet (with a subjob at ``rm`` if given), each with its
    subjobs: label, RM, GRAM job, start type, state, barrier entries."""
    stmt = (select(CoallocatedJob).where(CoallocatedJob.state.in_(_LIVE))
            .options(selectinload(CoallocatedJob.subjobs).selectinload(Subjob.gram_job))
            .order_by(CoallocatedJob.id))
    rows = list(session.scalars(stmt))
    if rm is not None:
        rows = [r for r in rows if any(s.rm == rm for s in r.subjobs)]
    return [coalloc_status(r, entries(r.id) if entries else {}) for r in rows]


def build_queue(session: Session, rm: str | None, now: datetime,
                entries: Entries | None = None) -> Queue:
    """The live jobs of ``rm`` (every RM if None) sorted as showq shows them: active by
    remaining time, idle by priority then submission, blocked by submission; and the
    live coallocated jobs with their subjobs (barrier entries from ``entries``, see
    :func:`barrier_entries`; unknown without)."""
    check_rm(session, rm)
    stmt = select(Job).where(Job.state.in_(_LIVE))
    nodes_stmt = select(Node)
    if rm is not None:
        stmt = stmt.where(Job.rm == rm)
        nodes_stmt = nodes_stmt.where(Node.rm == rm)
    jobs = list(session.scalars(stmt.order_by(Job.id)))
    done = finished_ids(session, {d for j in jobs for d in (j.dependencies or [])})
    queue = Queue(rm, now)
    busy: set[str] = set()
    sections = [(job, section_of(job, done)) for job in jobs]
    prio = _idle_priorities(session, {str(j.rm) for j, s in sections if s is Section.IDLE}, now)
    for job, section in sections:
        priority = prio.get(job.id) if section is Section.IDLE else None
        getattr(queue, section.value).append(_row(job, section, now, priority))
        if section is Section.ACTIVE:
            busy.update(job.nodes_allocated or {})
    nodes = list(session.scalars(nodes_stmt))
    queue.procs_total = sum(n.procs for n in nodes)
    queue.nodes_total = len(nodes)
    queue.nodes_active = len(busy & {n.name for n in nodes})
    inf = float("inf")
    queue.active.sort(key=lambda r: (inf if r.remaining is None else r.remaining, r.job_id))
    queue.idle.sort(key=lambda r: (-(r.priority or 0.0), _ts(r.submit_time), r.job_id))
    queue.blocked.sort(key=lambda r: (_ts(r.submit_time), r.job_id))
    queue.coallocations = live_coallocations(session, rm, entries)
    return queue


def _idle_priorities(session: Session, rms: set[str], now: datetime) -> dict[int, float]:
    """The scheduler's priority of every idle job of ``rms``: the numbers ``diagnose -p``
    shows, from the same loaded scheduler (node liveness plays no part in them)."""
    out: dict[int, float] = {}
    for name in sorted(rms):
        out.update(priority_of(priorities(session, name, now)))
    return out


def _ts(value: datetime | None) -> float:
    return value.timestamp() if value is not None else float("inf")

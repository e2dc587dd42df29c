"""``showq``: the queue of one RM (or the whole grid) in Maui's three sections, and the
live coallocated (DUROC) jobs with one line per subjob."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from grid_tasks.db.models import CoallocatedJob, Subjob
from grid_tasks.duroc.records import CoallocStatus, coalloc_status, store_id
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.errors import GridTasksError
from grid_tasks.states import JobState

from . import queue_rows
from .common import Section, check_rm, finished_ids, section_of, state_word
from .plan_cache import Plans
from .plan_digest import Ranked
from .queue_rows import Ranking
from .timefmt import OpsError, iso

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
    """showq's sections (all their rows, or one page of each) and summary counts."""

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
    #: jobs in each section, and processors the active ones use (whether listed or not)
    counts: dict[str, int] = field(default_factory=dict)
    procs_used: int | None = None
    #: the page shown (1-based) and its size; None: every row is listed
    page: int = 1
    limit: int | None = None

    @property
    def procs_active(self) -> int:
        return sum(r.procs for r in self.active) if self.procs_used is None else self.procs_used

    def count(self, section: str) -> int:
        """How many jobs the section holds (its listed rows may be one page of them)."""
        return self.counts.get(section, len(getattr(self, section)))

    @property
    def total_jobs(self) -> int:
        return self.count("active") + self.count("idle") + self.count("blocked")

    @property
    def complete(self) -> bool:
        """Whether every job of every section is listed."""
        return all(len(getattr(self, s)) == self.count(s) for s in ("active", "idle", "blocked"))

    def percent(self, part: int, whole: int) -> float:
        return 100.0 * part / whole if whole else 0.0

    def summary(self) -> dict[str, Any]:
        """The counts showq's summary lines print (every job, listed or not)."""
        return {
            "total_jobs": self.total_jobs, "active_jobs": self.count("active"),
            "idle_jobs": self.count("idle"), "blocked_jobs": self.count("blocked"),
            "procs_active": self.procs_active, "procs_total": self.procs_total,
            "procs_percent": round(self.percent(self.procs_active, self.procs_total), 2),
            "nodes_active": self.nodes_active, "nodes_total": self.nodes_total,
            "nodes_percent": round(self.percent(self.nodes_active, self.nodes_total), 2),
            "coallocated_jobs": len(self.coallocations),
        }

    def to_dict(self) -> dict[str, Any]:
        data = {
            "rm": self.rm, "now": iso(self.now),
            "active": [r.to_dict() for r in self.active],
            "idle": [r.to_dict() for r in self.idle],
            "blocked": [r.to_dict() for r in self.blocked],
            "coallocations": [c.to_dict() for c in self.coallocations],
            "summary": self.summary(),
        }
        if self.limit is not None:
            data["page"] = {"page": self.page, "limit": self.limit}
        return data


def _row(job: Any, section: Section, now: datetime, priority: float | None) -> QueueRow:
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


#: Whether any coallocated job is live: asked first in Core, so that a grid without one
#: (most showqs) never configures the ORM mappers the full read below needs.
_ANY_LIVE_COALLOC = select(CoallocatedJob.__table__.c.id).where(
    CoallocatedJob.__table__.c.state.in_(_LIVE)).limit(1)


def live_coallocations(session: Session, rm: str | None,
                       entries: Entries | None = None) -> list[CoallocStatus]:
    """Coallocated jobs not ended yet (with a subjob at ``rm`` if given), each with its
    subjobs: label, RM, GRAM job, start type, state, barrier entries."""
    if session.connection().execute(_ANY_LIVE_COALLOC).first() is None:
        return []
    stmt = (select(CoallocatedJob).where(CoallocatedJob.state.in_(_LIVE))
            .options(selectinload(CoallocatedJob.subjobs).selectinload(Subjob.gram_job))
            .order_by(CoallocatedJob.id))
    rows = list(session.scalars(stmt))
    if rm is not None:
        rows = [r for r in rows if any(s.rm == rm for s in r.subjobs)]
    return [coalloc_status(r, entries(r.id) if entries else {}) for r in rows]


def build_queue(session: Session, rm: str | None, now: datetime,
                entries: Entries | None = None, *, limit: int | None = None, page: int = 1,
                ranking: Ranking | None = None) -> Queue:
    """The live jobs of ``rm`` (every RM if None) sorted as showq shows them: active by
    remaining time, idle by priority then submission, blocked by submission; and the
    live coallocated jobs with their subjobs (barrier entries from ``entries``, see
    :func:`barrier_entries`; unknown without).

    ``limit``: list only page ``page`` (1-based) of that many rows of each section; the
    summary still counts every job.  ``ranking``: where the scheduler's priorities come
    from (a cached plan's, see :class:`~grid_tasks.ops.plan_cache.Plans`); by default
    each RM's plan is made now.  Rows are plain Core rows of the printed columns."""
    session.flush()  # (its reads are Core statements on the session's connection)
    check_rm(session, rm)
    if page < 1 or (limit is not None and limit < 1):
        raise OpsError(f"showq: page and limit must be at least 1 (got page {page}, "
                       f"limit {limit})")
    rank = ranking or (lambda name: Plans(iterate=False).ranking(session, name, now))
    queue = Queue(rm, now, page=page, limit=limit)
    node_rows = queue_rows.nodes(session, rm)
    names = {n for n, _p in node_rows}
    if limit is None:
        _fill_all(session, queue, rank, names)
    else:
        _fill_page(session, queue, rank, names, page, limit)
    queue.procs_total = sum(p for _n, p in node_rows)
    queue.nodes_total = len(node_rows)
    queue.coallocations = live_coallocations(session, rm, entries)
    return queue


def _rank_all(session: Session, rm: str | None, rank: Ranking) -> dict[str, Ranked]:
    """The ranking of each RM (``rm``, else every one) with jobs in its idle queue."""
    return {name: rank(name) for name in queue_rows.queued_rms(session, rm)}


def _active_part(queue: Queue, rows: list[Any], nodes: set[str]) -> None:
    """The ACTIVE section (sorted by remaining time), processors and nodes in use."""
    inf = float("inf")
    busy: set[str] = set()
    active = []
    for job in rows:
        active.append(_row(job, Section.ACTIVE, queue.now, None))
        busy.update(job.nodes_allocated or {})
    active.sort(key=lambda r: (inf if r.remaining is None else r.remaining, r.job_id))
    queue.active = active
    queue.procs_used = sum(r.procs for r in active)
    queue.nodes_active = len(busy & nodes)


def _fill_all(session: Session, queue: Queue, rank: Ranking, nodes: set[str]) -> None:
    """Every row of every section (``--all``, ``--json``)."""
    jobs = queue_rows.all_live(session, queue.rm)
    done = finished_ids(session, {d for j in jobs for d in (j.dependencies or [])})
    sections = [(job, section_of(job, done)) for job in jobs]
    prio: dict[int, float] = {}
    if any(s is Section.IDLE for _j, s in sections):
        for ranked in _rank_all(session, queue.rm, rank).values():
            prio.update(zip(ranked.ids, ranked.priority))
    for job, section in sections:
        if section is not Section.ACTIVE:
            priority = prio.get(job.id) if section is Section.IDLE else None
            getattr(queue, section.value).append(_row(job, section, queue.now, priority))
    queue.idle.sort(key=lambda r: (-(r.priority or 0.0), _ts(r.submit_time), r.job_id))
    queue.blocked.sort(key=lambda r: (_ts(r.submit_time), r.job_id))
    _active_part(queue, [j for j, s in sections if s is Section.ACTIVE], nodes)


def _fill_page(session: Session, queue: Queue, rank: Ranking, nodes: set[str], page: int,
               limit: int) -> None:
    """Counts of every section and the rows of one page of each."""
    ranked = _rank_all(session, queue.rm, rank)
    holding, special, unqueued = queue_rows.special(
        session, queue.rm, {name: r.flagged for name, r in ranked.items()})
    _active_part(queue, holding, nodes)
    done = finished_ids(session, {d for j in special for d in (j.dependencies or [])})
    blocked = [_row(j, Section.BLOCKED, queue.now, None) for j in special
               if section_of(j, done) is Section.BLOCKED]
    blocked.sort(key=lambda r: (_ts(r.submit_time), r.job_id))
    keys, idle_count = queue_rows.idle_page(list(ranked.values()), unqueued,
                                            {r.job_id for r in blocked}, page, limit)
    rows = queue_rows.by_ids(session, [k[2] for k in keys])
    unranked = {int(r.id) for r in unqueued}  # (no priority: the ranking lacks them)
    queue.idle = [_row(rows[i], Section.IDLE, queue.now, None if i in unranked else -neg)
                  for neg, _s, i in keys if i in rows]  # (a key is -priority, submit, id)
    start = (page - 1) * limit
    queue.counts = {"active": len(queue.active), "idle": idle_count, "blocked": len(blocked)}
    queue.active = queue.active[start:start + limit]
    queue.blocked = blocked[start:start + limit]


def _ts(value: datetime | None) -> float:
    return value.timestamp() if value is not None else float("inf")

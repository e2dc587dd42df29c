"""showq's reads: plain Core rows of only the columns it prints, counts and pages.

With 100,000 queued jobs, loading every job as an ORM object cost more than the whole
answer may take, and rendering them all cost most of it.  So a paged showq reads:
every job holding resources (their number is bounded by the machine); the waiting jobs
that may be blocked (a Maui hold state, a hold or a dependency: found by SQL, rarely
many); the ids and submission times of waiting jobs outside the scheduler's idle
queue (rarely any); and then only the page's rows.  The idle section's order comes
from the scheduler's priority ranking (:mod:`grid_tasks.ops.plan_cache`), which
covers the rest of the queue without reading its rows.
"""

from __future__ import annotations

import heapq
import json
from collections import namedtuple
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import String, and_, cast, not_, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from grid_tasks.db import Job as JobRow, Node as NodeRow
from grid_tasks.states import IDLE_MAUI_STATES, JobState, MauiJobState

from .common import ACTIVE_GRAM, BLOCKED_MAUI

#: rm -> {idle job id: (priority, submission time)}: the scheduler's ranking of an RM
Ranking = Callable[[str], dict[int, tuple[float, float]]]

_LIVE = [s for s in JobState if not s.terminal]
_EMPTY_JSON = ("[]", "null")
#: What a showq line shows (labelled with the job's attribute names, as section_of reads).
COLUMNS = (JobRow.id, JobRow.rm, JobRow.user.label("user"), JobRow.state, JobRow.maui_state,
           JobRow.procs, JobRow.walltime, JobRow.start_time, JobRow.submit_time,
           JobRow.holds, JobRow.dependencies)
ACTIVE_COLUMNS = COLUMNS + (JobRow.nodes_allocated,)
#: showq's ACTIVE section (:func:`~grid_tasks.ops.common.section_of`) in SQL
HOLDING = or_(JobRow.state.in_(ACTIVE_GRAM),
              JobRow.maui_state.in_([MauiJobState.RUNNING, MauiJobState.STARTING]))
#: waiting jobs that may be BLOCKED: the rest are IDLE for sure
MAYBE_BLOCKED = or_(JobRow.maui_state.in_(BLOCKED_MAUI),
                    cast(JobRow.holds, String).notin_(_EMPTY_JSON),
                    cast(JobRow.dependencies, String).notin_(_EMPTY_JSON))
#: waiting jobs in the scheduler's idle queue (those its ranking covers)
QUEUED = and_(JobRow.state == JobState.PENDING, JobRow.maui_state.in_(IDLE_MAUI_STATES))


def live(rm: str | None) -> ColumnElement[bool]:
    """Jobs not ended yet (of ``rm`` when given)."""
    cond = JobRow.state.in_(_LIVE)
    return cond if rm is None else and_(cond, JobRow.rm == rm)


#: JSON columns of a showq line, read as their text: nearly all are empty, and decoding
#: 300,000 of them one by one took a quarter of ``showq --all``'s time at 100,000 jobs
_JSON = (JobRow.holds, JobRow.dependencies, JobRow.nodes_allocated)
_EMPTY_TEXTS = {"[]": list, "{}": dict}
LiveRow = namedtuple("LiveRow", [c.key for c in ACTIVE_COLUMNS])  # type: ignore[misc]


def _decoded(text: str | None) -> Any:
    """What the JSON column type would give for ``text``, skipping the decoder for the
    empty values (a fresh list or dict each: callers may keep them)."""
    if text is None or text == "null":
        return None
    empty = _EMPTY_TEXTS.get(text)
    return empty() if empty is not None else json.loads(text)


def all_live(session: Session, rm: str | None) -> list[Any]:
    """Every live job of ``rm`` (every RM if None) as a plain row, by id."""
    columns = [cast(c, String).label(c.key) if any(c is j for j in _JSON) else c
               for c in ACTIVE_COLUMNS]
    stmt = select(*columns).where(live(rm)).order_by(JobRow.id)
    jsons = [i for i, c in enumerate(ACTIVE_COLUMNS) if any(c is j for j in _JSON)]
    out = []
    for row in session.execute(stmt):
        values = list(row)
        for i in jsons:
            values[i] = _decoded(values[i])
        out.append(LiveRow._make(values))
    return out


def holding(session: Session, rm: str | None) -> list[Any]:
    """The jobs of showq's ACTIVE section."""
    return list(session.execute(select(*ACTIVE_COLUMNS).where(live(rm), HOLDING)))


def maybe_blocked(session: Session, rm: str | None) -> list[Any]:
    """Waiting jobs with a Maui hold state, a hold or a dependency."""
    stmt = select(*COLUMNS).where(live(rm), not_(HOLDING), MAYBE_BLOCKED)
    return list(session.execute(stmt))


def unqueued(session: Session, rm: str | None) -> list[Any]:
    """Waiting jobs the scheduler's idle queue does not hold (not yet PENDING, or in
    another Maui state): ``(id, submit_time)`` rows; the ranking has none of them."""
    stmt = select(JobRow.id, JobRow.submit_time).where(live(rm), not_(HOLDING), not_(QUEUED))
    return list(session.execute(stmt))


def queued_rms(session: Session, rm: str | None) -> list[str]:
    """The RMs with jobs in their idle queue (whose ranking showq needs)."""
    stmt = select(JobRow.rm).where(live(rm), QUEUED).distinct()
    return sorted(str(r) for r in session.scalars(stmt) if r is not None)


def by_ids(session: Session, ids: Iterable[int]) -> dict[int, Any]:
    """The showq rows of ``ids`` (a page: bounded)."""
    wanted = list(ids)
    if not wanted:
        return {}
    return {int(r.id): r for r in session.execute(select(*COLUMNS).where(JobRow.id.in_(wanted)))}


def nodes(session: Session, rm: str | None) -> list[tuple[str, int]]:
    """``(name, procs)`` of the nodes of ``rm`` (every RM if None)."""
    stmt = select(NodeRow.name, NodeRow.procs)
    if rm is not None:
        stmt = stmt.where(NodeRow.rm == rm)
    return [(str(n), int(p or 0)) for n, p in session.execute(stmt)]


def epoch_or_inf(value: datetime | None) -> float:
    return value.timestamp() if value is not None else float("inf")


IdleKey = tuple[float, float, int]


def idle_keys(ranked: dict[int, tuple[float, float]], others: list[Any],
              blocked: set[int]) -> tuple[list[IdleKey], dict[int, float]]:
    """showq's order of the idle section, ``(-priority, submission, id)`` per job (a job
    the ranking lacks has no priority: it sorts as 0), and the priorities by id."""
    keys: list[IdleKey] = [(-p, s, job_id) for job_id, (p, s) in ranked.items()
                           if job_id not in blocked]
    keys += [(-0.0, epoch_or_inf(r.submit_time), int(r.id)) for r in others
             if int(r.id) not in blocked]
    prio = {job_id: p for job_id, (p, _s) in ranked.items()}
    return keys, prio


def page_of(keys: list[IdleKey], page: int, limit: int) -> list[int]:
    """The ids of page ``page`` (1-based) of ``limit`` in key order."""
    start = (page - 1) * limit
    return [k[2] for k in heapq.nsmallest(start + limit, keys)[start:]]

"""showq's reads: plain Core rows of only the columns it prints, counts and pages.

With 100,000 queued jobs, loading every job as an ORM object cost more than the whole
answer may take, and rendering them all cost most of it.  So a paged showq reads, in
one scan of the RM's live jobs, the few that are *special*: every job holding resources
(their number is bounded by the machine), the waiting jobs that may be blocked (a Maui
hold state, a hold or a dependency: rarely many) and the waiting jobs outside the
scheduler's idle queue (rarely any); then only the page's rows.  The idle section's
order comes from the scheduler's priority ranking (:mod:`grid_tasks.ops.plan_cache`),
kept in showq's order (:class:`~grid_tasks.ops.plan_digest.Ranked`): a page walks its
first rows only, merged with the few waiting jobs it lacks.

The statements name the jobs table's Core columns (not the ORM attributes): compiling
an ORM attribute's statement configures every mapper first, which showq never needs.
"""

from __future__ import annotations

import heapq
import json
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from itertools import islice
from typing import Any

from sqlalchemy import String, and_, bindparam, cast, exists, or_, select, union_all
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from grid_tasks.db import Job as JobRow, Node as NodeRow
from grid_tasks.db.models import ResourceManager
from grid_tasks.states import IDLE_MAUI_STATES, JobState, MauiJobState

from .common import ACTIVE_GRAM, BLOCKED_MAUI
from .plan_digest import IdleKey, Ranked

#: rm -> the scheduler's ranking of its idle queue
Ranking = Callable[[str], Ranked]

_J = JobRow.__table__.c
_N = NodeRow.__table__.c
_RMS = ResourceManager.__table__.c
_LIVE = [s for s in JobState if not s.terminal]
_EMPTY_JSON = ("[]", "null")
_HOLDING_MAUI = (MauiJobState.RUNNING, MauiJobState.STARTING)
#: What a showq line shows (labelled with the job's attribute names, as section_of reads).
COLUMNS = (_J.id, _J.rm, _J.user_name.label("user"), _J.state, _J.maui_state, _J.procs,
           _J.walltime, _J.start_time, _J.submit_time, _J.holds, _J.dependencies)
ACTIVE_COLUMNS = COLUMNS + (_J.nodes_allocated,)
#: showq's ACTIVE section (:func:`~grid_tasks.ops.common.section_of`) in SQL
HOLDING = or_(_J.state.in_(ACTIVE_GRAM), _J.maui_state.in_(_HOLDING_MAUI))
#: waiting jobs that may be BLOCKED: the rest are IDLE for sure
MAYBE_BLOCKED = or_(_J.maui_state.in_(BLOCKED_MAUI),
                    cast(_J.holds, String).notin_(_EMPTY_JSON),
                    cast(_J.dependencies, String).notin_(_EMPTY_JSON))
#: waiting jobs in the scheduler's idle queue (those its ranking covers)
QUEUED = and_(_J.state == JobState.PENDING, _J.maui_state.in_(IDLE_MAUI_STATES))


def live(rm: str | None) -> ColumnElement[bool]:
    """Jobs not ended yet (of ``rm`` when given)."""
    cond = _J.state.in_(_LIVE)
    return cond if rm is None else and_(cond, _J.rm == rm)


#: JSON columns of a showq line, read as their text: nearly all are empty, and decoding
#: 300,000 of them one by one took a quarter of ``showq --all``'s time at 100,000 jobs
_JSON = (_J.holds, _J.dependencies, _J.nodes_allocated)
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
    stmt = select(*columns).where(live(rm)).order_by(_J.id)
    jsons = [i for i, c in enumerate(ACTIVE_COLUMNS) if any(c is j for j in _JSON)]
    out = []
    for row in session.connection().execute(stmt):
        values = list(row)
        for i in jsons:
            values[i] = _decoded(values[i])
        out.append(LiveRow._make(values))
    return out


def holds_resources(row: Any) -> bool:
    """:data:`HOLDING` of one row."""
    return row.state in ACTIVE_GRAM or row.maui_state in _HOLDING_MAUI


def is_queued(row: Any) -> bool:
    """:data:`QUEUED` of one row of an RM (a job of none is in no RM's queue)."""
    return (row.rm is not None and row.state is JobState.PENDING
            and row.maui_state in IDLE_MAUI_STATES)


def may_be_blocked(row: Any) -> bool:
    """:data:`MAYBE_BLOCKED` of one (decoded) row."""
    return row.maui_state in BLOCKED_MAUI or bool(row.holds) or bool(row.dependencies)


def outside_queue(columns: Any, rm: Any, states: list[JobState]) -> Any:
    """``columns`` of the RM's jobs in ``states`` but outside its idle queue, as ranges
    of the (rm, state, maui_state) index: one arm per state (a NOT of the queue, or an
    OR, made the planners walk the whole queue's index entries)."""
    arms = [select(*columns).where(_J.rm == rm, _J.state.in_(
        [s for s in states if s is not JobState.PENDING]))]
    if JobState.PENDING in states:
        arms += [select(*columns).where(_J.rm == rm, _J.state == JobState.PENDING,
                                        _J.maui_state == m)
                 for m in MauiJobState if m not in IDLE_MAUI_STATES]
    return union_all(*arms)


_OUTSIDE = outside_queue(ACTIVE_COLUMNS, bindparam("rm"), _LIVE)
_UNROUTED = select(*ACTIVE_COLUMNS).where(_J.rm.is_(None), _J.state.in_(_LIVE))
#: the queued jobs of an RM with a hold or a dependency: a pass over the queue's JSON
#: (when the ranking does not know them)
_FLAGGED = select(*ACTIVE_COLUMNS).where(
    _J.rm == bindparam("rm"), QUEUED, or_(cast(_J.holds, String).notin_(_EMPTY_JSON),
                                          cast(_J.dependencies, String).notin_(_EMPTY_JSON)))
_BY_ID = select(*ACTIVE_COLUMNS).where(_J.id.in_(bindparam("ids", expanding=True)))


def flagged_ids(session: Session, rm: str) -> frozenset[int]:
    """The ids of ``rm``'s queued jobs carrying a hold or a dependency
    (:attr:`~grid_tasks.ops.plan_digest.Ranked.flagged`)."""
    return frozenset(int(r.id) for r in session.connection().execute(_FLAGGED, {"rm": rm}))


def special(session: Session, rm: str | None,
            flagged: dict[str, frozenset[int] | None]) -> tuple[list[Any], list[Any], list[Any]]:
    """The few live jobs a page needs besides its own rows: those holding resources
    (showq's ACTIVE section), the waiting ones that may be blocked, and the waiting
    ones outside the scheduler's idle queues (which their rankings lack).  Read by
    index: every job outside an idle queue (of ``rm``, else of every RM, and those of
    none); of the queued ones only ``flagged``'s (per RM with a queue, None: looked
    for)."""
    conn = session.connection()
    names = [rm] if rm is not None else [str(n) for n in conn.scalars(select(_RMS.name))]
    rows = [r for name in names for r in conn.execute(_OUTSIDE, {"rm": name})]
    if rm is None:
        rows += conn.execute(_UNROUTED)
    known = sorted(i for ids in flagged.values() if ids is not None for i in ids)
    for start in range(0, len(known), 500):
        rows += conn.execute(_BY_ID, {"ids": known[start:start + 500]})
    for name in sorted(n for n, ids in flagged.items() if ids is None):
        rows += conn.execute(_FLAGGED, {"rm": name})
    holding, blocked, unqueued = [], [], []
    for row in {int(r.id): r for r in rows}.values():  # (a flagged job may have left)
        if holds_resources(row):
            holding.append(row)
            continue
        if may_be_blocked(row):
            blocked.append(row)
        if not is_queued(row):
            unqueued.append(row)
    return holding, blocked, unqueued


def queued_rms(session: Session, rm: str | None) -> list[str]:
    """The RMs with jobs in their idle queue (whose ranking showq needs): one index
    probe per RM, not a pass over the queue."""
    probe = exists(select(_J.id).where(_J.rm == _RMS.name, QUEUED))
    stmt = select(_RMS.name).where(probe).order_by(_RMS.name)
    if rm is not None:
        stmt = stmt.where(_RMS.name == rm)
    return [str(r) for r in session.connection().scalars(stmt)]


def by_ids(session: Session, ids: Iterable[int]) -> dict[int, Any]:
    """The showq rows of ``ids`` (a page: bounded)."""
    wanted = list(ids)
    if not wanted:
        return {}
    rows = session.connection().execute(select(*COLUMNS).where(_J.id.in_(wanted)))
    return {int(r.id): r for r in rows}


def nodes(session: Session, rm: str | None) -> list[tuple[str, int]]:
    """``(name, procs)`` of the nodes of ``rm`` (every RM if None)."""
    stmt = select(_N.name, _N.procs)
    if rm is not None:
        stmt = stmt.where(_N.rm == rm)
    return [(str(n), int(p or 0)) for n, p in session.connection().execute(stmt)]


def epoch_or_inf(value: datetime | None) -> float:
    return value.timestamp() if value is not None else float("inf")


def _unblocked(keys: Iterator[IdleKey], blocked: set[int]) -> Iterator[IdleKey]:
    return (k for k in keys if k[2] not in blocked) if blocked else keys


def idle_page(ranked: list[Ranked], others: list[Any], blocked: set[int], page: int,
              limit: int) -> tuple[list[IdleKey], int]:
    """Page ``page`` (1-based) of ``limit`` idle jobs in showq's order and how many the
    section holds.  ``ranked``: the RMs' rankings (each in that order already);
    ``others``: ``(id, submit_time)`` rows of waiting jobs they lack (no priority: they
    sort as 0); ``blocked``: ids listed as blocked instead.  Only the page's first
    ``page * limit`` keys are walked."""
    extra = sorted((-0.0, epoch_or_inf(r.submit_time), int(r.id)) for r in others
                   if int(r.id) not in blocked)
    streams = [_unblocked(r.keys(), blocked) for r in ranked] + [iter(extra)]
    start = (page - 1) * limit
    keys = list(islice(heapq.merge(*streams), start, start + limit))
    count = len(extra) + sum(len(r) - sum(1 for b in blocked if b in r) for r in ranked)
    return keys, count

"""A whole idle queue read column-wise: the first load of a deep queue, or a reload.

A scheduler process that has kept nothing of an RM's queue yet (its first iteration,
a restart, a failover) must read every idle row and build a core job for each.  Read
as result rows, 100,000 jobs took seconds: SQLAlchemy's per-row processing (the UTC
datetime, the JSON ``holds`` decoded for rows whose holds are empty), one
:func:`~grid_tasks.scheduling.job_rows.core_job` call per row, and the queue read
twice (ids in id order, then in queue order, sorted by the database).  Here the
driver's plain tuples are turned into columns at C speed and each conversion is one
pass over its column:

* rows are read unordered and ordered in memory by (priority descending, submission,
  id), what :data:`~grid_tasks.scheduling.job_rows.ORDER` asks of SQL (see
  :func:`~grid_tasks.scheduling.queue_arrays.ordered`); only when a NULL submission
  time would leave the order to the backend is the result None (the caller then
  reads in SQL's order);
* submission times become the very floats :func:`~grid_tasks.utc.epoch` gives,
  parsed from UTC text all at once (:func:`epochs`);
* ``holds`` come back NULL when they are the empty list (nearly every row), so only
  the others are decoded.

The jobs built are equal to :func:`~grid_tasks.scheduling.job_rows.core_job` of the
same rows (tests/scheduling/test_idle_load.py), and built only for the rows asked for
(the caller keeps the objects it already has for unchanged rows).
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat, starmap
from operator import itemgetter
from typing import Any

import numpy as np
from sqlalchemy import String, Text, bindparam, case, cast, func, null, select

from grid_tasks.db.models import Job as JobRow
from grid_tasks.maui import Job
from grid_tasks.scheduling.job_rows import (
    CLASS, DEFAULT_WALLTIME, GROUP, IDLE_COLUMNS, IDLE_MAUI_STATES, USER,
)
from grid_tasks.scheduling.queue_arrays import ordered
from grid_tasks.states import JobState
from grid_tasks.utc import epoch

#: Rows fetched from the driver at a time (a bounded list of tuples at any moment).
FETCH = 10_000
#: Ids per IN list when only some rows are read.
CHUNK = 500
_NO_FEATURES: frozenset[str] = frozenset()
_MEMORY = IDLE_COLUMNS[-1]  # the request's min_memory_mb, as the row loader reads it


def _statement(dialect: str) -> Any:
    """Every idle row's columns, unordered: the submission time as UTC text (as
    SQLite stores it; PostgreSQL's UTC wall time as text: a datetime object per row,
    and the more an aware one, cost more than parsing all the text at once), holds
    NULL when empty."""
    submit = (cast(func.timezone("UTC", JobRow.submit_time), Text) if dialect == "postgresql"
              else JobRow.submit_time)
    holds = cast(JobRow.holds, String)
    return select(JobRow.id, JobRow.version, JobRow.priority, submit, JobRow.tasks,
                  JobRow.walltime, USER, GROUP, JobRow.account, CLASS, JobRow.qos,
                  case((holds == "[]", null()), else_=holds), JobRow.early_start,
                  _MEMORY).where(JobRow.rm == bindparam("rm"),
                                 JobRow.state == JobState.PENDING,
                                 JobRow.maui_state.in_(IDLE_MAUI_STATES))


# Built once per dialect (and whole or by ids), so their cache keys are memoized.
_STATEMENTS: dict[tuple[str, bool], Any] = {}
(_ID, _VERSION, _PRIORITY, _SUBMIT, _TASKS, _WALL, _USER, _GROUP, _ACCOUNT, _CLASS, _QOS,
 _HOLDS, _EARLY, _MEM) = range(14)


@dataclass
class QueueColumns:
    """An RM's idle rows: ``pairs`` (n x 2: id, version), each row's ``priority`` and
    ``submit`` in queue order, and the raw columns the jobs are built from in the order
    read (``order``: the read position of each queue position)."""

    pairs: np.ndarray
    priority: np.ndarray
    submit: np.ndarray  # each row's submission time (POSIX seconds), in queue order
    columns: list[list[Any]]
    order: np.ndarray

    def jobs(self, at: Sequence[int] | None = None) -> list[Job]:
        """The core jobs of the rows at ``at`` (positions in queue order; None: all),
        each equal to ``core_job`` of its row.  Built in the order read, then put in
        queue order once (not each column)."""
        if at is None:
            return _take(_build(self.columns), self.order.tolist())
        read = self.order[np.asarray(at, dtype=np.int64)].tolist()
        return _build([_take(c, read) for c in self.columns])


def _build(cols: list[list[Any]]) -> list[Job]:
    """One core job per row of ``cols`` (as ``core_job`` builds it), in their order."""
    ids, count = cols[_ID], len(cols[_ID])
    return list(starmap(Job, zip(
        map(str, ids), [max(1, t or 1) for t in cols[_TASKS]], repeat(1, count),
        [float(w or DEFAULT_WALLTIME) for w in cols[_WALL]], cols[_SUBMIT],
        *(_interned(cols[k]) for k in (_USER, _GROUP, _ACCOUNT, _CLASS, _QOS)),
        [int(m or 0) for m in cols[_MEM]], repeat(0, count), repeat(0, count),
        repeat(None, count), repeat(_NO_FEATURES, count),
        [_NO_FEATURES if h is None else frozenset(json.loads(h) or ()) for h in cols[_HOLDS]],
        repeat((), count), map(bool, cols[_EARLY]))))


def read_all(session: Any, rm: str) -> QueueColumns | None:
    """Every idle row of ``rm`` as :class:`QueueColumns`; None when a row has no
    submission time (where SQL puts a NULL differs between backends: the caller reads
    in SQL's order then; a priority is never NULL)."""
    return _columns(_fetch_columns(session.connection().execute(
        _statement_for(session, False), {"rm": rm})))


def read_rows(session: Any, rm: str, ids: Sequence[int]) -> QueueColumns | None:
    """The rows of ``ids`` that are idle jobs of ``rm`` now, as :func:`read_all` reads
    them (in bounded IN lists)."""
    stmt, columns = _statement_for(session, True), [[] for _ in range(14)]
    for start in range(0, len(ids), CHUNK):
        part = _fetch_columns(session.connection().execute(
            stmt, {"rm": rm, "ids": list(ids[start:start + CHUNK])}))
        for column, values in zip(columns, part):
            column.extend(values)
    return _columns(columns)


def _statement_for(session: Any, by_ids: bool) -> Any:
    key = (session.get_bind().dialect.name, by_ids)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = _statement(key[0])
        if by_ids:
            stmt = stmt.where(JobRow.id.in_(bindparam("ids", expanding=True)))
        _STATEMENTS[key] = stmt
    return stmt


def _columns(columns: list[list[Any]]) -> QueueColumns | None:
    """The fetched columns with their queue order (None for a NULL submission)."""
    if any(v is None for v in columns[_SUBMIT]):
        return None
    submit = epochs(columns[_SUBMIT])
    columns[_SUBMIT] = submit.tolist()
    ids = np.array(columns[_ID], dtype=np.int64)
    priority = np.array(columns[_PRIORITY], dtype=np.int64)
    order = ordered(ids, priority, submit)
    pairs = np.column_stack((ids, np.array(columns[_VERSION], dtype=np.int64)))[order]
    return QueueColumns(pairs.reshape(-1, 2), priority[order], submit[order], columns, order)


def _fetch_columns(result: Any) -> list[list[Any]]:
    """The result's rows as 14 columns (lists), read from the driver in batches."""
    cursor, columns = result.cursor, [[] for _ in range(14)]
    try:
        while rows := cursor.fetchmany(FETCH):
            for column, values in zip(columns, zip(*rows)):
                column.extend(values)
        return columns
    finally:
        result.close()


def epochs(values: list[str]) -> np.ndarray:
    """POSIX seconds of stored UTC times (ISO text without an offset), the very floats
    :func:`~grid_tasks.utc.epoch` gives: whole microseconds over 10**6, one correctly
    rounded division either way.  Parsed by numpy at once; text numpy would read with
    a warning or not at all (an offset, another layout) is parsed one by one."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            micros = np.array(values, dtype="datetime64[us]").astype(np.int64)
    except (ValueError, TypeError, Warning):
        return np.array([epoch(datetime.fromisoformat(v)) for v in values], dtype=float)
    return micros / 1e6


def _interned(values: list[str | None]) -> list[str | None]:
    """Credential names, each distinct one interned once (a deep queue's jobs share a
    few names; the driver hands a new string per row)."""
    names: dict[str | None, str | None] = {v: sys.intern(v) for v in set(values) if v is not None}
    names[None] = None
    return list(map(names.__getitem__, values))


def _take(column: list[Any], at: Sequence[int]) -> list[Any]:
    """``column``'s values at ``at``, in that order."""
    if len(at) < 2:
        return [column[k] for k in at]
    return list(itemgetter(*at)(column))

"""Plain job rows for the batched report writer, written back with Core statements.

Job reports are the one write every job makes on a node (ACTIVE, the end, its
accounting record).  Through the ORM, the unit of work's flush of those few rows
was a third of a node daemon's CPU (bench_gram), so the writer reads the columns it
needs as :class:`JobView` objects, lets the same state rules change them
(:func:`~grid_tasks.db.transitions.apply_transition`,
:func:`~grid_tasks.gram.records.mark_end`), and writes them back here: one UPDATE
per changed job, guarded by its optimistic-lock ``version`` as an ORM flush would
be, and one INSERT each of the history and accounting rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, select, update

from grid_tasks.db import AccountingRecord, ConcurrentUpdateError
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models import JobStateHistory
from grid_tasks.db.models.base import check_lengths, column_names, table_row
from grid_tasks.db.repository import accounting_values
from grid_tasks.db.transitions import apply_transition
from grid_tasks.states import JobState

#: What a report reads and may change of a job (no RSL, no holds, no priority).
READ = ("id", "rm", "state", "maui_state", "launch_token", "version", "coallocation_id",
        "owner", "user", "group", "account", "job_class", "qos", "nodes_allocated",
        "procs", "submit_time", "start_time", "end_time", "exit_code", "failure_reason",
        "gram_error", "gram_error_code", "request")
#: Those a state change or an ending writes back.
WRITTEN = ("state", "maui_state", "start_time", "end_time", "exit_code", "failure_reason",
           "gram_error", "gram_error_code", "request")

_TABLE = JobRow.__table__
_COLUMN = column_names(JobRow.__mapper__)
_SELECT = select(*(getattr(JobRow, key) for key in READ)).where(
    JobRow.id.in_(bindparam("ids", expanding=True)))
# Built once: the statement's cache key is then memoized (building and keying it per
# report cost more than executing it).
_UPDATE = update(_TABLE).where(
    _TABLE.c.id == bindparam("b_id"), _TABLE.c.version == bindparam("b_version")).values(
    {_COLUMN[key]: bindparam(key) for key in WRITTEN} | {"version": bindparam("b_next")})
_INSERT_HISTORY = insert(JobStateHistory.__table__)
_INSERT_ACCOUNTING = insert(AccountingRecord.__table__)


class JobView:
    """One job's :data:`READ` columns as plain attributes (no ORM state)."""

    __slots__ = READ + ("_before",)

    def __init__(self, row: Any) -> None:
        for key, value in zip(READ, row):
            setattr(self, key, value)
        self._before = tuple(getattr(self, key) for key in WRITTEN)

    @property
    def changed(self) -> bool:
        return tuple(getattr(self, key) for key in WRITTEN) != self._before


def load(conn: Any, ids: list[int]) -> dict[int, JobView]:
    """The jobs ``ids`` as :class:`JobView` by id (unknown ids are left out); ``conn`` is
    the session's connection (Core statements skip the ORM's execution layer)."""
    if not ids:
        return {}
    return {view.id: view for view in map(JobView, conn.execute(_SELECT, {"ids": ids}))}


class Changes:
    """History and accounting rows a batch adds, and its changed jobs, written by
    :meth:`write` in the session's transaction."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []
        self.accounting: list[dict[str, Any]] = []

    def transition(self, view: JobView, new: JobState, reason: str | None,
                   at: datetime) -> bool:
        """Apply one state change to ``view`` and queue its history row; False for a
        repeat of the current state (as ``record_transition``)."""
        current = JobState(view.state) if view.state is not None else JobState.UNSUBMITTED
        if new is current:
            return False
        apply_transition(view, current, new, reason, at)
        self.history.append({"job_id": view.id, "from_state": current, "to_state": new,
                             "reason": reason, "at": at})
        return True

    def account(self, view: JobView) -> None:
        """Queue the accounting record of ended ``view`` (known to have none)."""
        self.accounting.append(table_row(AccountingRecord.__mapper__,
                                         accounting_values(view)))

    def write(self, conn: Any, views: dict[int, JobView]) -> None:
        """Emit the changes on ``conn`` (the session's connection);
        :class:`ConcurrentUpdateError` if another session changed one of the jobs since
        :func:`load` (the whole batch then rolls back)."""
        for view in views.values():
            if not view.changed:
                continue
            check_lengths(JobRow.__mapper__, lambda key: getattr(view, key, None))
            params = {key: getattr(view, key) for key in WRITTEN}
            params.update(b_id=view.id, b_version=view.version, b_next=view.version + 1)
            if conn.execute(_UPDATE, params).rowcount != 1:
                raise ConcurrentUpdateError(
                    f"job {view.id} was changed by another session; report not applied")
        if self.history:
            conn.execute(_INSERT_HISTORY, self.history)
        if self.accounting:
            conn.execute(_INSERT_ACCOUNTING, self.accounting)

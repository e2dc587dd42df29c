"""The SQL side of job managers' reports, written in batches: one transaction per batch.

Every job manager of a node daemon used to write its ACTIVE and its end in a
transaction of its own; with many short jobs the node daemons queued on the
database's single writer lock most of the time (bench_gram).  A
:class:`ReportWriter` per process takes every report waiting when it becomes
free and writes them together: one SELECT of the rows, the same per-job checks
as before (launch token, state), one commit, then the events and iteration
triggers.  A caller still returns only once its report is committed (or raises
why not), so job managers keep their order: started before finished.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import bindparam, select

from grid_tasks.db import AccountingRecord, Reservation, ReservationKind, session_scope
from grid_tasks.db.models import Job as JobRow
from grid_tasks.events import JobEvent
from grid_tasks.gram.records import Outbox, mark_end
from grid_tasks.gram.report_rows import Changes, JobView, load
from grid_tasks.states import JobState

log = logging.getLogger(__name__)

#: Reports written per transaction at most (bounded IN lists, short write locks).
MAX_BATCH = 200

STARTED, FINISHED = "started", "finished"


@dataclass
class Report:
    """One job manager's report: ``started`` on a node, or ``finished`` with all parts."""

    kind: str
    req: Any  # the LaunchRequest
    results: dict[str, Any] = field(default_factory=dict)  # node -> part (finished)
    started: float | None = None  # POSIX time the processes started (started)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class ReportWriter:
    """Batches the reports of one process's job managers (see the module doc).

    No thread of its own: the first caller that finds nobody writing writes, taking
    every report queued meanwhile along with its own (no hand-off between threads,
    which costs milliseconds on a busy interpreter); callers arriving during a write
    wait for the next batch, written by one of them.
    """

    def __init__(self, sessions: Any, redis: Any, app: Any, retrying: Any,
                 redis_retrying: Any) -> None:
        self.sessions, self.redis, self.app = sessions, redis, app
        self._retrying, self._redis_retrying = retrying, redis_retrying
        self._pending: list[Report] = []
        self._cond = threading.Condition()
        self._writing = False

    def write(self, report: Report) -> None:
        """Queue ``report`` and return once it is committed; re-raises its failure."""
        with self._cond:
            self._pending.append(report)
            while not report.done.is_set() and self._writing:
                self._cond.wait()
            lead = not report.done.is_set()
            if lead:
                self._writing = True
        if lead:
            try:
                while not report.done.is_set():  # its own is in the first batch or next
                    with self._cond:
                        batch = self._pending[:MAX_BATCH]
                        del self._pending[:MAX_BATCH]
                    self._write_safely(batch)
                    with self._cond:
                        self._cond.notify_all()  # their reports are done
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()  # one of those still queued writes next
        if report.error is not None:
            raise report.error

    def _write_safely(self, batch: list[Report]) -> None:
        try:
            self._write_batch(batch)
        except BaseException as exc:  # noqa: BLE001 - every waiter must wake up
            for report in batch:
                if not report.done.is_set():
                    report.error = exc
                    report.done.set()
            if not isinstance(exc, Exception):
                raise

    def _write_batch(self, batch: list[Report]) -> None:
        try:
            outbox = self._retrying(lambda: write_reports(self.sessions, batch))
        except Exception:
            if len(batch) == 1:
                raise
            # one bad report must not fail the others: each on its own, with its error
            log.warning("batch of %d job reports failed; writing them one by one",
                        len(batch), exc_info=True)
            for report in batch:
                try:
                    self._write_batch([report])
                except Exception as exc:  # noqa: BLE001 - handed to its waiter
                    report.error = exc
                    report.done.set()
            return
        try:
            self._redis_retrying(lambda: outbox.flush(self.redis, self.app))
        except Exception as exc:  # committed, but its events or triggers are lost: say so
            for report in batch:
                report.error = exc
        finally:
            for report in batch:
                report.done.set()


def write_reports(sessions: Any, batch: list[Report]) -> Outbox:
    """Apply ``batch`` in one transaction; the outbox to flush after the commit.

    The jobs are read as plain rows (:mod:`grid_tasks.gram.report_rows`), changed by the
    same state rules as ORM rows, and written back at the end, so the database's writer
    lock is held for those statements and the commit only, not while Python decides
    (on a loaded host that time had dominated the lock).
    """
    outbox, changes = Outbox(), Changes()
    now = datetime.now(timezone.utc)
    with session_scope(sessions) as session:
        conn = session.connection()  # Core statements only: no ORM execution layer
        ids = sorted({r.req.job_id for r in batch})
        rows = load(conn, ids)
        accounted = set(conn.execute(_ACCOUNTED, {"ids": ids}).scalars())
        for report in batch:
            row = rows.get(report.req.job_id)
            if row is None:
                log.warning("report on unknown job %s ignored", report.req.job_id)
            elif report.kind == STARTED:
                _started(changes, row, report.req, _at(report.started, now), outbox)
            elif _finished(changes, row, report.req, report.results, now, outbox) \
                    and row.id not in accounted:
                changes.account(row)
        for rm in sorted(outbox.rms):
            if not _anyone_waiting(conn, rm, rows) and not _ends_a_grid_hold(conn, rm, rows):
                outbox.rms.discard(rm)  # nothing idle: the freed nodes change no decision
        changes.write(conn, rows)
    return outbox


def _transition(changes: Changes, row: JobView, state: JobState, reason: str,
                at: datetime, outbox: Outbox) -> None:
    if changes.transition(row, state, reason, at):
        outbox.events.append(JobEvent(row.id, state.value, reason, at.timestamp()))


def _started(changes: Changes, row: JobView, req: Any, now: datetime,
             outbox: Outbox) -> None:
    if row.launch_token != req.token or row.state is not JobState.PENDING:
        return
    _transition(changes, row, JobState.ACTIVE, f"started on {req.node}", now, outbox)


def _finished(changes: Changes, row: JobView, req: Any, results: dict[str, Any],
              now: datetime, outbox: Outbox) -> bool:
    """End the job as its parts tell (as ``records.finish``); True if this ended it."""
    if row.launch_token != req.token or row.state.terminal:
        return False  # a superseded launch (requeued meanwhile), or ended already
    codes: dict[str, int] = {}
    failure: tuple[str, str | None] | None = None
    for node in sorted(results):
        part = results[node]
        codes.update({k: v for k, v in (part.get("exit_codes") or {}).items() if v is not None})
        if part.get("reason") and failure is None:
            failure = (part["reason"], part.get("code"))
    exit_code = next((c for _, c in sorted(codes.items(), key=lambda kv: int(kv[0])) if c),
                     0 if codes else None)
    if failure is None and row.state is JobState.PENDING:  # too quick to be seen running
        starts = [p["started"] for p in results.values() if p.get("started") is not None]
        _transition(changes, row, JobState.ACTIVE, f"started on {req.node}",
                    _at(min(starts, default=None), now), outbox)
    state, reason = (JobState.FAILED, failure[0]) if failure else (
        JobState.DONE, f"exit code {exit_code}")
    mark_end(row, failure[1] if failure else None, exit_code, codes)
    _transition(changes, row, state, reason, now, outbox)
    if row.coallocation_id is not None:
        outbox.coallocations.add(row.coallocation_id)
    if row.rm:
        outbox.rms.add(row.rm)
    return True


def _at(started: float | None, now: datetime) -> datetime:
    """The time a job started as recorded: when its processes started (never after
    ``now``, should clocks of nodes disagree), else ``now``."""
    if started is None:
        return now
    return min(now, datetime.fromtimestamp(started, tz=timezone.utc))


def _ends_a_grid_hold(conn: Any, rm: str, rows: dict[int, Any]) -> bool:
    """Whether a job of ``rm`` that ended in this batch holds a grid reservation: the
    iteration drops it and frees its broker tokens at once, rather than when the
    reservation would have ended (brokers plan around those processors until then)."""
    ended = [i for i, row in rows.items() if row.rm == rm and row.state.terminal]
    if not ended:
        return False
    return conn.execute(_GRID_HOLD, {"rm": rm, "ids": ended}).first() is not None


def _anyone_waiting(conn: Any, rm: str, rows: dict[int, Any]) -> bool:
    """Whether a job of ``rm`` waits to start: the batch's own rows as changed in memory
    (not written yet), the others as stored."""
    if any(row.rm == rm and row.state is JobState.PENDING for row in rows.values()):
        return True
    return conn.execute(_WAITING, {"rm": rm, "ids": list(rows)}).first() is not None


# Built once (their cache keys memoized): every batch of reports asks them.
_ACCOUNTED = select(AccountingRecord.job_id).where(
    AccountingRecord.job_id.in_(bindparam("ids", expanding=True)))
_GRID_HOLD = select(Reservation.id).where(
    Reservation.rm == bindparam("rm"), Reservation.kind == ReservationKind.GRID,
    Reservation.owner_job_id.in_(bindparam("ids", expanding=True))).limit(1)
_WAITING = select(JobRow.id).where(
    JobRow.rm == bindparam("rm"), JobRow.state == JobState.PENDING,
    JobRow.id.notin_(bindparam("ids", expanding=True))).limit(1)

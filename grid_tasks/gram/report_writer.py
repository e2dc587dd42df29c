"""The SQL side of job managers' reports, written by the gatekeeper in batches.

Node daemons hold no database credentials: their job managers' reports travel to
the RM's gatekeeper as messages (:mod:`grid_tasks.gram.report_sender`, one message
per batch) and the gatekeeper writes each batch here in one transaction: one SELECT
of the rows, the per-job checks (the report's node and launch token against the
job's own record, :mod:`grid_tasks.gram.report_checks`; its state), one commit,
then the events and iteration triggers.

Recording is idempotent: a repeated STARTED finds the job past PENDING, a repeated
FINISHED finds it ended (the first ending stands) and its accounting record there,
so a redelivered batch (acks late) changes nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import bindparam, select

from grid_tasks.db import AccountingRecord, Reservation, ReservationKind, session_scope
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.retry import transient_db_error
from grid_tasks.events import JobEvent
from grid_tasks.gram.records import Outbox, mark_end
from grid_tasks.gram.report_rows import Changes, JobView, load
from grid_tasks.gram.report_sender import (  # noqa: F401 - the reports' one definition
    FINISHED,
    STARTED,
    Report,
)
from grid_tasks.states import JobState

log = logging.getLogger(__name__)

#: ``vet(report, row) -> reason or None``: a report refused is left out of its batch.
Vet = Callable[[Report, Any], "str | None"]


@dataclass
class Recorded:
    """What recording a batch did: the outbox to flush, the refused reports (with why),
    and those that failed for another reason (a bug, a bad value) with their error."""

    outbox: Outbox
    refused: list[tuple[Report, str]] = field(default_factory=list)
    failed: list[tuple[Report, BaseException]] = field(default_factory=list)


def record(sessions: Any, batch: list[Report], retrying: Any, vet: Vet | None = None
           ) -> Recorded:
    """Write ``batch`` (:func:`write_reports`, retried by ``retrying``); when it fails for a
    reason other than the database being away, each report on its own, so that one bad
    report does not lose the others.  Raises only a transient database error."""
    def attempt(reports: list[Report]) -> Recorded:
        done = Recorded(Outbox())  # afresh per try: a retried batch refuses again
        checked = None if vet is None else _noting(vet, done.refused)
        done.outbox = write_reports(sessions, reports, checked)
        return done

    try:
        return retrying(lambda: attempt(batch))
    except Exception as exc:
        if transient_db_error(exc):
            raise  # the database is away: the whole batch waits for it
        if len(batch) == 1:
            return Recorded(Outbox(), failed=[(batch[0], exc)])
    log.warning("batch of %d job reports failed; writing them one by one", len(batch),
                exc_info=True)
    out = Recorded(Outbox())
    for report in batch:
        one = record(sessions, [report], retrying, vet)
        out.outbox.merge(one.outbox)
        out.refused += one.refused
        out.failed += one.failed
    return out


def _noting(vet: Vet, refused: list[tuple[Report, str]]) -> Vet:
    def noted(report: Report, row: Any) -> str | None:
        reason = vet(report, row)
        if reason is not None:
            refused.append((report, reason))
        return reason

    return noted


def write_reports(sessions: Any, batch: list[Report], vet: Vet | None = None) -> Outbox:
    """Apply ``batch`` in one transaction; the outbox to flush after the commit.

    ``vet`` sees each report with its job's row (None if unknown) first; a report it
    gives a reason for is left out.  Without it an unknown job's report is ignored.

    The jobs are read as plain rows (:mod:`grid_tasks.gram.report_rows`), changed by the
    same state rules as ORM rows, and written back at the end, so the database's writer
    lock is held for those statements and the commit only, not while Python decides
    (on a loaded host that time had dominated the lock).
    """
    with session_scope(sessions) as session:
        # Core statements only: no ORM execution layer
        return apply_reports(session.connection(), batch, vet)


def apply_reports(conn: Any, batch: list[Report], vet: Vet | None = None,
                  now: datetime | None = None) -> Outbox:
    """:func:`write_reports` inside the caller's transaction (``conn``: its session's
    connection); the RM's iteration writes the ends it finds only in Redis so
    (:mod:`grid_tasks.scheduling.reconcile`): the same rows, checks and accounting."""
    outbox, changes = Outbox(), Changes()
    now = now or datetime.now(timezone.utc)
    ids = sorted({r.req.job_id for r in batch})
    rows = load(conn, ids)
    accounted = set(conn.execute(_ACCOUNTED, {"ids": ids}).scalars()) if ids else set()
    for report in batch:
        row = rows.get(report.req.job_id)
        if vet is not None and vet(report, row) is not None:
            continue
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

"""The common queries, so shells (CLI, Celery tasks, scheduler) share one spelling of each."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from grid_tasks.errors import NotFoundError
from grid_tasks.states import JobState

from .errors import RecordError
from .models import (
    AccountingRecord,
    CoallocatedJob,
    Job,
    JobStateHistory,
    Node,
    Reservation,
    ResourceManager,
)


def get_job(session: Session, job_id: int, *, for_update: bool = False) -> Job:
    """The job ``job_id``; NotFoundError if there is none.

    ``for_update`` takes a row lock on PostgreSQL (``SELECT ... FOR UPDATE``)
    for callers that must serialise rather than retry; SQLite ignores it.
    """
    stmt = select(Job).where(Job.id == job_id)
    if for_update:
        stmt = stmt.with_for_update()
    job = session.scalars(stmt).first()
    if job is None:
        raise NotFoundError(f"unknown job {job_id!r}")
    return job


def get_job_by_contact(session: Session, contact: str) -> Job:
    """The job with GRAM contact ``contact``; NotFoundError if there is none."""
    job = session.scalars(select(Job).where(Job.contact == contact)).first()
    if job is None:
        raise NotFoundError(f"unknown job contact {contact!r}")
    return job


def find_job_by_idempotency_key(session: Session, key: str) -> Job | None:
    """The job submitted earlier with ``key``, so a retried submission returns it."""
    return session.scalars(select(Job).where(Job.idempotency_key == key)).first()


def jobs_in_states(session: Session, rm: str, states: Iterable[JobState]) -> list[Job]:
    """Jobs of ``rm`` in any of ``states``: highest priority first, then oldest first."""
    wanted = [JobState(s) for s in states]
    stmt = (
        select(Job)
        .where(Job.rm == rm, Job.state.in_(wanted))
        .order_by(Job.priority.desc(), Job.submit_time, Job.id)
    )
    return list(session.scalars(stmt))


def job_history(session: Session, job_id: int) -> list[JobStateHistory]:
    """The state changes of ``job_id`` in the order they were recorded."""
    get_job(session, job_id)
    stmt = (
        select(JobStateHistory)
        .where(JobStateHistory.job_id == job_id)
        .order_by(JobStateHistory.at, JobStateHistory.id)
    )
    return list(session.scalars(stmt))


def get_rm(session: Session, name: str) -> ResourceManager:
    """The resource manager ``name``; NotFoundError listing the known ones."""
    rm = session.get(ResourceManager, name)
    if rm is None:
        known = ", ".join(session.scalars(select(ResourceManager.name).order_by("name")))
        raise NotFoundError(f"unknown resource manager {name!r} (known: {known or 'none'})")
    return rm


def list_rms(session: Session) -> list[ResourceManager]:
    """Every resource manager, by name."""
    return list(session.scalars(select(ResourceManager).order_by(ResourceManager.name)))


def list_nodes(session: Session, rm: str | None = None) -> list[Node]:
    """Every node (of ``rm`` if given), by RM then name."""
    stmt = select(Node).order_by(Node.rm, Node.name)
    if rm is not None:
        get_rm(session, rm)
        stmt = stmt.where(Node.rm == rm)
    return list(session.scalars(stmt))


def get_coallocation(session: Session, coallocation_id: int) -> CoallocatedJob:
    """A coallocated job with its subjobs loaded; NotFoundError if there is none."""
    stmt = (
        select(CoallocatedJob)
        .where(CoallocatedJob.id == coallocation_id)
        .options(selectinload(CoallocatedJob.subjobs))
    )
    found = session.scalars(stmt).first()
    if found is None:
        raise NotFoundError(f"unknown coallocated job {coallocation_id!r}")
    return found


def reservations_overlapping(
    session: Session, rm: str | None, start: datetime, end: datetime
) -> list[Reservation]:
    """Reservations of ``rm`` (all RMs if None) overlapping ``[start, end)``, by start."""
    stmt = (
        select(Reservation)
        .where(Reservation.start_time < end, Reservation.end_time > start)
        .order_by(Reservation.start_time, Reservation.id)
    )
    if rm is not None:
        stmt = stmt.where(Reservation.rm == rm)
    return list(session.scalars(stmt))


def get_reservation(session: Session, rm: str | None, name: str) -> Reservation:
    """The reservation ``name`` of ``rm``; NotFoundError if there is none."""
    stmt = select(Reservation).where(Reservation.rm == rm, Reservation.name == name)
    if rm is None:
        stmt = select(Reservation).where(Reservation.rm.is_(None), Reservation.name == name)
    found = session.scalars(stmt).first()
    if found is None:
        raise NotFoundError(f"unknown reservation {name!r} on {rm or 'the grid'}")
    return found


def record_accounting(session: Session, job: Job, *,
                      unaccounted: bool = False) -> AccountingRecord:
    """The accounting record of a finished job, written once (idempotent).

    Wall time is end - start (0 if it never started); processor-seconds are
    wall time times the job's processors.  ``unaccounted``: the caller knows the
    job has no record yet (checked for a whole batch at once), so none is looked for.
    """
    if job.state is None or not JobState(job.state).terminal:
        raise RecordError(f"job {job.id} is {job.state}; only finished jobs are accounted")
    existing = None if unaccounted else session.scalars(
        select(AccountingRecord).where(AccountingRecord.job_id == job.id)
    ).first()
    if existing is not None:
        return existing
    record = AccountingRecord(**accounting_values(job))
    session.add(record)
    session.flush()
    return record


def accounting_values(job: Any) -> dict[str, Any]:
    """The accounting record's attributes for finished ``job`` (a Job, or any object with
    its attributes): wall time is end - start (0 if it never started), processor-seconds
    wall time times the job's processors."""
    wall = 0.0
    if job.start_time is not None and job.end_time is not None:
        wall = max(0.0, (job.end_time - job.start_time).total_seconds())
    return dict(
        job_id=job.id, rm=job.rm, owner=job.owner, user=job.user, group=job.group,
        account=job.account, job_class=job.job_class, qos=job.qos,
        nodes=dict(job.nodes_allocated or {}), procs=job.procs,
        submit_time=job.submit_time, start_time=job.start_time, end_time=job.end_time,
        wall_seconds=wall, proc_seconds=wall * job.procs, exit_status=job.exit_code,
        final_state=job.state,
    )


def accounting_records(
    session: Session,
    *,
    rm: str | None = None,
    user: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[AccountingRecord]:
    """Accounting records filtered by RM, user and end time ``[since, until)``, oldest first."""
    stmt = select(AccountingRecord).order_by(AccountingRecord.end_time, AccountingRecord.id)
    return list(session.scalars(accounting_filter(stmt, rm=rm, user=user, since=since,
                                                  until=until)))


def accounting_filter(stmt: Any, *, rm: str | None = None, user: str | None = None,
                      since: datetime | None = None, until: datetime | None = None) -> Any:
    """``stmt`` (a select over accounting records) limited to an RM, a user and an end
    time in ``[since, until)``; ``None`` leaves that criterion out."""
    if rm is not None:
        stmt = stmt.where(AccountingRecord.rm == rm)
    if user is not None:
        stmt = stmt.where(AccountingRecord.user == user)
    if since is not None:
        stmt = stmt.where(AccountingRecord.end_time >= since)
    if until is not None:
        stmt = stmt.where(AccountingRecord.end_time < until)
    return stmt


#: Credentials accounting can be grouped by, mapped to their record attribute.
USAGE_KEYS = {"user": "user", "group": "group", "account": "account", "class": "job_class",
              "qos": "qos", "rm": "rm"}


@dataclass(frozen=True)
class Usage:
    """Totals of finished jobs for one credential value (showstats, fairshare)."""

    key: str | None
    jobs: int
    proc_seconds: float
    wall_seconds: float
    wait_seconds: float  # summed over jobs that started

    @property
    def proc_hours(self) -> float:
        return self.proc_seconds / 3600.0


def usage_by(
    session: Session,
    by: str = "user",
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[Usage]:
    """Accounting totals per ``by`` (user, group, account, class, qos or rm), ended in
    ``[since, until)``, heaviest processor use first."""
    if by not in USAGE_KEYS:
        raise RecordError(f"cannot group usage by {by!r} (expected one of "
                          f"{', '.join(USAGE_KEYS)})")
    column = getattr(AccountingRecord, USAGE_KEYS[by])
    proc = func.sum(AccountingRecord.proc_seconds)
    stmt = (select(column, func.count(), proc, func.sum(AccountingRecord.wall_seconds))
            .group_by(column).order_by(proc.desc(), column))
    if since is not None:
        stmt = stmt.where(AccountingRecord.end_time >= since)
    if until is not None:
        stmt = stmt.where(AccountingRecord.end_time < until)
    waits = _wait_totals(session, column, since, until)
    return [Usage(key, jobs, float(p or 0), float(w or 0), waits.get(key, 0.0))
            for key, jobs, p, w in session.execute(stmt)]


def _wait_totals(session: Session, column: Any, since: datetime | None,
                 until: datetime | None) -> dict[str | None, float]:
    # Interval arithmetic differs per backend (SQLite has none); summing in
    # Python over the few columns needed keeps one code path.
    stmt = select(column, AccountingRecord.submit_time, AccountingRecord.start_time).where(
        AccountingRecord.start_time.isnot(None), AccountingRecord.submit_time.isnot(None))
    if since is not None:
        stmt = stmt.where(AccountingRecord.end_time >= since)
    if until is not None:
        stmt = stmt.where(AccountingRecord.end_time < until)
    totals: dict[str | None, float] = {}
    for key, submitted, started in session.execute(stmt):
        totals[key] = totals.get(key, 0.0) + max(0.0, (started - submitted).total_seconds())
    return totals


def purge_finished_jobs(session: Session, ended_before: datetime) -> int:
    """Delete finished jobs that ended before ``ended_before`` and are accounted for.

    History rows go with them; accounting stays.  Jobs without an accounting
    record are kept, so nothing is lost that showstats or fairshare needs.
    Returns how many jobs were deleted.
    """
    accounted = select(AccountingRecord.job_id)
    stmt = select(Job).where(
        Job.state.in_([JobState.DONE, JobState.FAILED]),
        Job.end_time < ended_before,
        Job.id.in_(accounted),
    )
    jobs = list(session.scalars(stmt))
    for job in jobs:
        session.delete(job)
    session.flush()
    return len(jobs)

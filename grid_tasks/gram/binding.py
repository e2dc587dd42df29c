"""Binding a GRAM job to a grid reservation: RSL ``(reservation=NAME)``, like Maui's ADVRES.

The broker reserves resources on an RM for one grid job (:mod:`grid_tasks.scheduling.rm_service`)
and writes ``(resourceManagerContact=RM)(reservation=NAME)`` into the subjob it places.
At submission, in the same transaction as the job row, :func:`bind` checks that the
reservation exists on that RM, is a grid reservation, has not ended and is not bound to
another job; it then binds the job: the reservation's ACL admits that job only
(``acl["jobs"]`` and ``owner_job_id``), and the job's ``early_start`` follows the
reservation's ``allow_early`` flag (forbidden: the job waits for the reservation to
begin even when resources are free earlier).  :func:`unbind` undoes it when the
reservation is vetoed, pruned or released: the job becomes an ordinary idle job.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import Reservation, ReservationKind
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models import JobStateHistory
from grid_tasks.gram.errors import JobRefusedError
from grid_tasks.utc import as_utc

#: The RSL attribute naming the reservation (canonical key).
ATTRIBUTE = "reservation"


class ReservationBindingError(JobRefusedError):
    """A job names a reservation it cannot use (unknown, foreign, ended or taken)."""


def requested_reservation(sub: Any) -> str | None:
    """The ``reservation`` value of a lowered subjob request, or None."""
    for rel in getattr(sub, "relations", ()):
        if rel.key == ATTRIBUTE and rel.values:
            return str(getattr(rel.values[0], "value", rel.values[0]))
    return None


def _refuse(message: str) -> ReservationBindingError:
    return ReservationBindingError(message, code="BAD_RSL")


def bind(session: Session, job: JobRow, sub: Any, now: datetime) -> Reservation | None:
    """Bind ``job`` (flushed, with an id) to the reservation its RSL names, if any.

    Raises :class:`ReservationBindingError` naming the reservation when it cannot be
    used; the caller's transaction then stores nothing.
    """
    name = requested_reservation(sub)
    if name is None:
        return None
    row = session.scalars(select(Reservation).where(Reservation.rm == job.rm,
                                                    Reservation.name == name)).first()
    where = f"reservation {name!r} on {job.rm}"
    if row is None:
        raise _refuse(f"{where} does not exist (RSL attribute reservation)")
    if row.kind is not ReservationKind.GRID:
        raise _refuse(f"{where} is a {row.kind.value} reservation; jobs bind only to grid "
                      "reservations")
    end = as_utc(row.end_time)
    if end <= now:
        raise _refuse(f"{where} ended at {end.isoformat(timespec='seconds')}")
    if row.owner_job_id is not None and row.owner_job_id != job.id:
        raise _refuse(f"{where} is bound to job {row.owner_job_id}; it admits that job only")
    acl = dict(row.acl or {})
    acl["jobs"] = sorted({*map(str, acl.get("jobs") or ()), str(job.id)})
    row.acl = acl
    row.owner_job_id = job.id
    job.early_start = bool((row.resources or {}).get("allow_early", False))
    session.flush()
    return row


def note(session: Session, job: JobRow, reason: str, at: datetime) -> None:
    """A line in the job's history without a state change (why it was unbound...)."""
    session.add(JobStateHistory(job_id=job.id, from_state=job.state, to_state=job.state,
                                reason=reason, at=at))


def unbind(session: Session, row: Reservation, reason: str, now: float | None = None) -> JobRow | None:
    """Detach the job bound to grid reservation ``row`` (if any): it may start anywhere
    and early again, like any idle job; ``reason`` goes into its history."""
    if row.owner_job_id is None:
        return None
    job = session.get(JobRow, row.owner_job_id)
    row.acl = {k: v for k, v in (row.acl or {}).items() if k != "jobs"} | {"jobs": []}
    row.owner_job_id = None
    if job is None:
        return None
    job.early_start = True
    at = datetime.now(timezone.utc) if now is None else datetime.fromtimestamp(now, timezone.utc)
    note(session, job, f"unbound from grid reservation {row.name}: {reason}", at)
    return job

"""Durable job records and their announcements, shared by client, scheduler and job managers.

Every state change goes to SQL first (``record_transition``) and is published on
the job's channel only after the transaction committed, so a waiter that reads
SQL after an event always sees the change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from grid_tasks.db import record_transition, repository
from grid_tasks.db.models import Job as JobRow
from grid_tasks.effects import announce
from grid_tasks.events import JobEvent
from grid_tasks.rsl.errors import GramError
from grid_tasks.states import JobState


@dataclass
class Outbox:
    """Events and iteration triggers to send once the transaction has committed."""

    events: list[JobEvent] = field(default_factory=list)
    rms: set[str] = field(default_factory=set)
    #: coallocated (DUROC) jobs one of whose subjobs ended: their fate is settled after commit
    coallocations: set[int] = field(default_factory=set)

    def merge(self, other: "Outbox") -> None:
        """Add ``other``'s events and triggers to this outbox."""
        self.events += other.events
        self.rms |= other.rms
        self.coallocations |= other.coallocations

    def flush(self, client: Any, app: Any = None) -> None:
        """Send what this outbox holds, after its commit (:func:`grid_tasks.effects.announce`)."""
        announce(self, client, app)


def transition(session: Session, job: JobRow, state: JobState, reason: str | None,
               at: datetime, outbox: Outbox) -> bool:
    """Record a state change and queue its announcement; False if it was a repeat."""
    entry = record_transition(session, job, state, reason, at)
    if entry is None:
        return False
    outbox.events.append(JobEvent(job.id, state.value, reason, at.timestamp()))
    return True


def mark_end(job: Any, gram_error: str | None, exit_code: int | None,
             exit_codes: dict[str, int] | None) -> None:
    """Set an ending job's GRAM error (the first one stands) and exit codes (``job``: a
    Job or any object with its attributes)."""
    if gram_error is not None and job.gram_error is None:
        job.gram_error = gram_error
        job.gram_error_code = GramError(gram_error).number
    if exit_code is not None:
        job.exit_code = exit_code
    if exit_codes:
        job.request = {**(job.request or {}), "exit_codes": dict(exit_codes)}


def finish(session: Session, job: JobRow, state: JobState, reason: str | None,
           at: datetime, outbox: Outbox, *, gram_error: str | None = None,
           exit_code: int | None = None, exit_codes: dict[str, int] | None = None,
           unaccounted: bool = False) -> bool:
    """End a job (DONE or FAILED): state, error, exit codes, accounting, a new iteration.

    Returns False when the job had ended already (its first ending stands).
    ``unaccounted``: known to have no accounting record yet (see record_accounting).
    """
    if JobState(job.state).terminal:
        return False
    mark_end(job, gram_error, exit_code, exit_codes)
    transition(session, job, state, reason, at, outbox)
    if job.coallocation_id is not None:
        outbox.coallocations.add(job.coallocation_id)
    repository.record_accounting(session, job, unaccounted=unaccounted)
    if job.rm:
        outbox.rms.add(job.rm)
    return True

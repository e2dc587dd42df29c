"""Job state changes: the job row and its history updated in one go."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from grid_tasks.errors import NotFoundError
from grid_tasks.states import JobState

from .errors import ConcurrentUpdateError, InvalidTransitionError
from .models import Job, JobStateHistory

# Entering ACTIVE from one of these is a (re)start: the start time is set anew.
_NOT_STARTED = (JobState.UNSUBMITTED, JobState.STAGE_IN, JobState.PENDING)


def _as_state(value: JobState | str) -> JobState:
    try:
        return JobState(value)
    except ValueError:
        known = ", ".join(s.value for s in JobState)
        raise InvalidTransitionError(f"unknown job state {value!r} (known: {known})") from None


def _load(session: Session, job: Job | int) -> Job:
    if isinstance(job, Job):
        return job
    found = session.get(Job, job)
    if found is None:
        raise NotFoundError(f"unknown job {job!r}")
    return found


def apply_transition(row: Any, current: JobState, new: JobState, reason: str | None,
                     at: datetime) -> None:
    """Set ``row``'s state columns for the change ``current`` -> ``new`` (checked): Maui's
    view, the start time (a (re)start), the end time, a failure's reason.  ``row`` is a
    Job or any object with those attributes (the batched report writer's plain rows)."""
    check_transition(current, new)
    row.state = new
    row.maui_state = new.maui
    if new is JobState.ACTIVE and current in _NOT_STARTED:
        row.start_time = at
    if new.terminal:
        row.end_time = at
    if new is JobState.FAILED and reason and not row.failure_reason:
        row.failure_reason = reason


def check_transition(current: JobState, new: JobState) -> None:
    """Refuse what GRAM never does: leaving a terminal state, or going back to UNSUBMITTED."""
    if current.terminal and new is not current:
        raise InvalidTransitionError(f"job is {current.value} already; cannot become {new.value}")
    if new is JobState.UNSUBMITTED and current is not JobState.UNSUBMITTED:
        raise InvalidTransitionError(f"a {current.value} job cannot become UNSUBMITTED again")


def record_transition(
    session: Session,
    job: Job | int,
    new_state: JobState | str,
    reason: str | None,
    at: datetime,
) -> JobStateHistory | None:
    """Move ``job`` to ``new_state`` at ``at`` and append the change to its history.

    Also keeps Maui's view (``maui_state``), the start time (entering ACTIVE
    from a not-started state) and the end time (entering DONE or FAILED) in
    step; a FAILED job keeps ``reason`` as its failure reason unless one is set.
    Repeating the current state is a no-op returning None, so redelivered
    tasks may report twice.  The change is flushed at once: a concurrent
    update of the same job by another session raises
    :class:`ConcurrentUpdateError` (reload and decide again).
    """
    row = _load(session, job)
    job_id = row.id  # read now: after a failed flush the row cannot be refreshed
    new = _as_state(new_state)
    current = JobState(row.state) if row.state is not None else JobState.UNSUBMITTED
    if new is current:
        return None
    apply_transition(row, current, new, reason, at)
    # Attaching through the many-to-one side queues the row without loading the
    # job's whole history collection.
    entry = JobStateHistory(job=row, from_state=current, to_state=new, reason=reason, at=at)
    session.add(entry)
    try:
        session.flush()
    except StaleDataError:
        raise ConcurrentUpdateError(
            f"job {job_id} was changed by another session; not moved to {new.value}"
        ) from None
    return entry

"""SQL side of coallocated jobs: rows, the status snapshots read from them, final states.

A coallocated job is one ``CoallocatedJob`` row with one ``Subjob`` row per
component; each subjob's GRAM job is an ordinary ``Job`` row linked back to it.
The coordination store id of job ``N`` is ``coalloc-N``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from grid_tasks.db.models import CoallocatedJob, Subjob
from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
# re-exported: the snapshots are read from these rows
from grid_tasks.duroc.status import (  # noqa: F401
    CoallocStatus, SubjobStatus, parse_job_ref, store_id,
)
from grid_tasks.states import JobState, SubjobCommsType, SubjobStartType


def outcome(row: Subjob) -> tuple[JobState, str | None]:
    """The subjob's state and reason as DUROC sees it: its GRAM job's, except that a
    GRAM job DONE with a non-zero exit code is a failed subjob (``exit code N``)."""
    gram = row.gram_job
    if gram is None:
        return JobState(row.state), row.failure_reason
    state = JobState(gram.state)
    if state is JobState.DONE and gram.exit_code:
        return JobState.FAILED, f"exit code {gram.exit_code}"
    return state, gram.failure_reason or row.failure_reason


def subjob_status(row: Subjob, info: Any) -> SubjobStatus:
    """``row`` with its barrier entries from the store's ``SubjobInfo`` (None if gone)."""
    gram = row.gram_job
    state, reason = outcome(row)
    return SubjobStatus(row.label or str(row.position), row.position, row.rm,
                        SubjobStartType(row.start_type), SubjobCommsType(row.comms_type),
                        info.size if info is not None else int(gram.procs if gram else 0),
                        state, row.gram_job_id, info.entered if info is not None else None,
                        reason, gram.exit_code if gram is not None else None)


def coalloc_status(row: CoallocatedJob, infos: dict[int, Any]) -> CoallocStatus:
    """The snapshot of ``row``; ``infos`` maps subjob address -> store ``SubjobInfo``."""
    return CoallocStatus(row.id, row.contact or "", JobState(row.state),
                         SqlBarrier(row.barrier_state).value, row.failure_reason,
                         tuple(subjob_status(s, infos.get(s.position)) for s in row.subjobs))


def final_state(row: CoallocatedJob) -> tuple[JobState, str | None] | None:
    """After release: the job's fate from its subjobs' outcomes, or None while running.

    The rule (a subjob *fails* when its GRAM job is FAILED, e.g. cancelled or its node
    lost, or DONE with a non-zero exit code):

    * a ``strict-barrier`` subjob that fails fails the whole job at once (the caller
      then cancels every other subjob);
    * a ``loose-barrier`` or ``no-barrier`` subjob that fails is only reported (its
      state and reason in the snapshot, and in the job's final reason); the job goes on;
    * once every subjob has ended the job is DONE, unless every one of them failed
      (then FAILED: nothing of the job succeeded).
    """
    ended = [(sub, *outcome(sub)) for sub in row.subjobs]
    for sub, state, reason in ended:
        if state is JobState.FAILED and \
                SubjobStartType(sub.start_type) is SubjobStartType.STRICT_BARRIER:
            return JobState.FAILED, f"subjob {sub.label!r} failed: {reason}"
    if not all(sub.gram_job is not None and state.terminal for sub, state, _ in ended):
        return None
    failed = [f"{SubjobStartType(sub.start_type).value} subjob {sub.label!r} failed: {reason}"
              for sub, state, reason in ended if state is JobState.FAILED]
    if failed and len(failed) == len(ended):
        return JobState.FAILED, "every subjob failed: " + "; ".join(failed)
    return JobState.DONE, "; ".join(["all subjobs ended", *failed])


def mark(row: CoallocatedJob, state: JobState, barrier: SqlBarrier | None,
         reason: str | None) -> bool:
    """Set the job's state (first ending wins); True if it changed."""
    if JobState(row.state).terminal:
        return False
    row.state = state
    if barrier is not None:
        row.barrier_state = barrier
        if barrier is SqlBarrier.RELEASED:
            row.released_at = datetime.now(timezone.utc)
    if reason and state.terminal:
        row.failure_reason = reason
    return True

"""SQL side of coallocated jobs: rows, status snapshots, final states.

A coallocated job is one ``CoallocatedJob`` row with one ``Subjob`` row per
component; each subjob's GRAM job is an ordinary ``Job`` row linked back to it.
The coordination store id of job ``N`` is ``coalloc-N``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from grid_tasks.db.models import CoallocatedJob, Subjob
from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
from grid_tasks.duroc.store_errors import SubjobNotFoundError
from grid_tasks.errors import NotFoundError
from grid_tasks.states import JobState, SubjobCommsType, SubjobStartType


def store_id(job_id: int) -> str:
    """The coordination store id of coallocated job ``job_id``."""
    return f"coalloc-{int(job_id)}"


def parse_job_ref(ref: int | str) -> int:
    """A coallocated job id from an id, ``coalloc-N`` or its ``duroc://coalloc/N`` contact."""
    text = str(ref).strip().rstrip("/")
    tail = text.rsplit("/", 1)[-1].rsplit("-", 1)[-1]
    if not tail.isdigit():
        raise NotFoundError(f"not a coallocated job id or contact: {ref!r}")
    return int(tail)


@dataclass(frozen=True)
class SubjobStatus:
    """One subjob at one instant: where it runs, its GRAM state, barrier entries."""

    label: str
    address: int
    rm: str
    start_type: SubjobStartType
    comms_type: SubjobCommsType
    size: int
    state: JobState
    gram_job: int | None = None
    entered: int | None = None
    reason: str | None = None
    exit_code: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "address": self.address, "rm": self.rm,
                "start_type": self.start_type.value, "comms_type": self.comms_type.value,
                "size": self.size, "state": self.state.value, "gram_job": self.gram_job,
                "entered": self.entered, "reason": self.reason, "exit_code": self.exit_code}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SubjobStatus":
        """The inverse of :meth:`to_dict` (the scheduler's answer)."""
        return cls(str(data["label"]), int(data["address"]), str(data["rm"]),
                   SubjobStartType(data["start_type"]), SubjobCommsType(data["comms_type"]),
                   int(data["size"]), JobState(data["state"]), data.get("gram_job"),
                   data.get("entered"), data.get("reason"), data.get("exit_code"))


@dataclass(frozen=True)
class CoallocStatus:
    """A coallocated job's snapshot (``subjob_states``): job state, barrier, subjobs."""

    id: int
    contact: str
    state: JobState
    barrier: str
    reason: str | None = None
    subjobs: tuple[SubjobStatus, ...] = field(default_factory=tuple)

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    def subjob(self, label: str) -> SubjobStatus:
        for sub in self.subjobs:
            if sub.label == label:
                return sub
        raise SubjobNotFoundError(f"no subjob labelled {label!r}", job=store_id(self.id))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "contact": self.contact, "state": self.state.value,
                "barrier": self.barrier, "reason": self.reason,
                "subjobs": [s.to_dict() for s in self.subjobs]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CoallocStatus":
        """The inverse of :meth:`to_dict` (the scheduler's answer)."""
        return cls(int(data["id"]), str(data["contact"]), JobState(data["state"]),
                   str(data["barrier"]), data.get("reason"),
                   tuple(SubjobStatus.from_dict(s) for s in data.get("subjobs") or ()))


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

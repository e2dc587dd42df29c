"""Shared look-ups of the operator commands: job identifiers, RMs, queue sections."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from grid_tasks.db import Job, repository
from grid_tasks.db.models import ResourceManager
from grid_tasks.errors import NotFoundError
from grid_tasks.ops.timefmt import OpsError
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.utc import epoch, from_epoch  # noqa: F401 - re-exported for ops

#: Maui states that put a job in showq's BLOCKED section whatever its GRAM state
BLOCKED_MAUI = frozenset({MauiJobState.HOLD, MauiJobState.DEFERRED, MauiJobState.BLOCKED})
#: GRAM states of a job that holds resources (showq's ACTIVE section)
ACTIVE_GRAM = frozenset({JobState.ACTIVE, JobState.SUSPENDED, JobState.STAGE_OUT})


class Section(str, Enum):
    """The showq section a job belongs to."""

    ACTIVE = "active"
    IDLE = "idle"
    BLOCKED = "blocked"
    COMPLETED = "completed"


def resolve_job(session: Session, ident: str | int) -> Job:
    """The job named by its numeric id or its GRAM contact; NotFoundError otherwise."""
    text = str(ident).strip()
    if text.isdigit():
        return repository.get_job(session, int(text))
    try:
        return repository.get_job_by_contact(session, text)
    except NotFoundError:
        raise NotFoundError(f"unknown job {text!r} (give a job id or a job contact)") from None


_RM_NAME = ResourceManager.__table__.c.name
#: (a Core read of the name: the ORM's would configure every mapper first)
_KNOWN_RM = select(_RM_NAME).where(_RM_NAME == bindparam("rm"))


def check_rm(session: Session, rm: str | None) -> None:
    """NotFoundError (listing the known RMs) when ``rm`` is given and unknown."""
    if rm is not None and session.connection().execute(_KNOWN_RM, {"rm": rm}).first() is None:
        repository.get_rm(session, rm)  # raises, naming the known RMs


def scheduled_rms(session: Session, rm: str | None) -> list[str]:
    """The RMs a Maui view covers: ``rm`` (NotFoundError if unknown), else every RM
    with nodes of ours.  A Slurm cluster has none (Slurm schedules it): named alone
    it is refused, saying where its jobs show (showq, checkjob)."""
    if rm is None:
        return [r.name for r in repository.list_rms(session) if r.nodes]
    if not repository.get_rm(session, rm).nodes:
        raise OpsError(f"{rm} has no nodes of grid_tasks (a Slurm cluster schedules its "
                       "jobs itself): its jobs show in showq and checkjob")
    return [rm]


def finished_ids(session: Session, ids: Iterable[int]) -> set[int]:
    """Which of ``ids`` are jobs that finished successfully (satisfied dependencies)."""
    wanted = {int(i) for i in ids}
    if not wanted:
        return set()
    jobs = Job.__table__.c
    stmt = select(jobs.id).where(jobs.id.in_(wanted), jobs.state == JobState.DONE)
    return set(session.connection().scalars(stmt))


def unmet_dependencies(job: Job, done: set[int]) -> list[int]:
    """The job's dependencies that have not finished successfully."""
    return [int(d) for d in (job.dependencies or []) if int(d) not in done]


def section_of(job: Job, done: set[int]) -> Section:
    """Where showq lists the job: ACTIVE, IDLE, BLOCKED (held, deferred, waiting on a
    dependency) or COMPLETED."""
    state = JobState(job.state)
    if state.terminal:
        return Section.COMPLETED
    if state in ACTIVE_GRAM or job.maui_state in (MauiJobState.RUNNING, MauiJobState.STARTING):
        return Section.ACTIVE
    if job.maui_state in BLOCKED_MAUI or job.holds or unmet_dependencies(job, done):
        return Section.BLOCKED
    return Section.IDLE


def state_word(job: Job, section: Section) -> str:
    """Maui's word for the job in its section (the GRAM state is shown beside it)."""
    if section is Section.ACTIVE:
        if JobState(job.state) is JobState.SUSPENDED:
            return "Suspended"
        return "Starting" if job.maui_state is MauiJobState.STARTING else "Running"
    if section is Section.BLOCKED:
        if job.maui_state in BLOCKED_MAUI:
            return job.maui_state.value
        return "Hold" if job.holds else "Blocked"
    return "Idle"



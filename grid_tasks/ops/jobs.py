"""``checkjob`` and ``canceljob``: one job (GRAM or coallocated) in full, and cancelling
jobs through the Grid API."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import ConcurrentUpdateError, Job, Reservation, repository
from grid_tasks.db.models import CoallocatedJob
from grid_tasks.duroc.records import coalloc_status, parse_job_ref
from grid_tasks.errors import NotFoundError
from grid_tasks.gram.errors import JobFinishedError
from grid_tasks.gram.status import parse_contact
from grid_tasks.states import JobState

from .common import Section, finished_ids, resolve_job, section_of, state_word
from .queue import Entries
from .timefmt import iso, json_seconds
from .plan import priority_of
from .why import Reason, explain


@dataclass
class JobReport:
    """Everything checkjob shows about one job."""

    job_id: int
    contact: str | None
    rm: str | None
    section: Section
    state: str  # Maui's view
    gram_state: str
    credentials: dict[str, str | None]
    procs: int
    tasks: int
    walltime: float | None
    #: the scheduler's priority of a waiting job (as ``diagnose -p``); None when the job
    #: is not in its RM's idle queue or no plan was loaded (``--no-plan``)
    priority: float | None
    times: dict[str, datetime | None]
    nodes: dict[str, int]
    reservations: list[dict[str, Any]]
    exit_code: int | None
    gram_error: str | None
    gram_error_code: int | None
    failure_reason: str | None
    holds: list[str]
    dependencies: list[int]
    history: list[dict[str, Any]]
    reasons: list[Reason] = field(default_factory=list)
    coallocation: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "contact": self.contact, "rm": self.rm,
            "section": self.section.value, "state": self.state, "gram_state": self.gram_state,
            "credentials": self.credentials, "procs": self.procs, "tasks": self.tasks,
            "walltime": json_seconds(self.walltime),
            "priority": None if self.priority is None else round(self.priority, 4),
            "times": {k: iso(v) for k, v in self.times.items()}, "nodes": self.nodes,
            "reservations": self.reservations, "exit_code": self.exit_code,
            "gram_error": self.gram_error, "gram_error_code": self.gram_error_code,
            "failure_reason": self.failure_reason, "holds": self.holds,
            "dependencies": self.dependencies, "history": self.history,
            "reasons": [r.to_dict() for r in self.reasons], "coallocation": self.coallocation,
        }


def job_reservations(session: Session, job: Job) -> list[Reservation]:
    """SQL reservations made for the job (owner) or admitting it by job id."""
    rows = session.scalars(select(Reservation).where(Reservation.rm == job.rm)
                           .order_by(Reservation.start_time, Reservation.id))
    return [r for r in rows if r.owner_job_id == job.id
            or str(job.id) in {str(j) for j in (r.acl or {}).get("jobs", ())}]


def reservation_summary(res: Reservation) -> dict[str, Any]:
    """The JSON-ready essentials of a SQL reservation."""
    return {"name": res.name, "kind": res.kind.value, "start": iso(res.start_time),
            "end": iso(res.end_time), "nodes": list(res.nodes or [])}


def check_job(session: Session, ident: str | int, now: datetime,
              plan: Any | None = None) -> JobReport:
    """checkjob: the job's state, credentials, times, nodes, reservations, GRAM error,
    history and, for a job that waits, why (``plan``: see :func:`grid_tasks.ops.why.explain`)."""
    job = resolve_job(session, ident)
    done = finished_ids(session, job.dependencies or [])
    section = section_of(job, done)
    history = [{"from": h.from_state.value if h.from_state else None, "to": h.to_state.value,
                "reason": h.reason, "at": iso(h.at)}
               for h in repository.job_history(session, job.id)]
    reasons: list[Reason] = []
    if section in (Section.IDLE, Section.BLOCKED):
        reasons = explain(session, job, now, plan)
    coalloc = None
    if job.coallocation_id is not None:
        coalloc = {"id": job.coallocation_id, "label": job.coallocation_label}
    return JobReport(
        job_id=job.id, contact=job.contact, rm=job.rm, section=section,
        state=state_word(job, section) if section is not Section.COMPLETED
        else job.maui_state.value, gram_state=JobState(job.state).value,
        credentials={"owner": job.owner, "user": job.user, "group": job.group,
                     "account": job.account, "class": job.job_class, "qos": job.qos},
        procs=job.procs, tasks=job.tasks,
        walltime=float(job.walltime) if job.walltime else None,
        priority=priority_of(plan.priorities).get(job.id) if plan is not None else None,
        times={"submit": job.submit_time, "start": job.start_time, "end": job.end_time},
        nodes=dict(job.nodes_allocated or {}),
        reservations=[reservation_summary(r) for r in job_reservations(session, job)],
        exit_code=job.exit_code, gram_error=job.gram_error, gram_error_code=job.gram_error_code,
        failure_reason=job.failure_reason, holds=list(job.holds or []),
        dependencies=[int(d) for d in job.dependencies or []], history=history,
        reasons=reasons, coallocation=coalloc)


@dataclass
class CoallocReport:
    """Everything checkjob shows about one coallocated (DUROC) job."""

    status: Any  # grid_tasks.duroc.records.CoallocStatus
    owner: str | None
    barrier_timeout: float | None
    times: dict[str, datetime | None]
    rsl: str | None

    def to_dict(self) -> dict[str, Any]:
        # the snapshot's keys (as ``coalloc states --json``) plus the SQL record's
        return {**self.status.to_dict(), "owner": self.owner,
                "barrier_timeout": json_seconds(self.barrier_timeout),
                "times": {k: iso(v) for k, v in self.times.items()}, "rsl": self.rsl}


def is_coalloc_ref(ident: str | int) -> bool:
    """Whether checkjob's JOB names a coallocated job (``duroc://coalloc/N``, ``coalloc-N``)."""
    return str(ident).strip().startswith(("duroc://", "coalloc-"))


def check_coalloc(session: Session, ident: str | int,
                  entries: Entries | None = None) -> CoallocReport:
    """checkjob of a coallocated job: state, barrier, reason, times and every subjob
    (label, RM, GRAM job, start and comms types, state, barrier entries from ``entries``).

    A pure read, as ``Grid.subjob_states`` is.
    """
    job_id = parse_job_ref(ident)
    row = session.get(CoallocatedJob, job_id)
    if row is None:
        raise NotFoundError(f"no coallocated job {job_id}")
    status = coalloc_status(row, entries(job_id) if entries else {})
    return CoallocReport(status, row.owner, row.barrier_timeout,
                         {"created": row.created_at, "released": row.released_at}, row.rsl)


#: Attempts at a cancel that keeps racing the scheduler's writes to the same job row.
CANCEL_ATTEMPTS = 5


def _cancel_retrying(grid: "Canceller", job_id: int, rm: str) -> Any:
    """``grid.cancel`` at the job's RM; an optimistic-lock conflict (the live iteration
    updated the row at the same moment) means reload and decide again, so it is
    retried briefly."""
    for attempt in range(CANCEL_ATTEMPTS):
        try:
            return grid.cancel(job_id, rm=rm)
        except ConcurrentUpdateError:
            if attempt == CANCEL_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


class Canceller(Protocol):
    """What canceljob needs of the Grid API (``grid_tasks.client.Grid``)."""

    def cancel(self, job_id: int, *, rm: str | None = None) -> Any: ...

    def status(self, job_id: int, *, rm: str | None = None) -> Any: ...


#: How long canceljob waits for a running job's kill to end it (seconds): GRAM's
#: cancel returns at once, the processes die on their nodes a moment later.
CANCEL_SETTLE_S = 5.0


def cancel_jobs(session: Session, grid: Canceller, idents: Iterable[str], *,
                settle: float = CANCEL_SETTLE_S) -> list[dict[str, Any]]:
    """canceljob: check every job first (unknown or finished: refused, nothing cancelled),
    then cancel each through the Grid API; returns ``{job_id, previous_state, state,
    settled}`` for each.  A running job is killed on its nodes after the answer, so its
    state is asked again for up to ``settle`` s: ``state`` is the one the cancel led to
    (FAILED) and ``settled`` False says the kill was still under way."""
    jobs = []
    for ident in idents:
        job = resolve_job(session, ident)
        if JobState(job.state).terminal:
            raise JobFinishedError(f"job {job.id} already finished ({JobState(job.state).value});"
                                   f" nothing was cancelled", code="JOB_CANCEL_FAILED")
        jobs.append(job)
    session.rollback()  # release the read transaction before the Grid API writes
    out = []
    for job in jobs:
        state = _settled(grid, job.id, job.rm, _cancel_retrying(grid, job.id, job.rm), settle)
        out.append({"job_id": job.id, "previous_state": JobState(job.state).value,
                    "state": getattr(state, "value", state),
                    "settled": state is not None and JobState(state).terminal})
    return out


def _settled(grid: Canceller, job_id: int, rm: str, status: Any, settle: float) -> Any:
    """The job's state once it ends, or its last state after ``settle`` seconds (None
    when the Grid API told none)."""
    state = getattr(status, "state", None)
    deadline = time.monotonic() + settle
    while state is not None and not JobState(state).terminal and time.monotonic() < deadline:
        time.sleep(0.1)
        state = getattr(grid.status(job_id, rm=rm), "state", None)
    return state


#: canceljob's ``state`` of a cancel the gatekeeper took while the database was away.
ACCEPTED = "cancel accepted"


def cancel_unchecked(grid: Canceller, idents: Iterable[str]) -> list[dict[str, Any]]:
    """canceljob while the grid's database is away: nothing can be checked here, so each
    job is asked of its gatekeeper (the RM of a contact, else the scheduler's door),
    which checks what it can and accepts the cancel to apply it once SQL is back;
    ``state`` is the job's state if the gatekeeper knew it, else ``cancel accepted``."""
    out = []
    for ident in idents:
        text = str(ident).strip()
        job_id, rm = (int(text), None) if text.isdigit() else parse_contact(text)
        status = grid.cancel(job_id, rm=rm)
        state = getattr(status, "state", None)
        out.append({"job_id": job_id, "previous_state": "unknown (database away)",
                    "state": state.value if state is not None else ACCEPTED,
                    "settled": False})
    return out


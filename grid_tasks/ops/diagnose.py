"""``diagnose -p`` (priority breakdown per idle job) and ``diagnose -j`` (why jobs wait)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import Job
from grid_tasks.states import JobState

from .common import Section, check_rm, finished_ids, resolve_job, section_of
from .plan import load_plan, priorities
from .why import Reason, explain

_LIVE = [s for s in JobState if not s.terminal]


@dataclass(frozen=True)
class PriorityRow:
    """One idle job's priority: total and weighted components (CRED, FS, SERV, RES...)."""

    job_id: int
    user: str | None
    total: float
    components: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "user": self.user, "total": round(self.total, 4),
                "components": {k: round(v, 4) for k, v in self.components.items()}}


def diagnose_priority(session: Session, rm: str, now: datetime, *,
                      registry: Any = None) -> list[PriorityRow]:
    """Every idle job of ``rm`` with its priority breakdown, highest priority first."""
    rows = [p for p in priorities(session, rm, now, registry=registry) if p.job_id.isdigit()]
    ids = [int(p.job_id) for p in rows]
    users = dict(session.execute(select(Job.id, Job.user).where(Job.id.in_(ids))).all()) if ids else {}
    return [PriorityRow(int(p.job_id), users.get(int(p.job_id)), p.total, dict(p.components))
            for p in rows]


@dataclass(frozen=True)
class JobDiagnosis:
    """Why one waiting job does not start."""

    job_id: int
    rm: str | None
    user: str | None
    state: str
    reasons: list[Reason]

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "rm": self.rm, "user": self.user, "state": self.state,
                "reasons": [r.to_dict() for r in self.reasons]}


def diagnose_jobs(session: Session, now: datetime, *, job: str | None = None,
                  rm: str | None = None, registry: Any = None) -> list[JobDiagnosis]:
    """Reasons for one job, or for every idle and blocked job (of ``rm`` if given)."""
    check_rm(session, rm)
    if job is not None:
        rows = [resolve_job(session, job)]
    else:
        stmt = select(Job).where(Job.state.in_(_LIVE)).order_by(Job.id)
        if rm is not None:
            stmt = stmt.where(Job.rm == rm)
        rows = list(session.scalars(stmt))
    done = finished_ids(session, {d for r in rows for d in (r.dependencies or [])})
    plans: dict[str, Any] = {}
    out = []
    for row in rows:
        section = section_of(row, done)
        if section in (Section.ACTIVE, Section.COMPLETED):
            if job is not None:
                out.append(JobDiagnosis(row.id, row.rm, row.user, JobState(row.state).value,
                                        [Reason("state", f"not waiting: the job is "
                                                         f"{JobState(row.state).value}")]))
            continue
        if row.rm is not None and row.rm not in plans:
            plans[row.rm] = load_plan(session, row.rm, now, registry=registry)
        reasons = explain(session, row, now, plans.get(str(row.rm)))
        out.append(JobDiagnosis(row.id, row.rm, row.user, section.value, reasons))
    return out

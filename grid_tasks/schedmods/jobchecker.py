"""The job checker module (seed 004, 3.5): accounting, purge, retry of deferred jobs.

Every check, in one transaction of the session factory it was given:

1. every finished job (DONE, or FAILED -- cancelled jobs end FAILED) gets its
   accounting record (:func:`grid_tasks.db.repository.record_accounting`, idempotent);
2. accounted jobs that ended more than ``JOBPURGETIME`` ago are purged
   (0 keeps them forever, as in Maui);
3. deferred jobs (Maui state ``Deferred``) go back to ``Idle`` once ``DEFERTIME``
   has passed since their deferral.  :func:`defer_job` is how a job is deferred: it
   counts deferrals, and the deferral past ``DEFERCOUNT`` puts the job on a
   ``batch`` hold instead (Maui's DEFERCOUNT).

The deferral count and time live in the job's ``request`` JSON under ``maui_defer``
(the jobs table has no columns for them).  A job found ``Deferred`` without them (set
by someone else) is adopted: its deferral time is the time of the check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, select

from grid_tasks.db import repository, session_scope
from grid_tasks.db.models import AccountingRecord, Job
from grid_tasks.errors import ConfigError, GridTasksError
from grid_tasks.maui.model import IterationResult
from grid_tasks.maui.modules import SchedModule, register_module
from grid_tasks.schedmods.context import ModuleContext, current_context
from grid_tasks.states import JobState, MauiJobState

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.orm import Session

    from grid_tasks.maui.cfg import MauiConfig
    from grid_tasks.maui.scheduler import Scheduler

log = logging.getLogger(__name__)

#: Key of the deferral bookkeeping inside ``Job.request``.
DEFER_KEY = "maui_defer"
#: The hold a job gets when it was deferred more than DEFERCOUNT times.
DEFER_HOLD = "batch"
_TERMINAL = (JobState.DONE, JobState.FAILED)


@dataclass(frozen=True)
class DeferPolicy:
    """Maui's DEFERTIME (seconds) and DEFERCOUNT."""

    defer_time: float = 3600.0
    defer_count: int = 24

    @classmethod
    def from_config(cls, cfg: "MauiConfig") -> "DeferPolicy":
        return cls(float(cfg.get("DEFERTIME")), int(cfg.get("DEFERCOUNT")))


@dataclass
class CheckReport:
    """What one check did: job ids accounted, purged count, released and held jobs."""

    accounted: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)  # accounted jobs that were cancelled
    purged: int = 0
    released: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"accounted": self.accounted, "cancelled": self.cancelled,
                "purged": self.purged, "released": self.released, "held": self.held}


def _at(now: float) -> datetime:
    return datetime.fromtimestamp(now, tz=timezone.utc)


def _defer_info(job: Job) -> dict[str, Any] | None:
    info = (job.request or {}).get(DEFER_KEY)
    return info if isinstance(info, dict) else None


def _set_defer_info(job: Job, info: dict[str, Any]) -> None:
    # A new dict: JSON columns only notice reassignment.
    job.request = {**(job.request or {}), DEFER_KEY: info}


def defer_job(session: "Session", job: Job | int, now: float, policy: DeferPolicy,
              reason: str = "cannot run now") -> MauiJobState:
    """Defer an idle job (Maui ``Deferred``) or, past DEFERCOUNT deferrals, hold it.

    Returns the Maui state the job was left in (``Deferred`` or ``Hold``).
    """
    row = job if isinstance(job, Job) else repository.get_job(session, job)
    if JobState(row.state) is not JobState.PENDING:
        raise GridTasksError(f"job {row.id} is {JobState(row.state).value}; only a pending "
                             "job can be deferred")
    count = int((_defer_info(row) or {}).get("count", 0)) + 1
    _set_defer_info(row, {"count": count, "since": now, "reason": reason})
    if count > policy.defer_count:
        row.holds = sorted(set(row.holds or ()) | {DEFER_HOLD})
        row.maui_state = MauiJobState.HOLD
        log.warning("job %s deferred %d times (DEFERCOUNT %d): batch hold; last reason: %s",
                    row.id, count, policy.defer_count, reason)
    else:
        row.maui_state = MauiJobState.DEFERRED
        log.info("job %s deferred (%d/%d): %s", row.id, count, policy.defer_count, reason)
    session.flush()
    return row.maui_state


def _in_rm(stmt: Any, rm: str | None) -> Any:
    return stmt if rm is None else stmt.where(Job.rm == rm)


def account_finished(session: "Session", rm: str | None, report: CheckReport) -> None:
    """Give every finished job without one its accounting record."""
    stmt = _in_rm(select(Job).where(
        Job.state.in_(_TERMINAL),
        Job.id.not_in(select(AccountingRecord.job_id))).order_by(Job.id), rm)
    for job in session.scalars(stmt):
        repository.record_accounting(session, job)
        report.accounted.append(job.id)
        if job.gram_error in ("USER_CANCELLED", "SYSTEM_CANCELLED"):
            report.cancelled.append(job.id)


def purge_old(session: "Session", purge_after: float, now: float, rm: str | None,
              report: CheckReport) -> None:
    """Purge accounted jobs that ended ``purge_after`` seconds before ``now`` (0: never)."""
    if purge_after <= 0:
        return
    cutoff = _at(now) - timedelta(seconds=purge_after)
    if rm is None:
        report.purged = repository.purge_finished_jobs(session, cutoff)
        return
    # The repository purges grid-wide; one RM's checker must only purge its own jobs.
    ids = set(session.scalars(select(Job.id).where(
        Job.rm == rm, Job.state.in_(_TERMINAL), Job.end_time < cutoff,
        Job.id.in_(select(AccountingRecord.job_id)))))
    for job in session.scalars(select(Job).where(Job.id.in_(ids))):
        session.delete(job)
    session.flush()
    report.purged = len(ids)


_DEFERRED = select(Job).where(Job.state == JobState.PENDING,
                              Job.maui_state == MauiJobState.DEFERRED)
# Built once: every live iteration without the jobchecker module runs it.
_DEFERRED_IN_RM = _DEFERRED.where(Job.rm == bindparam("rm")).order_by(Job.id)


def release_deferred(session: "Session", policy: DeferPolicy, now: float, rm: str | None,
                     report: CheckReport) -> None:
    """Send deferred jobs whose DEFERTIME is over back to Idle."""
    if rm is None:
        deferred = session.scalars(_DEFERRED.order_by(Job.id))
    else:
        deferred = session.scalars(_DEFERRED_IN_RM, {"rm": rm})
    for job in deferred:
        info = _defer_info(job)
        if info is None or not isinstance(info.get("since"), (int, float)):
            _set_defer_info(job, {"count": 1, "since": now, "reason": "adopted"})
            continue
        if now - float(info["since"]) >= policy.defer_time:
            job.maui_state = MauiJobState.IDLE
            report.released.append(job.id)
    session.flush()


def check_jobs(session: "Session", *, now: float, policy: DeferPolicy,
               purge_after: float, rm: str | None = None) -> CheckReport:
    """One full check inside ``session`` (the caller commits)."""
    report = CheckReport()
    account_finished(session, rm, report)
    purge_old(session, purge_after, now, rm, report)
    release_deferred(session, policy, now, rm, report)
    return report


@register_module("jobchecker")
class JobChecker(SchedModule):
    """Runs :func:`check_jobs` after every iteration (and at shutdown)."""

    def __init__(self, cfg: "MauiConfig | None" = None,
                 context: ModuleContext | None = None) -> None:
        self.context = context or current_context()
        cfg = cfg or self.context.maui_config()
        self.policy = DeferPolicy.from_config(cfg)
        self.purge_after = float(cfg.get("JOBPURGETIME"))
        self.last: CheckReport | None = None
        self.errors: list[str] = []
        if self.context.sessions is None and self.context.session is None:
            raise ConfigError("the jobchecker module needs a SQL session factory "
                              "(ModuleContext.sessions) or an open session", key="MODULES")

    def check(self, now: float) -> CheckReport:
        """One check at ``now`` (POSIX seconds): committed in its own transaction, or
        flushed into the context's open session (its owner commits)."""
        args: dict[str, Any] = {"now": now, "policy": self.policy,
                                "purge_after": self.purge_after, "rm": self.context.rm}
        if self.context.session is not None:
            report = check_jobs(self.context.session, **args)
        else:
            with session_scope(self.context.sessions) as session:  # type: ignore[arg-type]
                report = check_jobs(session, **args)
        self.last = report
        if report.accounted or report.purged or report.released:
            log.info("job checker: accounted %s (cancelled %s), purged %d, released %s",
                     report.accounted, report.cancelled, report.purged, report.released)
        return report

    def _safe_check(self, now: float) -> None:
        if self.context.session is not None:
            # Inside the caller's transaction a failure leaves it unusable: let the
            # caller see it and roll back, like any other SQL error of its iteration.
            self.check(now)
            return
        try:
            self.check(now)
        except Exception as exc:  # housekeeping must not stop the scheduling iteration
            self.errors.append(f"{type(exc).__name__}: {exc}")
            log.error("job checker failed: %s: %s", type(exc).__name__, exc)

    def on_start(self, scheduler: "Scheduler") -> None:
        """Nothing: the live loop builds a scheduler per iteration; checks follow iterations."""

    def on_iteration(self, scheduler: "Scheduler", result: IterationResult) -> None:
        self._safe_check(result.now)

    def on_shutdown(self, scheduler: "Scheduler") -> None:
        self._safe_check(self.context.clock())

"""``showstats``: accounting summaries per grid, RM or credential (user, group, account).

Figures come from the SQL accounting records (one per finished job) plus the jobs
running now.  XFactor is Maui's expansion factor (wait + walltime limit) / walltime
limit with the requested walltime when the job row still exists, else its run time
(a purged job).  ``share`` is the credential's share of all processor-hours shown;
``fairshare`` is, per RM with a FSPOLICY, the decayed usage over FSDEPTH windows of
FSINTERVAL that the RM's Maui core computes (:mod:`grid_tasks.ops.diag_fs`), next to
the credential's target.  Per-period figures: :mod:`grid_tasks.ops.stats_history`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import AccountingRecord, Job
from grid_tasks.db.repository import accounting_filter
from grid_tasks.states import JobState

from .common import ACTIVE_GRAM, check_rm
from .diag_fs import diagnose_fairshare
from .timefmt import OpsError, iso

#: showstats grouping -> accounting/job attribute
GROUPINGS = {"user": "user", "group": "group", "account": "account", "rm": "rm"}
#: credential groupings -> the Maui core's fairshare credential kind
FS_KINDS = {"user": "USER", "group": "GROUP", "account": "ACCOUNT"}


@dataclass
class CredentialStats:
    """One credential's (or the whole system's) totals."""

    key: str | None
    active_jobs: int = 0
    active_procs: int = 0
    jobs: int = 0
    succeeded: int = 0
    failed: int = 0
    proc_seconds: float = 0.0
    wait_seconds: float = 0.0
    waited_jobs: int = 0
    xfactors: list[float] = field(default_factory=list)
    share: float = 0.0  # percent of all processor-hours shown
    #: rm -> {"usage": decayed percent as the core computes it, "target": "20+" | None}
    fairshare: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def proc_hours(self) -> float:
        return self.proc_seconds / 3600.0

    @property
    def mean_wait(self) -> float | None:
        return self.wait_seconds / self.waited_jobs if self.waited_jobs else None

    @property
    def mean_xfactor(self) -> float | None:
        return sum(self.xfactors) / len(self.xfactors) if self.xfactors else None

    @property
    def max_xfactor(self) -> float | None:
        return max(self.xfactors) if self.xfactors else None

    def to_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)
        return {"key": self.key, "active_jobs": self.active_jobs,
                "active_procs": self.active_procs, "jobs": self.jobs,
                "succeeded": self.succeeded, "failed": self.failed,
                "proc_hours": r(self.proc_hours), "mean_wait": r(self.mean_wait),
                "mean_xfactor": r(self.mean_xfactor), "max_xfactor": r(self.max_xfactor),
                "fairshare_percent": r(self.share),
                "fairshare": {rm: {"usage": r(v["usage"]), "target": v["target"]}
                              for rm, v in self.fairshare.items()}}


@dataclass
class Stats:
    """showstats output: the total and, when grouped, one row per credential."""

    rm: str | None
    by: str | None
    since: datetime | None
    total: CredentialStats
    rows: list[CredentialStats]

    def to_dict(self) -> dict[str, Any]:
        return {"rm": self.rm, "by": self.by, "since": iso(self.since),
                "total": self.total.to_dict(), "rows": [r.to_dict() for r in self.rows]}


def _wait(rec: Any) -> float | None:
    if rec.submit_time is None or rec.start_time is None:
        return None
    return (rec.start_time - rec.submit_time).total_seconds()


def _xfactor(rec: Any, walltime: int | None) -> float | None:
    wait = _wait(rec)
    if wait is None:
        return None
    limit = float(walltime) if walltime else rec.wall_seconds
    return (wait + limit) / limit if limit > 0 else None


def _add_record(stats: CredentialStats, rec: Any, walltime: int | None) -> None:
    stats.jobs += 1
    if rec.final_state is JobState.DONE and not rec.exit_status:
        stats.succeeded += 1
    else:
        stats.failed += 1
    stats.proc_seconds += rec.proc_seconds
    wait = _wait(rec)
    if wait is not None:
        stats.wait_seconds += max(0.0, wait)
        stats.waited_jobs += 1
    xf = _xfactor(rec, walltime)
    if xf is not None:
        stats.xfactors.append(xf)


def show_stats(session: Session, *, by: str | None = None, rm: str | None = None,
               since: datetime | None = None, until: datetime | None = None,
               now: datetime | None = None) -> Stats:
    """Totals of finished jobs ended in ``[since, until)`` and of the running jobs, for
    ``rm`` (all if None), grouped ``by`` user/group/account/rm when given; with ``now``
    the credential rows get the core's fairshare usage (see :func:`add_fairshare`)."""
    if by is not None and by not in GROUPINGS:
        raise OpsError(f"cannot group statistics by {by!r} (expected one of "
                       f"{', '.join(GROUPINGS)})")
    check_rm(session, rm)
    records = _records(session, rm, since, until)
    walltimes = _walltimes(session, [r.job_id for r in records])
    total = CredentialStats(None)
    groups: dict[str | None, CredentialStats] = defaultdict(lambda: CredentialStats(None))
    attr = GROUPINGS.get(by or "", None)
    for rec in records:
        _add_record(total, rec, walltimes.get(rec.job_id))
        if attr is not None:
            _add_record(groups[getattr(rec, attr)], rec, walltimes.get(rec.job_id))
    stmt = select(Job).where(Job.state.in_(list(ACTIVE_GRAM)))
    if rm is not None:
        stmt = stmt.where(Job.rm == rm)
    for job in session.scalars(stmt):
        for stats in ([total] + ([groups[getattr(job, attr)]] if attr else [])):
            stats.active_jobs += 1
            stats.active_procs += job.procs
    rows = []
    for key, stats in groups.items():
        stats.key = key
        stats.share = 100.0 * stats.proc_seconds / total.proc_seconds if total.proc_seconds else 0.0
        rows.append(stats)
    total.share = 100.0 if total.proc_seconds else 0.0
    rows.sort(key=lambda s: (-s.proc_seconds, -s.active_procs, s.key or ""))
    if now is not None and by in FS_KINDS:
        add_fairshare(session, rows, FS_KINDS[by], rm, now)
    return Stats(rm, by, since, total, rows)


def add_fairshare(session: Session, rows: list[CredentialStats], kind: str,
                  rm: str | None, now: datetime) -> None:
    """Each row's decayed fairshare usage and target on every RM (or ``rm``) whose
    FSPOLICY is set, from the RM's Maui core as loaded from SQL."""
    for report in diagnose_fairshare(session, now, rm=rm):
        if not report.enabled:
            continue
        for row in rows:
            found = report.row(kind, row.key)
            row.fairshare[report.rm] = {"usage": found.usage_percent if found else 0.0,
                                        "target": found.target if found else None}


_COLUMNS = (AccountingRecord.job_id, AccountingRecord.user, AccountingRecord.group,
            AccountingRecord.account, AccountingRecord.final_state,
            AccountingRecord.exit_status, AccountingRecord.proc_seconds,
            AccountingRecord.wall_seconds, AccountingRecord.submit_time,
            AccountingRecord.start_time, AccountingRecord.rm)


def _records(session: Session, rm: str | None, since: datetime | None,
             until: datetime | None) -> list[Any]:
    """The accounting columns showstats needs (rows, not ORM objects: many thousands)."""
    stmt = accounting_filter(select(*_COLUMNS), rm=rm, since=since, until=until)
    return list(session.execute(stmt))


def _walltimes(session: Session, ids: list[int]) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for start in range(0, len(ids), 500):  # keep IN lists short on every backend
        chunk = ids[start:start + 500]
        out.update(session.execute(select(Job.id, Job.walltime).where(Job.id.in_(chunk))).all())
    return out

"""``showstats --history day|week|month``: the showstats figures per period.

Periods are UTC calendar days, ISO weeks (from Monday) or calendar months.  In each
period a job counts (jobs, done/failed, wait, xfactor) in the period it *ended* in,
as ``showstats --since`` counts it; processor-hours are those *used within* the
period (a job's processor-seconds spread evenly over its run, running jobs up to
``now``), so that utilization - processor-hours over the processors configured
times the period's length (up to ``now`` for the current one) - is the machine's.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from grid_tasks.db import AccountingRecord, Job, Node

from .common import ACTIVE_GRAM, check_rm
from .stats import _COLUMNS, GROUPINGS, CredentialStats, _add_record, _walltimes
from .timefmt import OpsError, iso

PERIODS = ("day", "week", "month")
#: periods shown when no --since is given
DEFAULT_COUNT = {"day": 7, "week": 8, "month": 6}


def period_start(t: datetime, period: str) -> datetime:
    """The start (UTC) of the ``period`` holding ``t``."""
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    raise OpsError(f"unknown period {period!r} (expected one of {', '.join(PERIODS)})")


def next_start(start: datetime, period: str) -> datetime:
    """The start of the period after the one starting at ``start``."""
    if period == "day":
        return start + timedelta(days=1)
    if period == "week":
        return start + timedelta(days=7)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start.replace(year=year, month=month)


def default_since(now: datetime, period: str) -> datetime:
    """The start of the oldest of the :data:`DEFAULT_COUNT` periods ending with now's."""
    start = period_start(now, period)
    for _ in range(DEFAULT_COUNT[period] - 1):
        start = period_start(start - timedelta(seconds=1), period)
    return start


@dataclass
class Period:
    """One period's totals, rows per key and utilization (percent, None: no processors)."""

    start: datetime
    end: datetime
    total: CredentialStats
    rows: list[CredentialStats] = field(default_factory=list)
    utilization: dict[str | None, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def with_util(stats: CredentialStats) -> dict[str, Any]:
            util = self.utilization.get(stats.key)
            return {**stats.to_dict(), "utilization": None if util is None else round(util, 4)}
        return {"start": iso(self.start), "end": iso(self.end),
                "total": with_util(self.total), "rows": [with_util(r) for r in self.rows]}


@dataclass
class History:
    """showstats --history: the periods, oldest first."""

    period: str
    rm: str | None
    by: str | None
    since: datetime
    until: datetime
    capacity: dict[str, int]  # processors configured per RM
    periods: list[Period]

    def to_dict(self) -> dict[str, Any]:
        return {"period": self.period, "rm": self.rm, "by": self.by, "since": iso(self.since),
                "until": iso(self.until), "capacity": self.capacity,
                "periods": [p.to_dict() for p in self.periods]}


def show_history(session: Session, now: datetime, *, period: str = "day",
                 by: str | None = None, rm: str | None = None,
                 since: datetime | None = None) -> History:
    """The showstats figures per ``period`` from ``since`` (default: the last
    :data:`DEFAULT_COUNT` periods) up to ``now``, grouped ``by`` user/group/account/rm."""
    if period not in PERIODS:
        raise OpsError(f"unknown period {period!r} (expected one of {', '.join(PERIODS)})")
    if by is not None and by not in GROUPINGS:
        raise OpsError(f"cannot group statistics by {by!r} (expected one of "
                       f"{', '.join(GROUPINGS)})")
    check_rm(session, rm)
    first = period_start(since or default_since(now, period), period)
    periods, start = [], first
    while start <= now:
        end = next_start(start, period)
        periods.append(Period(start, end, CredentialStats(None)))
        start = end
    capacity = _capacity(session, rm)
    history = History(period, rm, by, first, now, capacity, periods)
    _fill(session, history, now)
    return history


def _capacity(session: Session, rm: str | None) -> dict[str, int]:
    stmt = select(Node.rm, func.sum(Node.procs)).group_by(Node.rm)
    if rm is not None:
        stmt = stmt.where(Node.rm == rm)
    return {name: int(procs or 0) for name, procs in session.execute(stmt)}


def _fill(session: Session, h: History, now: datetime) -> None:
    attr = GROUPINGS.get(h.by or "")
    starts = [p.start for p in h.periods]  # for bisection
    groups: list[dict[Any, CredentialStats]] = [
        defaultdict(lambda: CredentialStats(None)) for _ in h.periods]
    records = _records(session, h.rm, h.since, now)
    walltimes = _walltimes(session, [r.job_id for r in records])
    for rec in records:
        key = getattr(rec, attr) if attr else None
        index = _index(h.periods, starts, rec.end_time)
        if index is not None:
            targets = [h.periods[index].total] + ([groups[index][key]] if attr else [])
            for stats in targets:
                proc = stats.proc_seconds  # _add_record adds the whole job: undone below
                _add_record(stats, rec, walltimes.get(rec.job_id))
                stats.proc_seconds = proc
        rate = (rec.proc_seconds / rec.wall_seconds if rec.wall_seconds
                else float(rec.procs or 0))
        _spread(h.periods, starts, groups if attr else None, key, rate, rec.start_time,
                rec.end_time)
    for job in _running(session, h.rm):
        key = getattr(job, attr) if attr else None
        _spread(h.periods, starts, groups if attr else None, key, float(job.procs),
                job.start_time, now)
    for p, rows in zip(h.periods, groups):
        _finish(p, rows, attr is not None, h, now)


def _index(periods: list[Period], starts: list[datetime], t: datetime | None) -> int | None:
    """The index of the period holding ``t`` (bisection: thousands of records)."""
    if t is None or not periods or t < periods[0].start:
        return None
    i = bisect_right(starts, t) - 1
    return i if t < periods[i].end else None


def _spread(periods: list[Period], starts: list[datetime],
            groups: list[dict[Any, CredentialStats]] | None,
            key: Any, rate: float, start: datetime | None, end: datetime | None) -> None:
    """Charge ``rate`` processors over ``[start, end)`` to the periods it overlaps (and
    to ``key``'s row of each when ``groups`` are kept)."""
    if start is None or end is None or end <= start:
        return
    first = _index(periods, starts, max(start, periods[0].start)) if periods else None
    for i in range(first if first is not None else len(periods), len(periods)):
        p = periods[i]
        if p.start >= end:
            break
        overlap = (min(end, p.end) - max(start, p.start)).total_seconds()
        if overlap > 0:
            p.total.proc_seconds += rate * overlap
            if groups is not None:
                groups[i][key].proc_seconds += rate * overlap


def _finish(p: Period, rows: dict[Any, CredentialStats], grouped: bool, h: History,
            now: datetime) -> None:
    hours = max(0.0, (min(p.end, now) - p.start).total_seconds()) / 3600.0
    procs = sum(h.capacity.values())
    p.utilization[None] = _percent(p.total.proc_hours, procs * hours)
    for key, stats in rows.items():
        stats.key = key
        stats.share = (100.0 * stats.proc_seconds / p.total.proc_seconds
                       if p.total.proc_seconds else 0.0)
        if h.by == "rm":
            p.utilization[key] = _percent(stats.proc_hours, h.capacity.get(key, 0) * hours)
    p.total.share = 100.0 if p.total.proc_seconds else 0.0
    if grouped:
        p.rows = sorted(rows.values(), key=lambda s: (-s.proc_seconds, s.key or ""))


def _percent(used: float, available: float) -> float | None:
    return 100.0 * used / available if available > 0 else None


def _records(session: Session, rm: str | None, since: datetime, until: datetime) -> list[Any]:
    """Records that ended in the window or ran during it (their processor-hours)."""
    stmt = select(*_COLUMNS, AccountingRecord.procs,
                  AccountingRecord.end_time).where(
        AccountingRecord.end_time >= since,
        or_(AccountingRecord.start_time.is_(None), AccountingRecord.start_time < until))
    if rm is not None:
        stmt = stmt.where(AccountingRecord.rm == rm)
    return list(session.execute(stmt))


def _running(session: Session, rm: str | None) -> list[Job]:
    stmt = select(Job).where(Job.state.in_(list(ACTIVE_GRAM)), Job.start_time.isnot(None))
    if rm is not None:
        stmt = stmt.where(Job.rm == rm)
    return list(session.scalars(stmt))

"""The idle queue's change counter (migration 0004): every writer's change of a row that
is or was an idle job counts once for its RM, in the writer's transaction; other writes
do not count; each count is logged with its job (0005) and the log keeps the last
LOG_KEEP counts.  On SQLite and, when GRID_TASKS_TEST_POSTGRES_URL is set, PostgreSQL
(where the count happens at commit)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import delete, insert, select, text, update

from grid_tasks.db.models import IdleQueueChanges, IdleQueueLog
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models.queue_changes import LOG_KEEP, LOG_PRUNE_EVERY
from grid_tasks.states import JobState, MauiJobState

from .conftest import BACKENDS, two_rm_engine


@pytest.fixture(params=BACKENDS)
def engine(request):
    yield from two_rm_engine(request.param, "gt_qchanges")


def _counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(select(IdleQueueChanges.rm, IdleQueueChanges.changes)).all())


def _job(rm: str, **values) -> dict:
    return {"rm": rm, "state": JobState.PENDING, "maui_state": MauiJobState.IDLE, "tasks": 1,
            "procs": 1, "version": 1, "request": {}, "holds": [], "dependencies": [],
            "nodes_allocated": {}, "priority": 0, "early_start": True,
            "submit_time": datetime.now(timezone.utc), **values}


def _write(engine, stmt, params=None) -> None:
    with engine.begin() as conn:
        conn.execute(stmt, params) if params is not None else conn.execute(stmt)


def test_each_change_of_an_idle_row_counts_once_for_its_rm(engine):
    jobs = JobRow.__table__
    _write(engine, insert(jobs), [_job("rmA"), _job("rmA"), _job("rmB"),
                                  _job("rmA", state=JobState.DONE,
                                       maui_state=MauiJobState.COMPLETED)])
    assert _counts(engine) == {"rmA": 2, "rmB": 1}  # the DONE job is not in a queue
    with engine.connect() as conn:
        ids = list(conn.scalars(select(jobs.c.id).order_by(jobs.c.id)))
    _write(engine, update(jobs).where(jobs.c.id == ids[0]).values(priority=5))  # stays idle
    _write(engine, update(jobs).where(jobs.c.id == ids[1]).values(  # leaves the queue
        maui_state=MauiJobState.STARTING, version=jobs.c.version + 1))
    _write(engine, update(jobs).where(jobs.c.id == ids[3]).values(walltime=9))  # not idle
    assert _counts(engine) == {"rmA": 4, "rmB": 1}
    _write(engine, update(jobs).where(jobs.c.id == ids[1]).values(  # back to Idle
        maui_state=MauiJobState.IDLE))
    _write(engine, update(jobs).where(jobs.c.id == ids[2]).values(rm="rmA"))  # moves RM
    _write(engine, delete(jobs).where(jobs.c.id == ids[0]))
    assert _counts(engine) == {"rmA": 7, "rmB": 2}


def test_a_rolled_back_change_does_not_count(engine):
    with engine.connect() as conn:
        conn.execute(insert(JobRow.__table__), [_job("rmA")])
        conn.rollback()
    assert _counts(engine) == {}
    with engine.begin() as conn:
        conn.execute(text("SELECT 1"))
    assert _counts(engine) == {}


def _log(engine) -> list[tuple[str, int, int]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(
            IdleQueueLog.rm, IdleQueueLog.seq, IdleQueueLog.job_id).order_by(
            IdleQueueLog.rm, IdleQueueLog.seq))]


def test_each_count_is_logged_with_its_job(engine):
    jobs = JobRow.__table__
    _write(engine, insert(jobs), [_job("rmA"), _job("rmB"), _job("rmA")])
    with engine.connect() as conn:
        a1, b1, a2 = conn.scalars(select(jobs.c.id).order_by(jobs.c.id))
    _write(engine, update(jobs).where(jobs.c.id == a2).values(priority=3))
    _write(engine, update(jobs).where(jobs.c.id == b1).values(rm="rmA"))  # leaves B, enters A
    with pytest.raises(RuntimeError), engine.begin() as conn:  # rolled back: not logged
        conn.execute(update(jobs).where(jobs.c.id == a1).values(priority=9))
        raise RuntimeError("rolled back")
    assert _log(engine) == [("rmA", 1, a1), ("rmA", 2, a2), ("rmA", 3, a2), ("rmA", 4, b1),
                            ("rmB", 1, b1), ("rmB", 2, b1)]
    assert _counts(engine) == {"rmA": 4, "rmB": 2}


def test_the_log_keeps_the_last_counts(engine):
    """Once every LOG_PRUNE_EVERY counts the log drops what is older than the last
    LOG_KEEP (the count and old rows seeded: 50,000 real changes take too long here)."""
    jobs, before = JobRow.__table__, LOG_KEEP + 6 * LOG_PRUNE_EVERY - 3
    with engine.begin() as conn:
        conn.execute(insert(IdleQueueChanges.__table__), [{"rm": "rmA", "changes": before}])
        old = [before - LOG_KEEP - 1, before - LOG_KEEP, before - LOG_KEEP + 4,
               before - LOG_KEEP + 5]
        conn.execute(insert(IdleQueueLog.__table__), [
            {"rm": "rmA", "seq": seq, "job_id": 0} for seq in old])
    _write(engine, insert(jobs), [_job("rmA") for _ in range(2)])
    assert [seq for _, seq, _ in _log(engine)] == old + [before + 1, before + 2]  # no prune yet
    _write(engine, insert(jobs), [_job("rmA") for _ in range(2)])  # passes a multiple
    pruned_at = LOG_KEEP + 6 * LOG_PRUNE_EVERY
    assert [seq for _, seq, _ in _log(engine)] == (
        [seq for seq in old if seq > pruned_at - LOG_KEEP] + list(range(before + 1, before + 5)))

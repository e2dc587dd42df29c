"""The column-wise load of a whole idle queue (scheduling/idle_load.py) builds the very
jobs ``core_job`` builds from the rows, in the order SQL gives them; a NULL key leaves
the order to SQL; a reload keeps the objects of unchanged rows.  On SQLite and, when
GRID_TASKS_TEST_POSTGRES_URL is set, PostgreSQL."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import insert, update

from grid_tasks import db
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models import ResourceManager
from grid_tasks.db.testing import postgres_test_url, temporary_database
from grid_tasks.scheduling import idle_load, idle_queue
from grid_tasks.scheduling.state import core_job, idle_jobs
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.utc import epoch

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.skipif(
    postgres_test_url() is None, reason="GRID_TASKS_TEST_POSTGRES_URL is not set"))]
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture(params=BACKENDS)
def sessions(request):
    with temporary_database(postgres_test_url() if request.param == "postgresql" else None,
                            prefix="gt_idleload") as url:
        engine = db.get_engine(url)
        with engine.begin() as conn:
            conn.execute(insert(ResourceManager.__table__), [{"name": "rmA", "attributes": {}},
                                                             {"name": "rmB", "attributes": {}}])
        yield db.session_factory(engine)
        idle_queue.forget("rmA")


def _row(rng: random.Random, **values) -> dict:
    """An idle job row with a bit of everything the loader converts."""
    request = {"executable": "/bin/true"}
    if rng.random() < 0.3:
        request["min_memory_mb"] = rng.choice([0, 64, 2048])
    return {"rm": "rmA", "state": JobState.PENDING, "maui_state": MauiJobState.IDLE,
            "tasks": rng.choice([0, 1, 3, 8]), "procs": 1, "version": rng.randint(1, 5),
            "walltime": rng.choice([None, 0, 60, 3600]), "request": request,
            "user": rng.choice(["alice", "bob", None]), "group": rng.choice(["physics", None]),
            "account": rng.choice(["px", None]), "job_class": rng.choice(["batch", None]),
            "qos": rng.choice(["high", None]),
            "holds": rng.choice([[], [], [], ["user"], ["system", "user"]]),
            "dependencies": [], "nodes_allocated": {}, "early_start": rng.random() < 0.8,
            "priority": rng.choice([0, 0, 5, -3]),
            # whole seconds and microseconds, and ties (the id decides them)
            "submit_time": T0 - timedelta(seconds=rng.choice([0, 1, 60]),
                                          microseconds=rng.choice([0, 0, 1, 999_999,
                                                                   rng.randint(0, 10**6)])),
            **values}


def _insert(sessions, rows: list[dict]) -> None:
    with db.session_scope(sessions) as s:
        # column names, not attribute names, for a Core insert
        for r in rows:
            r["user_name"], r["group_name"], r["class_name"] = (
                r.pop("user"), r.pop("group"), r.pop("job_class"))
        s.execute(insert(JobRow.__table__), rows)


def test_the_columns_build_the_jobs_core_job_builds_in_sql_order(sessions):
    rng = random.Random(4)
    _insert(sessions, [_row(rng) for _ in range(400)]
            + [_row(rng, state=JobState.ACTIVE, maui_state=MauiJobState.RUNNING),
               _row(rng, rm="rmB")])  # neither is in rmA's idle queue
    with db.session_scope(sessions) as s:
        cols = idle_load.read_all(s, "rmA")
        rows = idle_jobs(s, "rmA")  # SQL's ORDER BY, rows processed by SQLAlchemy
    assert cols is not None and len(rows) == 400
    assert cols.jobs() == [core_job(r) for r in rows]
    assert cols.pairs[:, 0].tolist() == [r.id for r in rows]
    some = [3, 0, 399, 17]
    assert cols.jobs(some) == [core_job(rows[k]) for k in some]
    assert any(j.holds for j in cols.jobs()) and any(j.mem_per_task for j in cols.jobs())


def test_a_null_key_leaves_the_order_to_sql(sessions):
    rng = random.Random(5)
    _insert(sessions, [_row(rng) for _ in range(30)] + [_row(rng, submit_time=None)])
    with db.session_scope(sessions) as s:
        assert idle_load.read_all(s, "rmA") is None
        kept = idle_queue.idle_core_jobs(s, "rmA")
        assert kept == [core_job(r) for r in idle_jobs(s, "rmA")]


def test_a_reload_keeps_the_jobs_of_unchanged_rows(sessions, monkeypatch):
    rng = random.Random(6)
    _insert(sessions, [_row(rng) for _ in range(200)])
    with db.session_scope(sessions) as s:
        first = {j.id: j for j in idle_queue.idle_core_jobs(s, "rmA")}
    monkeypatch.setattr(idle_queue, "MERGE_MAX", 0)  # every change reloads
    with db.session_scope(sessions) as s:
        s.execute(update(JobRow.__table__).where(JobRow.id <= 120).values(
            priority=JobRow.priority + 1, version=JobRow.version + 1))
    reads = []
    real = idle_load.read_all
    monkeypatch.setattr(idle_queue, "read_all", lambda s, rm: reads.append(rm) or real(s, rm))
    with db.session_scope(sessions) as s:
        again = idle_queue.idle_core_jobs(s, "rmA")
        assert again == [core_job(r) for r in idle_jobs(s, "rmA")]
    assert reads == ["rmA"]
    assert all((first[j.id] is j) == (int(j.id) > 120) for j in again)


def test_epochs_are_utc_epoch_of_every_layout():
    rng = random.Random(7)
    times = [T0 + timedelta(microseconds=rng.randint(-10**12, 10**12)) for _ in range(2000)]
    text = [t.strftime("%Y-%m-%d %H:%M:%S.%f") for t in times]
    assert idle_load.epochs(text).tolist() == [epoch(t) for t in times]
    odd = ["2026-11-30 12:00:00", "2026-11-30T12:00:00.5", "2026-11-30 13:00:00+01:00"]
    assert idle_load.epochs(odd).tolist() == [epoch(T0), epoch(T0) + 0.5, epoch(T0)]

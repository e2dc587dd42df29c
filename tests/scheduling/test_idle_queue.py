"""The idle queue kept between live iterations: changed rows are read again, nothing stale."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import delete, update
from sqlalchemy.engine import make_url

from grid_tasks import db
from grid_tasks.db.models import IdleQueueLog
from grid_tasks.db.models import Job as JobRow
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import insert_job
from grid_tasks.rsl import lower
from grid_tasks.scheduling import idle_queue
from grid_tasks.scheduling.state import core_job, idle_jobs
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology


@pytest.fixture
def sessions(settings):
    prepare_database(settings, load_topology(settings.topology_file))
    yield db.session_factory(db.get_engine(settings.database_url))
    db.dispose_engines(settings.database_url)


def _submit(sessions, count: int = 1, user: str = "u") -> int:
    rsl = f"&(executable=/bin/true)(count={count})"
    with db.session_scope(sessions) as s:
        return insert_job(s, "rmA", rsl, lower(rsl)[0], {"user": user},
                          datetime.now(timezone.utc), Outbox())[0]


def _queues(sessions):
    """(kept, read afresh) idle queues as comparable tuples."""
    with db.session_scope(sessions) as s:
        kept = idle_queue.idle_core_jobs(s, "rmA")
        fresh = [core_job(row) for row in idle_jobs(s, "rmA")]
    return kept, fresh


def test_kept_queue_follows_every_change_of_the_rows(sessions, monkeypatch):
    ids = [_submit(sessions, count=1 + i % 3, user=f"u{i}") for i in range(6)]
    kept, fresh = _queues(sessions)
    assert kept == fresh and [j.id for j in kept] == [str(i) for i in ids]
    built = _count_reads(monkeypatch)
    assert _queues(sessions)[0] == fresh and built == []  # nothing changed: nothing read
    with db.session_scope(sessions) as s:
        first = db.repository.get_job(s, ids[0])
        first.holds = ["user"]  # an ORM change bumps the version
        db.repository.get_job(s, ids[1]).priority = 9  # reorders the queue
        db.record_transition(s, ids[2], JobState.FAILED, "cancelled by user",
                             datetime.now(timezone.utc))
    new = _submit(sessions, user="late")
    kept, fresh = _queues(sessions)
    assert kept == fresh
    assert [j.id for j in kept][:1] == [str(ids[1])] and str(ids[2]) not in {j.id for j in kept}
    assert next(j for j in kept if j.id == str(ids[0])).holds == frozenset({"user"})
    # only the changed and the new rows, named by the change log (ids[2] left the queue)
    assert sorted(built) == sorted([ids[0], ids[1], ids[2], new])


def _count_reads(monkeypatch) -> list:
    """The ids of the rows the image reads (every row, as "all", for a whole read)."""
    reads: list = []
    rows, whole, flat = idle_queue.read_rows, idle_queue.read_all, idle_queue._flat  # noqa: SLF001
    monkeypatch.setattr(idle_queue, "read_rows",
                        lambda s, rm, ids: reads.extend(ids) or rows(s, rm, ids))
    monkeypatch.setattr(idle_queue, "read_all", lambda s, rm: reads.append("all") or whole(s, rm))
    monkeypatch.setattr(idle_queue, "_flat", lambda *a: reads.append("all") or flat(*a))
    return reads


def test_a_database_made_anew_under_the_same_url_is_not_mistaken(settings, sessions):
    first = _submit(sessions, count=2, user="old")
    kept, _ = _queues(sessions)
    assert [(j.id, j.user) for j in kept] == [(str(first), "old")]
    db.dispose_engines(settings.database_url)
    path = Path(make_url(settings.database_url).database)
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)  # the same URL, and ids start again
    prepare_database(settings, load_topology(settings.topology_file))
    again = db.session_factory(db.get_engine(settings.database_url))
    assert _submit(again, count=1, user="new") == first  # the same id and version
    kept, fresh = _queues(again)
    assert kept == fresh and [(j.id, j.user, j.tasks) for j in kept] == [(str(first), "new", 1)]


def test_an_unchanged_queue_reads_no_row(sessions, monkeypatch):
    """The RM's change counter stands for the rows: while it is the one the image was
    read with, no row is read; a change reads the changed row only."""
    ids = [_submit(sessions) for _ in range(3)]
    kept, _ = _queues(sessions)
    reads = _count_reads(monkeypatch)
    assert _queues(sessions)[0] is kept and reads == []
    with db.session_scope(sessions) as s:
        db.repository.get_job(s, ids[1]).priority = 4
    kept, fresh = _queues(sessions)
    assert kept == fresh and kept[0].id == str(ids[1]) and reads == [ids[1]]


def test_a_rolled_back_read_is_forgotten(sessions):
    """A transaction that wrote an idle job (counted at once on SQLite) and read the
    queue, then rolled back: its image must not be taken for the same count later."""
    first, second = _submit(sessions, user="kept"), _submit(sessions, user="kept")
    _queues(sessions)
    with pytest.raises(RuntimeError), idle_queue.forgotten_on_error("rmA"):
        with db.session_scope(sessions) as s:
            db.repository.get_job(s, first).user = "never"  # rolled back below
            s.flush()
            assert idle_queue.idle_core_jobs(s, "rmA")[0].user == "never"
            raise RuntimeError("the iteration failed")
    with db.session_scope(sessions) as s:  # one change: the count the lost image had
        s.execute(update(JobRow.__table__).where(JobRow.id == second).values(
            user_name="other", version=JobRow.version + 1))
    kept, fresh = _queues(sessions)
    assert kept == fresh and [j.user for j in kept] == ["kept", "other"]


def test_a_changed_queue_is_ordered_in_memory_as_sql_orders_it(sessions, monkeypatch):
    """New and changed rows are merged into the kept order (priority, submission, id)
    without the ordered read, and the result is the ordered read's."""
    ids = [_submit(sessions, count=1 + i % 2) for i in range(12)]
    _queues(sessions)
    ordered = []
    real = idle_queue._flat  # noqa: SLF001 - which reads are made
    monkeypatch.setattr(idle_queue, "_flat", lambda s, stmt, rm: ordered.append(
        stmt is idle_queue._QUEUE) or real(s, stmt, rm))  # noqa: SLF001
    for step, (job, prio) in enumerate([(ids[5], 3), (ids[0], -1), (ids[9], 3), (ids[2], 0)]):
        with db.session_scope(sessions) as s:
            s.execute(update(JobRow.__table__).where(JobRow.id == job).values(
                priority=prio, version=JobRow.version + 1))
            if step == 2:
                db.record_transition(s, ids[7], JobState.FAILED, "cancelled by user",
                                     datetime.now(timezone.utc))
        if step == 1:
            _submit(sessions)
        with db.session_scope(sessions) as s:
            merged = idle_queue.read_queue(s, "rmA").rows
            assert merged == real(s, idle_queue._QUEUE, "rmA"), f"step {step}"  # noqa: SLF001
            idle_queue.idle_core_jobs(s, "rmA", idle_queue.read_queue(s, "rmA"))
    assert not any(ordered)  # every order above was merged, none read ordered


def test_jobs_entering_an_empty_kept_queue(sessions):
    assert _queues(sessions) == ([], [])  # an image of the empty queue
    ids = [_submit(sessions) for _ in range(2)]
    kept, fresh = _queues(sessions)
    assert kept == fresh and [j.id for j in kept] == [str(i) for i in ids]


def test_a_log_pruned_past_the_image_reads_the_whole_queue(sessions, monkeypatch):
    ids = [_submit(sessions) for _ in range(4)]
    _queues(sessions)
    with db.session_scope(sessions) as s:
        db.repository.get_job(s, ids[2]).priority = 7
        s.flush()
        s.execute(delete(IdleQueueLog.__table__))  # as the triggers prune an old count
    reads = _count_reads(monkeypatch)
    kept, fresh = _queues(sessions)
    assert kept == fresh and kept[0].id == str(ids[2]) and reads == ["all"]


def test_many_changed_jobs_read_the_whole_queue(sessions, monkeypatch):
    ids = [_submit(sessions) for _ in range(6)]
    _queues(sessions)
    monkeypatch.setattr(idle_queue, "MERGE_MAX", 2)
    with db.session_scope(sessions) as s:
        for job in ids[:3]:
            db.repository.get_job(s, job).priority = 1
    reads = _count_reads(monkeypatch)
    kept, fresh = _queues(sessions)
    assert kept == fresh and reads == ["all"]

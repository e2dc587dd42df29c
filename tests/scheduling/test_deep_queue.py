"""The live loader's kept idle queue (image + QueueCache) decides exactly as a load that
reads every row afresh, over random sequences of job changes in SQL; a deliberately
stale image is caught by that comparison."""

from __future__ import annotations

import dataclasses
import random
from datetime import datetime, timezone

import pytest
from sqlalchemy import select, text, update

from grid_tasks import db
from grid_tasks.db.models import Job as JobRow
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import insert_job
from grid_tasks.rsl import lower
from grid_tasks.maui.queue_cache import QueueCache
from grid_tasks.scheduling import idle_queue
from grid_tasks.scheduling.state import core_job, idle_jobs, load_scheduler
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

NOW = 1_900_000_000.0


@pytest.fixture
def sessions(settings):
    prepare_database(settings, load_topology(settings.topology_file))
    yield db.session_factory(db.get_engine(settings.database_url))
    db.dispose_engines(settings.database_url)


def _submit(sessions, rng: random.Random, count: int) -> list[int]:
    ids = []
    with db.session_scope(sessions) as s:
        for _ in range(count):
            rsl = (f"&(executable=/bin/true)(count={rng.randint(1, 6)})"
                   f"(maxWallTime={rng.choice([5, 30, 60])})")
            ids.append(insert_job(s, "rmA", rsl, lower(rsl)[0], {"user": rng.choice("abc")},
                                  datetime.fromtimestamp(NOW - rng.randint(0, 900), timezone.utc),
                                  Outbox())[0])
    return ids


def _change(sessions, rng: random.Random, ids: list[int]) -> None:
    """One random change between iterations: new jobs, a cancel, a new priority (a
    Core write bumping the version, as every writer does), or nothing."""
    kind = rng.choice(["none", "submit", "cancel", "priority"])
    if kind == "submit":
        ids += _submit(sessions, rng, rng.randint(1, 8))
        return
    victim = rng.choice(ids)
    with db.session_scope(sessions) as s:
        if kind == "cancel":
            row = db.repository.get_job(s, victim)
            if row.state is JobState.PENDING:
                db.record_transition(s, victim, JobState.FAILED, "cancelled by user",
                                     datetime.now(timezone.utc))
        elif kind == "priority":
            s.execute(update(JobRow.__table__).where(JobRow.id == victim).values(
                priority=rng.randint(0, 50), version=JobRow.version + 1))


def _decide(sessions, now: float, kept: bool) -> tuple:
    with db.session_scope(sessions) as s:
        # kept: the live iteration's load (image + cache); else every row read afresh
        sched = load_scheduler(s, "rmA", now=now, idle_if_free=kept, idle=kept, kept=kept)
        if not kept:
            for row in idle_jobs(s, "rmA"):
                sched.submit(core_job(row), now)
        res = sched.iterate(now)
    return ([(x.job_id, sorted(x.allocation.items())) for x in res.started],
            [(r.name, r.start, sorted(r.allocation.items())) for r in res.reservations_created],
            res.considered, res.throttled)


def _replay(sessions, seed: int, steps: int = 6, spoil=None) -> list[tuple]:
    rng = random.Random(seed)
    ids = _submit(sessions, rng, 80)  # past the ranking's vector threshold
    out = []
    for step in range(steps):
        if spoil is not None and step == steps // 2:
            spoil()
        elif step:
            _change(sessions, rng, ids)
        now = NOW + 10 * step
        out.append((_decide(sessions, now, kept=False), _decide(sessions, now, kept=True)))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_the_kept_queue_decides_as_a_fresh_read(sessions, seed):
    for step, (fresh, kept) in enumerate(_replay(sessions, seed)):
        assert kept == fresh, f"step {step}"


def test_an_unchanged_queue_is_the_same_list_and_a_changed_one_is_noticed(sessions):
    rng = random.Random(5)
    ids = _submit(sessions, rng, 60)
    with db.session_scope(sessions) as s:
        first = idle_queue.idle_core_jobs(s, "rmA")
        assert idle_queue.idle_core_jobs(s, "rmA") is first  # nothing changed: not rebuilt
    with db.session_scope(sessions) as s:  # a write that bumps the version, nothing else
        s.execute(update(JobRow.__table__).where(JobRow.id == ids[7]).values(
            walltime=7, version=JobRow.version + 1))
    with db.session_scope(sessions) as s:
        again = idle_queue.idle_core_jobs(s, "rmA")
    assert again is not first
    assert next(j for j in again if j.id == str(ids[7])).walltime == 7
    assert [j for j in again if j.id != str(ids[7])] == [j for j in first if j.id != str(ids[7])]


def _spoil_image(sessions) -> None:
    """Make the kept image stale as a bug would: every kept job twice as wide, its row
    and version untouched (so the image is taken as current)."""
    for image in list(idle_queue._images.values()):  # noqa: SLF001 - the fault under test
        image.jobs = [dataclasses.replace(j, tasks=min(8, j.tasks * 2)) for j in image.jobs]


def test_a_deliberately_stale_image_is_caught(sessions):
    replay = _replay(sessions, 1, spoil=lambda: _spoil_image(sessions))
    assert any(fresh != kept for fresh, kept in replay)


def _miss_changes(sessions) -> None:
    """A writer the change counter does not see (as if a trigger were missing), then
    changes that reorder and shrink the queue."""
    with db.session_scope(sessions) as s:
        for name in ("jobs_idle_insert", "jobs_idle_left", "jobs_idle_entered"):
            s.execute(text(f"DROP TRIGGER {name}"))
        first = s.scalars(select(JobRow.id).where(JobRow.state == JobState.PENDING)
                          .order_by(JobRow.id.desc())).first()
        s.execute(update(JobRow.__table__).where(JobRow.id == first).values(
            priority=1000, tasks=1, version=JobRow.version + 1))


def test_a_change_the_counter_missed_is_caught(sessions):
    replay = _replay(sessions, 2, spoil=lambda: _miss_changes(sessions))
    assert any(fresh != kept for fresh, kept in replay)


def test_only_the_live_iteration_takes_the_kept_facts(sessions, monkeypatch):
    """A plan or an estimate (kept=False) reuses the kept jobs but not the cache of
    derived facts the live iteration updates (no two schedulers share one at once)."""
    _submit(sessions, random.Random(3), 60)
    bound = []
    real = QueueCache.bind
    monkeypatch.setattr(QueueCache, "bind", lambda self, *a: bound.append(self) or real(self, *a))
    with db.session_scope(sessions) as s:
        live = load_scheduler(s, "rmA", now=NOW, kept=True)
        kept = idle_queue.queue_cache(idle_queue.read_queue(s, "rmA"))
        plan = load_scheduler(s, "rmA", now=NOW)
    assert bound[0] is kept and bound[1] is not kept  # the plan had a cache of its own
    assert sorted(plan.idle) == sorted(live.idle)  # over the same queue

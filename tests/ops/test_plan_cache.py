"""The plan digest kept in a real (private) Redis: reused while fresh, answering exactly
as the plan made anew, and dropped on any change of the RM or when too old."""

from __future__ import annotations

from array import array
from datetime import timedelta

import pytest
import redis
from sqlalchemy import delete, select, text, update
from redis.backoff import NoBackoff
from redis.retry import Retry

from grid_tasks.db import AccountingRecord, Job, Reservation, ReservationKind
from grid_tasks.db.models import Node
from grid_tasks.ops import build_queue, plan_mark, queue_rows, show_backfill, show_start
from grid_tasks.ops.plan_cache import MAX_AGE, PlanCache, PlanDigest, Plans, Ranked, state_mark
from grid_tasks.states import JobState, MauiJobState

from .conftest import NOW


@pytest.fixture
def client(redis_server):
    client = redis.Redis.from_url(redis_server.url(4))
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def plans(client, ops_db_url):
    return Plans(PlanCache(client, ops_db_url))


@pytest.fixture
def busy(add_job, bulk_jobs):
    """rmA (8 processors): 6 busy for an hour, and 300 idle jobs of 1-4 processors:
    some start now, some hold a reservation (RESERVATIONDEPTH 4), the rest wait."""
    add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=2, nodes={"a1": 2},
            walltime=3600, started=-600)
    add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=4, nodes={"a2": 4},
            walltime=3600, started=-60)
    return bulk_jobs("rmA", 300)


def answers(session, ids, plans=None, now=NOW):
    jobs = [show_start(session, str(i), now, plans=plans).to_dict() for i in ids]
    return jobs + [show_start(session, "3@20:00", now, rm="rmA", plans=plans).to_dict(),
                   [w.to_dict() for w in show_backfill(session, "rmA", now, plans=plans)]]


def test_cached_plan_answers_as_a_plan_made_anew(session, plans, busy):
    ids = busy[:6] + busy[-3:]
    fresh = answers(session, ids)
    assert {a["note"] for a in fresh[:-2]} >= {"starts at the next iteration",
                                               "from the job's reservation", None}
    cold = answers(session, ids, plans)
    assert plans.hits == len(ids) + 1  # the first answer made the plan, the rest reused it
    warm = answers(session, ids, plans, NOW + timedelta(seconds=5))
    assert plans.hits == 2 * (len(ids) + 2) - 1
    assert cold == fresh
    # 5 s later, the same decisions ("starts at the next iteration" is then 5 s later)
    assert [(a["note"], [e["allocation"] for e in a["estimates"]]) for a in warm[:-2]] == \
        [(a["note"], [e["allocation"] for e in a["estimates"]]) for a in fresh[:-2]]


def test_showq_order_from_the_cached_ranking(session, plans, busy):
    now = NOW
    made = build_queue(session, "rmA", now, limit=30,
                       ranking=lambda rm: plans.ranking(session, rm, now))
    assert plans.hits == 0
    again = build_queue(session, "rmA", now, limit=30,
                        ranking=lambda rm: plans.ranking(session, rm, now))
    assert plans.hits == 1
    plain = build_queue(session, "rmA", now, limit=30)
    assert [r.to_dict() for r in made.idle] == [r.to_dict() for r in plain.idle]
    assert [r.to_dict() for r in again.idle] == [r.to_dict() for r in plain.idle]


def _change_job(session, job_id):
    session.get(Job, job_id).holds = ["user"]
    session.commit()


def _core_update(session, job_id, **values):
    """A Core writer's change (as the iteration's): the version bumped, no ORM flush."""
    jobs = Job.__table__
    session.execute(update(jobs).where(jobs.c.id == job_id).values(
        version=jobs.c.version + 1, **values))
    session.commit()


def _running(session):
    return session.scalars(select(Job.id).where(Job.state == JobState.ACTIVE)).first()


CHANGES = {
    "job changed": lambda s, ids: _change_job(s, ids[0]),
    "idle job starting (Core)": lambda s, ids: _core_update(
        s, ids[0], maui_state=MauiJobState.STARTING, nodes_allocated={"a3": 1}),
    "running job ended (Core)": lambda s, ids: _core_update(
        s, _running(s), state=JobState.DONE, maui_state=MauiJobState.COMPLETED),
    "running job changed (Core)": lambda s, ids: _core_update(s, _running(s), walltime=7200),
    "held job added": lambda s, ids: (s.add(Job(
        rm="rmA", state=JobState.PENDING, maui_state=MauiJobState.HOLD, tasks=1, procs=1,
        walltime=60, submit_time=NOW)), s.commit()),
    "job deleted": lambda s, ids: (s.execute(delete(Job.__table__).where(
        Job.__table__.c.id == ids[-2])), s.commit()),
    "job added": lambda s, ids: (s.add(Job(rm="rmA", state=JobState.PENDING, tasks=1, procs=1,
                                           walltime=60, submit_time=NOW)), s.commit()),
    "reservation": lambda s, ids: (s.add(Reservation(
        name="maint", rm="rmA", kind=ReservationKind.ADMIN, nodes=["a1"], acl={},
        start_time=NOW + timedelta(minutes=5), end_time=NOW + timedelta(hours=2))), s.commit()),
    "node resized": lambda s, ids: (setattr(s.query(Node).filter_by(name="a1").one(),
                                            "procs", 8), s.commit()),
    "accounting": lambda s, ids: (s.add(AccountingRecord(
        rm="rmA", job_id=ids[1], user="u1", procs=1, start_time=NOW - timedelta(hours=1),
        end_time=NOW - timedelta(minutes=1), final_state=JobState.DONE)), s.commit()),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_any_change_of_the_rm_makes_the_plan_anew(session, plans, busy, change):
    before = state_mark(session, "rmA")
    show_start(session, str(busy[0]), NOW, plans=plans)
    CHANGES[change](session, busy)
    assert state_mark(session, "rmA") != before
    after = show_start(session, str(busy[-1]), NOW, plans=plans)
    assert plans.hits == 0  # the digest of the old state was not used
    assert after.to_dict() == show_start(session, str(busy[-1]), NOW).to_dict()


def test_state_mark_ignores_other_rms_and_time(session, add_job, busy):
    before = state_mark(session, "rmA")
    add_job("rmB", user="other")
    assert state_mark(session, "rmA") == before


def test_too_old_a_plan_is_made_anew(session, plans, busy):
    show_start(session, str(busy[-1]), NOW, plans=plans)
    show_start(session, str(busy[-1]), NOW + timedelta(seconds=MAX_AGE - 1), plans=plans)
    assert plans.hits == 1
    show_start(session, str(busy[-1]), NOW + timedelta(seconds=MAX_AGE + 1), plans=plans)
    assert plans.hits == 1


def test_damaged_entry_and_unreachable_redis_read_as_misses(session, client, ops_db_url, busy):
    cache = PlanCache(client, ops_db_url)
    client.set(cache.key("rmA"), b"{not json")
    assert cache.get("rmA", state_mark(session, "rmA"), NOW.timestamp()) is None
    down = Plans(PlanCache(redis.Redis(port=1, retry=Retry(NoBackoff(), 0)), ops_db_url))
    answer = show_start(session, str(busy[-1]), NOW, plans=down)
    assert answer.to_dict() == show_start(session, str(busy[-1]), NOW).to_dict()
    assert down.hits == 0


def test_digest_round_trips_packed_with_its_ranking_in_showq_order():
    """The packed form Redis keeps: equal after decoding, the ranking by priority, then
    submission, then id; a cut or foreign value is refused (read as a miss)."""
    inf = float("inf")
    ranked = Ranked.of({7: (3.0, inf), 8: (12.5, 1.4e9), 5: (3.0, 1.3e9), 4: (3.0, inf)})
    digest = PlanDigest("rmA", 1.5e9, "m", ranked, {9: {"a1": 2}},
                        {10: (1.6e9, 1.7e9, {"a2": 4})})
    packed = PlanDigest.from_bytes(digest.to_bytes())
    assert packed == digest
    assert list(packed.ranked.ids) == [8, 5, 4, 7]
    assert packed.ranking == {8: (12.5, 1.4e9), 5: (3.0, 1.3e9), 4: (3.0, inf), 7: (3.0, inf)}
    assert list(packed.ranked.keys())[:2] == [(-12.5, 1.4e9, 8), (-3.0, 1.3e9, 5)]
    assert "5" in packed.ranked and 5 in packed.ranked
    assert "6" not in packed.ranked and "job.5" not in packed.ranked
    for bad in (digest.to_bytes()[:-3], digest.to_bytes() + b"x", b'{"rm": "rmA"}'):
        with pytest.raises(ValueError):
            PlanDigest.from_bytes(bad)


def test_a_ranking_refuses_columns_of_different_lengths():
    with pytest.raises(ValueError):
        Ranked(array("q", [1, 2]), array("d", [1.0]), array("d", [1.0, 2.0]))


def test_mark_and_page_read_the_jobs_outside_the_queue_by_index(session, busy):
    """The mark's job aggregate and a page's special rows search the (rm, state,
    maui_state) index by ranges: no pass over the idle queue (SQLite's plan says)."""
    if session.get_bind().dialect.name != "sqlite":
        pytest.skip("the query plan asked of SQLite")
    for stmt in (plan_mark._JOBS, queue_rows._OUTSIDE):
        sql = str(stmt.params(rm="rmA").compile(session.get_bind(),
                                                compile_kwargs={"literal_binds": True}))
        plan = [r[-1] for r in session.execute(text("EXPLAIN QUERY PLAN " + sql))]
        reads = [p for p in plan if p.startswith(("SCAN jobs", "SEARCH jobs"))]
        assert reads and all("ix_jobs_rm_state_maui (rm=? AND state=?" in p for p in reads), plan


def test_older_grid_tasks_plans_are_left_alone(session, client, plans, busy):
    """An older grid_tasks keeps its digests (JSON, or packed under the mark of every
    job's version) under keys of their own: this one neither reads nor evicts them."""
    older = [f"grid_tasks:ops:plan:{kind}{plans.cache._db}:rmA" for kind in ("", "packed:")]
    for key in older:
        client.set(key, b"an older plan")
    show_start(session, str(busy[-1]), NOW, plans=plans)
    assert client.get(plans.cache.key("rmA")) is not None
    assert [client.get(key) for key in older] == [b"an older plan"] * 2

"""The settle, the one writer of a coallocated job's state, against a real private Redis
and SQLite, no worker: the release is recorded once however many settles race; a read
(``subjob_states``) writes nothing; a deadline times the barrier out; lost coordination
state fails the job and fences its subjobs not yet started."""

from __future__ import annotations

import base64
import json
import threading
import time
from datetime import datetime, timezone
from typing import Any

import pytest
import redis
from sqlalchemy import event

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.db.models import CoallocatedJob, Job
from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
from grid_tasks.duroc.control import Coallocator
from grid_tasks.duroc.control_rows import insert_coallocation, link_subjob
from grid_tasks.duroc.errors import CoallocFinishedError
from grid_tasks.duroc.records import store_id
from grid_tasks.duroc.settle import LOST_REASON
from grid_tasks.duroc.store_models import BarrierState, SubjobSpec
from grid_tasks.duroc.waiting import COALLOC_CHANNEL
from grid_tasks.effects import SETTLE, send_deadline
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.rsl import lower
from grid_tasks.settings import Settings
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

RSL = ("+(&(resourceManagerContact=rmA)(label=a)(count=1)(executable=/bin/true))"
       "(&(resourceManagerContact=rmB)(label=b)(count=1)(executable=/bin/true))")


@pytest.fixture
def co(settings: Settings) -> Any:
    """A Coallocator as the scheduler's, without its barrier watch (nothing settles
    here unless the test asks) and without workers."""
    prepare_database(settings, load_topology(settings.topology_file))
    grid = Grid(settings)
    coallocator = Coallocator(grid.services)
    yield coallocator
    coallocator.store.close()
    grid.close()
    db.dispose_engines(settings.database_url)


def _stored(co: Any, timeout: float = 60.0, deadline: float | None = None) -> int:
    """A job's rows and coordination store, as ``request_here`` makes them (no chord)."""
    deadline = time.time() + timeout if deadline is None else deadline
    with db.session_scope(co.services.sessions) as session:
        job_id = insert_coallocation(session, RSL, "alice", timeout, lower(RSL), ["a", "b"],
                                     datetime.fromtimestamp(deadline, timezone.utc))
    co.store.create_job(store_id(job_id), [SubjobSpec("a", 1), SubjobSpec("b", 1)],
                        auto_release=True)
    return job_id


def _age(co: Any, job_id: int, seconds: float) -> None:
    """Make the job ``seconds`` older (a job just stored has no keys yet: not lost)."""
    with db.session_scope(co.services.sessions) as session:
        row = session.get(CoallocatedJob, job_id)
        row.created_at = datetime.fromtimestamp(time.time() - seconds, timezone.utc)


def _link(co: Any, job_id: int, address: int) -> int:
    """A PENDING GRAM job linked to subjob ``address``, as a header's submission."""
    sub = lower(RSL)[address]
    with db.session_scope(co.services.sessions) as session:
        gram = build_job(session, sub.rm_contact, sub.gram_rsl(), sub, {"user": "alice"},
                         datetime.now(timezone.utc), Outbox())
        gram.coallocation_id = job_id
        session.flush()
        link_subjob(session, job_id, address, gram.id)
        return int(gram.id)


def _queued_settles(settings: Settings) -> list[int]:
    """The jobs of the settle tasks waiting in the scheduler queue (no worker here)."""
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        found = []
        for raw in broker.lrange("scheduler", 0, -1):
            message = json.loads(raw)
            if message["headers"]["task"] == SETTLE and message["headers"].get("eta") is None:
                found.append(json.loads(base64.b64decode(message["body"]))[1]["job"])
        return found
    finally:
        broker.close()


def _row(co: Any, job_id: int) -> tuple[Any, ...]:
    with db.session_scope(co.services.sessions) as session:
        row = session.get(CoallocatedJob, job_id)
        return (JobState(row.state), SqlBarrier(row.barrier_state), row.failure_reason,
                row.version, row.released_at,
                [(s.label, JobState(s.state), s.checked_in) for s in row.subjobs])


def _announcements(settings: Settings) -> tuple[Any, list[tuple[int, str]]]:
    """Every job state announced from now on, as (job, state), in a list kept current."""
    client = redis.Redis.from_url(settings.redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(COALLOC_CHANNEL.format("*"))
    got: list[tuple[int, str]] = []

    def drain() -> list[tuple[int, str]]:
        quiet = time.monotonic() + 0.5  # (a subscription's confirmation reads as None)
        while time.monotonic() < quiet:
            message = pubsub.get_message(timeout=0.1)
            if message is not None:
                got.append((int(message["channel"].decode().split(":")[3]),
                            message["data"].decode()))
                quiet = time.monotonic() + 0.5
        return got
    return (pubsub, client), drain  # type: ignore[return-value]


def test_racing_settles_record_the_release_once(co: Any, settings: Settings) -> None:
    job_id = _stored(co)
    handles, drain = _announcements(settings)
    sid = store_id(job_id)
    co.store.enter(sid, 0, 0)
    co.store.enter(sid, 1, 0)  # the last entry: the store releases the barrier itself
    assert co.store.snapshot(sid).state is BarrierState.RELEASED
    plans: list[Any] = []
    threads = [threading.Thread(target=lambda: plans.append(co.settle_plan(job_id)))
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(plan.released for plan in plans) == 1  # one of six recorded it
    state, barrier, _, _, released_at, subs = _row(co, job_id)
    assert (state, barrier) == (JobState.ACTIVE, SqlBarrier.RELEASED)
    assert [(label, n) for label, _, n in subs] == [("a", 1), ("b", 1)]  # checked_in
    co.settle(job_id)  # once more, later: nothing new
    assert _row(co, job_id)[4] == released_at
    assert drain() == [(job_id, "ACTIVE")]
    for handle in handles:
        handle.close()


def _dml_counter(co: Any) -> list[str]:
    """Every INSERT/UPDATE/DELETE the job's database runs from now on."""
    engine = db.get_engine(co.services.settings.database_url)
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().split(" ", 1)[0].upper() in {"INSERT", "UPDATE", "DELETE"}:
            seen.append(statement)
    event.listen(engine, "before_cursor_execute", count)
    return seen


def test_subjob_states_is_a_pure_read_and_settle_is_not(co: Any, settings: Settings) -> None:
    released = _stored(co)  # released in the store, not yet in SQL
    co.store.enter(store_id(released), 0, 0)
    co.store.enter(store_id(released), 1, 0)
    overdue = _stored(co, deadline=time.time() - 10)  # its barrier timeout passed
    lost = _stored(co)  # its coordination state gone
    co.store.purge(store_id(lost))
    _age(co, lost, 6)
    jobs = (released, overdue, lost)
    before = {j: _row(co, j) for j in jobs}
    handles, drain = _announcements(settings)
    writes = _dml_counter(co)
    for job_id in jobs:
        for _ in range(3):
            co.subjob_states(job_id)
    assert writes == [] and drain() == []
    assert {j: _row(co, j) for j in jobs} == before
    assert co.store.snapshot(store_id(overdue)).state is BarrierState.OPEN
    # the same looks through settle: each job's fate written (what a read must not do)
    for job_id in jobs:
        co.settle(job_id)
    assert writes and sorted(drain()) == sorted(
        [(released, "ACTIVE"), (overdue, "FAILED"), (lost, "FAILED")])
    assert _row(co, released)[:2] == (JobState.ACTIVE, SqlBarrier.RELEASED)
    state, barrier, reason, *_ = _row(co, overdue)
    assert (state, barrier) == (JobState.FAILED, SqlBarrier.TIMED_OUT)
    assert reason == "barrier timeout: subjob 'a', 'b' not in the barrier after 60 s"
    assert co.store.snapshot(store_id(overdue)).state is BarrierState.ABORTED
    for handle in handles:
        handle.close()


def test_a_barrier_waits_until_its_deadline(co: Any) -> None:
    job_id = _stored(co, timeout=60)
    co.store.enter(store_id(job_id), 0, 0)
    co.settle(job_id)
    assert _row(co, job_id)[:2] == (JobState.PENDING, SqlBarrier.WAITING)
    with db.session_scope(co.services.sessions) as session:  # the deadline comes
        session.get(CoallocatedJob, job_id).barrier_deadline = datetime.now(timezone.utc)
    co.settle(job_id)
    state, barrier, reason, *_ = _row(co, job_id)
    assert (state, barrier) == (JobState.FAILED, SqlBarrier.TIMED_OUT)
    assert reason == "barrier timeout: subjob 'b' not in the barrier after 60 s"


def test_lost_coordination_state_fails_the_job_and_fences_its_subjobs(co: Any) -> None:
    """Finding 4 at the settle: the store's keys gone before the release (Redis restarted
    empty) fail the job with a reason that says so; the GRAM job of a subjob not started
    is cancelled in SQL, and a subjob whose header comes later cannot be submitted."""
    job_id = _stored(co)
    co.store.enter(store_id(job_id), 0, 0)  # a is in the barrier, b not started
    gram_b = _link(co, job_id, 1)
    co.store.client.flushdb()  # the coordination Redis, empty
    assert co.settle(job_id).state is JobState.PENDING  # (just created: keys not yet made)
    _age(co, job_id, 6)
    status = co.settle(job_id)
    assert status.state is JobState.FAILED and status.reason == LOST_REASON
    assert "coordination state lost" in LOST_REASON
    with db.session_scope(co.services.sessions) as session:
        job_b = session.get(Job, gram_b)
        assert (job_b.state, job_b.start_time) == (JobState.FAILED, None)  # never started
        assert session.get(CoallocatedJob, job_id).barrier_state is SqlBarrier.FAILED
    # b's GRAM job ended FAILED in the very transaction that failed the job (the scheduler
    # could not start it in between); the rows are current, and b's end is announced as
    # any GRAM job's (its settle task queued: it finds nothing left to write)
    subs = {s[0]: s[1] for s in _row(co, job_id)[5]}
    assert subs == {"a": JobState.FAILED, "b": JobState.FAILED}
    assert _queued_settles(co.services.settings) == [job_id]
    with pytest.raises(CoallocFinishedError):  # a's header, late: fenced in SQL
        _link(co, job_id, 0)
    with pytest.raises(CoallocFinishedError, match="runtime access"):
        co.submit_subjob(job_id, 0)


def test_the_barrier_watch_settles_what_the_store_decides(co: Any) -> None:
    """The scheduler's watch, no reader: a release, an abort and vanished keys are
    recorded within a second or so; a job still waiting is watched on."""
    released, aborted, lost, waiting = (_stored(co) for _ in range(4))
    watch = co.barrier_watch
    try:
        for job_id in (released, aborted, lost, waiting):
            watch.watch(job_id, time.time() + 60)
        time.sleep(0.3)  # blocked on their streams now
        co.store.enter(store_id(released), 0, 0)
        co.store.enter(store_id(released), 1, 0)
        co.store.abort(store_id(aborted), "subjob 'b' failed before the barrier: boom")
        co.store.purge(store_id(lost))
        _age(co, lost, 6)
        deadline = time.monotonic() + 5
        while watch.watching() != {waiting}:
            assert time.monotonic() < deadline, watch.watching()
            time.sleep(0.05)
        assert _row(co, released)[:2] == (JobState.ACTIVE, SqlBarrier.RELEASED)
        assert _row(co, aborted)[:3] == (JobState.FAILED, SqlBarrier.FAILED,
                                         "subjob 'b' failed before the barrier: boom")
        assert _row(co, lost)[:3] == (JobState.FAILED, SqlBarrier.FAILED, LOST_REASON)
        assert _row(co, waiting)[:2] == (JobState.PENDING, SqlBarrier.WAITING)
        co.store.enter(store_id(waiting), 0, 0)  # a is in: its row says so, still waiting
        deadline = time.monotonic() + 5
        while _row(co, waiting)[5][0][2] != 1:
            assert time.monotonic() < deadline, _row(co, waiting)
            time.sleep(0.05)
        assert _row(co, waiting)[:2] == (JobState.PENDING, SqlBarrier.WAITING)
        assert watch.watching() == {waiting}
    finally:
        watch.stop()


def test_the_deadline_task_is_due_at_the_barrier_deadline(co: Any, settings: Settings) -> None:
    """Due at the deadline itself when it is near; a hop shorter than the broker's
    visibility timeout when it is far (a Redis broker hands an unacknowledged ETA message
    out again after that timeout; the hop's settle sends the next one)."""
    now = time.time()
    send_deadline(co.services.app, 7, now + 10, hop_s=24)
    send_deadline(co.services.app, 8, now + 100, hop_s=24)
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        due = {}
        for raw in broker.lrange("scheduler", 0, -1):
            message = json.loads(raw)
            if message["headers"]["task"] == SETTLE:
                kwargs = json.loads(base64.b64decode(message["body"]))[1]
                eta = datetime.fromisoformat(message["headers"]["eta"]).timestamp()
                due[kwargs["job"]] = (eta - now, kwargs["deadline"] - now)
    finally:
        broker.close()
    assert due.keys() == {7, 8}
    assert abs(due[7][0] - 10) < 1 and abs(due[7][1] - 10) < 0.01
    assert abs(due[8][0] - 24) < 1 and abs(due[8][1] - 100) < 0.01


def test_a_scheduler_worker_watches_barriers_from_its_start(co: Any,
                                                            gatekeeper_worker: Any) -> None:
    """A job whose coordination state was lost while no scheduler was up (its deadline
    task lost with the broker) is adopted by a scheduler worker as it starts, before
    any DUROC task reaches it."""
    lost = _stored(co)
    co.store.purge(store_id(lost))
    _age(co, lost, 6)
    worker = gatekeeper_worker("--scheduler")
    deadline = time.monotonic() + 30
    while _row(co, lost)[0] is not JobState.FAILED:
        assert time.monotonic() < deadline, (_row(co, lost), worker.log_tail(20))
        time.sleep(0.1)
    assert _row(co, lost)[2] == LOST_REASON

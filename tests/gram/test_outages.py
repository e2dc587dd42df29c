"""Job managers and recovery across database outages (the bugs the fault suite found)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from sqlalchemy.exc import OperationalError

from grid_tasks.db import (
    ConcurrentUpdateError,
    Job,
    ResourceManager,
    get_engine,
    record_transition,
    session_factory,
    session_scope,
)
from grid_tasks.db.models import Fence
from grid_tasks.db.retry import retrying as _retrying, transient_db_error
from grid_tasks.db.testing import temporary_database
from grid_tasks.errors import ConnectivityError
from grid_tasks.gram import keys
from grid_tasks.gram.records import Outbox
from grid_tasks.scheduling.recovery import NodeFailurePolicy, recover
from grid_tasks.states import JobState, MauiJobState

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NO_WAIT = (0.0, 0.0, 0.0)


def _dropped() -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception("server closed the connection"))


class Flaky:
    """An action failing with the given errors first, then returning "ok"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors, self.calls = list(errors), 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_transient_database_errors_are_retried_then_succeed() -> None:
    action = Flaky(_dropped(), ConnectivityError("cannot reach database x"), _dropped())
    assert _retrying(action, delays=NO_WAIT) == "ok"
    assert action.calls == 4


def test_a_database_outage_longer_than_the_backoff_is_raised() -> None:
    action = Flaky(*(_dropped() for _ in range(4)))
    with pytest.raises(OperationalError):
        _retrying(action, delays=NO_WAIT)
    assert action.calls == 4  # the first try and one per delay


def test_other_errors_are_not_retried() -> None:
    action = Flaky(ValueError("a bug"))
    with pytest.raises(ValueError):
        _retrying(action, delays=NO_WAIT)
    assert action.calls == 1
    assert not transient_db_error(ValueError("a bug"))
    conflicts = Flaky(*(ConcurrentUpdateError("raced") for _ in range(2)))
    assert _retrying(conflicts, attempts=3, delays=()) == "ok"


@pytest.fixture
def store(redis_server: Any) -> Iterator[tuple[Any, Any]]:
    client = redis.Redis.from_url(redis_server.url(11))  # not used by the module grid
    client.flushdb()
    with temporary_database() as url:
        yield session_factory(get_engine(url)), client
    client.flushdb()
    client.close()


def _launched(sessions: Any, client: Any, token: str = "tok-1") -> int:
    """A job launched at T0 on node1 and node2 whose launch never confirmed."""
    with session_scope(sessions) as session:
        session.add(ResourceManager(name="rmA"))
        session.flush()
        job = Job(rm="rmA", submit_time=T0)
        session.add(job)
        session.flush()
        record_transition(session, job, JobState.PENDING, "queued", T0)
        job.maui_state = MauiJobState.STARTING
        job.nodes_allocated = {"node1": 1, "node2": 1}
        job.launch_token, job.start_time = token, T0
        job_id = job.id
    client.set(keys.token_key(job_id), token)
    return job_id


def _recover(sessions: Any, client: Any, at: datetime) -> list[int]:
    with session_scope(sessions) as session:
        return recover(session, "rmA", at, client, Outbox(), NodeFailurePolicy.FAIL, 5.0)


def test_an_unconfirmed_launch_with_live_job_managers_is_rolled_back(store) -> None:
    sessions, client = store
    job_id = _launched(sessions, client)
    for node in ("node1", "node2"):  # both job managers alive, ACTIVE never recorded
        client.set(keys.lease_key(job_id, node), "tok-1")
    assert _recover(sessions, client, T0 + timedelta(seconds=4)) == []  # within the timeout
    assert _recover(sessions, client, T0 + timedelta(seconds=6)) == [job_id]
    with session_scope(sessions) as session:  # waits out its fence, then Idle
        row = session.get(Job, job_id)
        assert row.state is JobState.PENDING and row.maui_state is MauiJobState.HOLD
        assert row.launch_token is None and not row.nodes_allocated
    # the old parts read the tombstone and kill themselves
    assert client.get(keys.token_key(job_id)) == keys.fenced("tok-1").encode()


class Uptime:
    """The real Redis client, but reporting the given server uptime (as after a restart)."""

    def __init__(self, client: Any, seconds: float) -> None:
        self.client, self.seconds = client, seconds

    def info(self, section: str) -> dict[str, Any]:
        return {**self.client.info(section), "uptime_in_seconds": self.seconds}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def _running(sessions: Any, client: Any) -> int:
    job_id = _launched(sessions, client)
    with session_scope(sessions) as session:
        row = session.get(Job, job_id)
        record_transition(session, row, JobState.ACTIVE, "started on node1", T0)
        row.maui_state = MauiJobState.RUNNING
    return job_id


def test_a_missing_lease_right_after_a_redis_restart_is_not_a_lost_node(store) -> None:
    sessions, client = store
    job_id = _running(sessions, client)
    client.set(keys.lease_key(job_id, "node1"), "tok-1")  # node2's lease wiped
    later = T0 + timedelta(seconds=60)
    assert _recover(sessions, Uptime(client, 2), later) == []  # grace: node2 may re-assert it
    with session_scope(sessions) as session:
        assert session.get(Job, job_id).state is JobState.ACTIVE
    assert _recover(sessions, Uptime(client, 30), later) == [job_id]  # it did not
    with session_scope(sessions) as session:
        row = session.get(Job, job_id)
        assert row.state is JobState.FAILED and "node node2 lost" in row.failure_reason
        # fenced, not deleted: node1's live part reads the tombstone and dies; both
        # nodes stay held until the deadline (finding 1)
        (fence,) = session.query(Fence).filter_by(job_id=job_id)
        assert fence.nodes == {"node1": 1, "node2": 1} and fence.deadline > later
    assert client.get(keys.token_key(job_id)) == keys.fenced("tok-1").encode()


def test_redis_calls_are_retried_through_a_restart_and_give_up_after_the_backoff() -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    from grid_tasks.gram.report import redis_retrying

    action = Flaky(RedisConnectionError("refused"), RedisConnectionError("loading"))
    assert redis_retrying(action, NO_WAIT) == "ok" and action.calls == 3
    endless = Flaky(*(RedisConnectionError("refused") for _ in range(4)))
    with pytest.raises(RedisConnectionError):
        redis_retrying(endless, NO_WAIT)
    assert endless.calls == 4

"""The metascheduler protocol tasks through a real Celery worker on the scheduler queue,
the JSON result backend and a private Redis: estimate, reserve (refusal raised as its own
type in the caller), release, and a bound job started by the live iteration no earlier
than its reservation."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
import redis

from grid_tasks import db
from grid_tasks.celery_app import SCHEDULER_QUEUE, TASK_ROUTES
from grid_tasks.effects import trigger_iteration
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.legion.tokens import Claim, TokenStore
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.rsl import lower
from grid_tasks.scheduling.rm_service import ReservationRefused
from grid_tasks.scheduling.rm_tasks import ESTIMATE, RELEASE, RESERVE
from grid_tasks.states import MauiJobState
from grid_tasks.topology import load_topology

TOPOLOGY = '[rm.rmA]\n[rm.rmA.node.node1]\nprocs = 2\n[rm.rmA.node.node2]\nprocs = 2\n'
WAIT_S = 60  # generous: the machine may be loaded


@pytest.fixture
def live(tmp_path, settings, celery_app_factory, in_process_worker):
    (tmp_path / "grid.toml").write_text(TOPOLOGY)
    settings = settings.replace(topology_file=tmp_path / "grid.toml", heartbeat_interval=5.0,
                                heartbeat_ttl=120.0)
    prepare_database(settings, load_topology(settings.topology_file))
    app = celery_app_factory(settings)
    client = redis.Redis.from_url(settings.redis_url)
    registry = NodeRegistry(client, settings.heartbeat_ttl)
    for node in ("node1", "node2"):
        registry.register("rmA", node, {}, {}, "test", time.time())
    in_process_worker(app, queues=[SCHEDULER_QUEUE], concurrency=2)
    yield app, client, db.session_factory(db.get_engine(settings.database_url))
    client.close()
    db.dispose_engines()


def _call(app, task: str, **kwargs):
    return app.send_task(task, kwargs=kwargs).get(timeout=WAIT_S)


def test_tasks_are_routed_to_the_scheduler_queue():
    from grid_tasks.celery_app import app

    for name in (ESTIMATE, RESERVE, RELEASE):
        assert name in app.tasks
        assert app.amqp.router.route({}, name, kwargs={"rm": "rmA"})["queue"].name \
            == SCHEDULER_QUEUE
    assert TASK_ROUTES  # routed by the grid_tasks.* pattern, never in task bodies


def test_protocol_round_trip_and_bound_start(live):
    app, client, sessions = live
    now = time.time()
    first = _call(app, ESTIMATE, rm="rmA", procs=4, duration=60.0, not_before=now)
    assert first[0]["time"] >= now and sum(first[0]["allocation"].values()) == 4

    store = TokenStore(client)
    store.set_capacities({"rmA/node1": 2, "rmA/node2": 2})
    start = float(int(time.time()) + 4)
    taken = store.take([Claim("rmA/node1", start, start + 60, 2)], "broker-live")
    store.confirm(taken, "grid-job-1")
    ask = dict(rm="rmA", name="g1", allocation={"node1": 2}, start=start, duration=60.0,
               token=taken[0].id, job_key="grid-job-1", label="part1")
    made = _call(app, RESERVE, **ask)
    assert (made["rm"], made["name"], made["start"], made["end"]) == \
        ("rmA", "g1", start, start + 60)
    assert _call(app, RESERVE, **ask) == made  # idempotent

    with pytest.raises(ReservationRefused) as refused:  # the caller gets the real type
        _call(app, RESERVE, **{**ask, "name": "g2", "token": "other"})
    assert refused.value.reason == "busy" and "node node1" in str(refused.value)

    later = _call(app, ESTIMATE, rm="rmA", procs=4, duration=60.0, not_before=time.time())
    assert later[0]["time"] >= start + 60  # both nodes are needed: after the reservation

    rsl = "&(executable=/bin/true)(count=2)(maxWallTime=1)(reservation=g1)"
    outbox = Outbox()
    with db.session_scope(sessions) as s:
        job = build_job(s, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                        datetime.now(timezone.utc), outbox).id
    outbox.flush(client, app)  # triggers the RM's iteration
    row = _wait_started(sessions, client, app, job, start)
    assert row.start_time.timestamp() >= start - 1e-3  # not before its reservation
    assert row.nodes_allocated == {"node1": 2}

    assert _call(app, RELEASE, rm="rmA", name="g2") is False
    assert _call(app, RELEASE, rm="rmA", name="g1", token="wrong") is False
    assert _call(app, RELEASE, rm="rmA", name="g1", token=taken[0].id) is True
    assert _call(app, RELEASE, rm="rmA", name="g1") is False


def _wait_started(sessions, client, app, job: int, start: float):
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        with db.session_scope(sessions) as s:
            row = db.repository.get_job(s, job)
            if row.maui_state is MauiJobState.STARTING or row.start_time is not None:
                return row
        if time.time() >= start:
            trigger_iteration(app, "rmA", client=client)  # the reservation has begun
        time.sleep(0.3)
    raise AssertionError(f"job {job} did not start within {WAIT_S} s")

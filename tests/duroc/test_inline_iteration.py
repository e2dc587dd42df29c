"""A header task schedules its subjob in place (its RM's iteration runs in the gatekeeper);
elsewhere a subjob's submission only triggers the iteration task, as any submission."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import redis

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.duroc.control import Coallocator
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.events import PREFIX, JobEvent, channel
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.queues import SCHEDULER_QUEUE, iteration_queue
from grid_tasks.settings import Settings
from grid_tasks.states import MauiJobState
from grid_tasks.topology import load_topology

RSL = ("+(&(resourceManagerContact=rmA)(label=a)(count=1)(executable=/bin/true))"
       "(&(resourceManagerContact=rmB)(label=b)(count=1)(executable=/bin/true))")


def _maui_state(grid: Grid, gram_id: int) -> tuple[MauiJobState, dict[str, int]]:
    with db.session_scope(grid.sessions) as session:
        row = db.repository.get_job(session, gram_id)
        return row.maui_state, dict(row.nodes_allocated or {})


def _immediate(broker: redis.Redis) -> list[tuple[str, str]]:
    """(task, rm) of the tasks queued for the scheduler to run now (no ETA): on its
    shared queue and on every RM's iteration queue."""
    found = []
    queues = [SCHEDULER_QUEUE, *(iteration_queue(rm) for rm in ("rmA", "rmB"))]
    for raw in (m for q in queues for m in broker.lrange(q, 0, -1)):
        message = json.loads(raw)
        headers = message["headers"]
        if headers.get("eta") is None:
            kwargs = json.loads(base64.b64decode(message["body"]))[1]
            found.append((headers["task"], kwargs.get("rm")))
    return found


def _next_message(pubsub: Any, timeout: float = 2.0) -> Any:
    """The next published message (subscription confirmations are skipped as None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message is not None:
            return message
    return None


def test_a_header_runs_its_rms_iteration_and_no_iterate_task_is_sent(
        settings: Settings) -> None:
    prepare_database(settings, load_topology(settings.topology_file))
    store = redis.Redis.from_url(settings.redis_url)
    broker = redis.Redis.from_url(settings.broker_url)
    registry = NodeRegistry(store, 30)  # live nodes (no daemon here: no worker at all)
    for rm, node in (("rmA", "node1"), ("rmA", "node2"), ("rmB", "node3"), ("rmB", "node4")):
        registry.register(rm, node, {}, {}, "test", time.time())
    grid = Grid(settings)
    try:
        co = Coallocator(grid.services)  # (as the scheduler worker serves a request)
        job_id = co.request_here(RSL, owner="alice", barrier_timeout=60)
        broker.delete(SCHEDULER_QUEUE, iteration_queue("rmA"), iteration_queue("rmB"))
        events = store.pubsub(ignore_subscribe_messages=True)
        events.psubscribe(f"{PREFIX}:*:events")
        gram_a, stored = co.submit_subjob(job_id, 0, iterate=True)  # as a header does
        state, nodes = _maui_state(grid, gram_a)
        assert stored and state is MauiJobState.STARTING and sum(nodes.values()) == 1
        # its PENDING is announced all the same (sent with the iteration lock's round trip)
        message = _next_message(events)
        assert message is not None and message["channel"] == channel(gram_a).encode()
        assert JobEvent.from_json(message["data"]).state == "PENDING"
        events.close()
        assert _immediate(broker) == []  # scheduled here: no iterate task sent (the only
        # one queued is the lease watch an iteration that started a job always sends)
        assert sum(broker.llen(f"node.rmA.{n}") for n in nodes) == 1  # its launch waits
        assert co.submit_subjob(job_id, 0, iterate=True) == (gram_a, False)  # idempotent

        gram_b, _ = co.submit_subjob(job_id, 1)  # not a header: trigger, as ever
        assert _maui_state(grid, gram_b) == (MauiJobState.IDLE, {})
        assert _immediate(broker) == [("grid_tasks.scheduling.tasks.iterate", "rmB")]
        co.cancel_here(job_id)
        co.store.close()
    finally:
        grid.close()
        store.close()
        broker.close()
        db.dispose_engines(settings.database_url)

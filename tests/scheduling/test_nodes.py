"""A node that goes silent is noticed by the node watch; its jobs follow the policy and
the iteration runs again (real Redis registry, real SQL, the real iteration)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import redis

from grid_tasks import db
from grid_tasks.effects import dirty_key, queued_key
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram import keys
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.rsl import lower
from grid_tasks.scheduling.nodes import NodeChange, watch_nodes
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.topology import load_topology

TTL = 0.3


@pytest.fixture
def grid(settings, celery_app_factory):
    prepare_database(settings, load_topology(settings.topology_file))
    client = redis.Redis.from_url(settings.redis_url)
    yield (celery_app_factory(), client, NodeRegistry(client, TTL),
           db.session_factory(db.get_engine(settings.database_url)))
    client.close()
    db.dispose_engines(settings.database_url)


def _triggered(client) -> bool:
    fired = bool(client.exists(dirty_key("rmA")) and client.exists(queued_key("rmA")))
    client.delete(dirty_key("rmA"), queued_key("rmA"))
    return fired


def test_watch_triggers_only_when_a_node_turns_unknown_down_or_up(grid):
    app, client, registry, _ = grid
    for node in ("node1", "node2"):
        registry.register("rmA", node, {}, {}, "test", time.time())
    registry.register("rmB", "node3", {}, {}, "test", time.time())
    assert watch_nodes(app, "rmA", registry) == [NodeChange("node1", None, "Up"),
                                                  NodeChange("node2", None, "Up")]
    assert _triggered(client)
    registry.heartbeat("rmA", "node1", time.time(), active=1)  # Idle -> Running: no change
    assert watch_nodes(app, "rmA", registry) == [] and not _triggered(client)
    deadline = time.monotonic() + 2 * TTL
    while time.monotonic() < deadline:  # node2 keeps beating, node1 falls silent
        registry.heartbeat("rmA", "node2", time.time())
        time.sleep(TTL / 4)
    assert watch_nodes(app, "rmA", registry) == [NodeChange("node1", "Up", "Unknown")]
    assert _triggered(client)
    assert registry.heartbeat("rmA", "node1", time.time()) is True  # back after expiry
    assert watch_nodes(app, "rmA", registry) == [NodeChange("node1", "Unknown", "Up")]
    registry.mark_down("rmA", "node2", time.time())
    assert watch_nodes(app, "rmA", registry) == [NodeChange("node2", "Up", "Down")]
    assert _triggered(client)


@pytest.mark.parametrize("policy", ["FAIL", "REQUEUE"])
def test_lost_node_jobs_follow_the_policy_and_the_iteration_runs_again(grid, policy,
                                                                        monkeypatch):
    from grid_tasks.scheduling.iteration import run_iteration

    monkeypatch.setenv("GRID_TASKS_NODE_FAILURE_POLICY", policy)
    # Recovery waits out a Redis restart for one launch timeout (every lease vanished with
    # it); this test's private Redis may be only seconds old, so keep that grace short.
    monkeypatch.setenv("GRID_TASKS_LAUNCH_TIMEOUT", "1")
    app, client, registry, sessions = grid
    for node in ("node1", "node2"):
        registry.register("rmA", node, {}, {}, "test", time.time())
    watch_nodes(app, "rmA", registry)
    rsl = "&(executable=/bin/true)(count=2)"
    with db.session_scope(sessions) as s:
        row = build_job(s, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                        datetime.now(timezone.utc), Outbox())
        long_ago = datetime.now(timezone.utc) - timedelta(minutes=5)
        db.record_transition(s, row, JobState.ACTIVE, "started on node1", long_ago)
        row.maui_state, row.start_time = MauiJobState.RUNNING, long_ago
        row.nodes_allocated, row.launch_token = {"node1": 2}, "tok"
        job_id = row.id
    _triggered(client)
    deadline = time.monotonic() + 2 * TTL
    while time.monotonic() < deadline:  # node1's daemon (and job manager lease) gone
        registry.heartbeat("rmA", "node2", time.time())
        time.sleep(TTL / 4)
    assert [c.after for c in watch_nodes(app, "rmA", registry)] == ["Unknown"]
    assert _triggered(client)  # the watch re-runs the iteration ...
    alive = threading.Event()

    def node2_beats() -> None:  # node2 stays alive however slowly a loaded host iterates
        while not alive.wait(TTL / 4):
            registry.heartbeat("rmA", "node2", time.time())

    beats = threading.Thread(target=node2_beats, daemon=True)
    registry.heartbeat("rmA", "node2", time.time())
    beats.start()
    try:
        report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry)
    finally:
        alive.set()
        beats.join()
    assert report.recovered == [job_id]  # ... which hands the lost job to the policy
    with db.session_scope(sessions) as s:
        row = db.repository.get_job(s, job_id)
        if policy == "FAIL":
            assert row.state is JobState.FAILED and "node1 lost" in row.failure_reason
            assert row.gram_error == "JM_STOPPED" and report.started == []
        else:  # requeued, but not started anew (node2 is free) before its fence deadline
            assert row.state is JobState.PENDING and row.maui_state is MauiJobState.HOLD
            assert row.holds == ["fence"] and report.started == []
            assert "requeued" in db.repository.job_history(s, job_id)[-1].reason
            assert row.launch_token is None  # the lost launch can start nothing more
    assert client.get(keys.token_key(job_id)) == keys.fenced("tok").encode()


def test_each_iteration_records_its_duration_for_the_metrics(grid):
    from grid_tasks.metrics.iteration import read_iterations
    from grid_tasks.scheduling.runner import _one
    from grid_tasks.services import services_for

    app, client, _, _ = grid
    _one(services_for(app), "rmA")
    _one(services_for(app), "rmA")
    (stats,) = read_iterations(client)
    assert stats.rm == "rmA" and stats.count == 2
    assert 0 < stats.sum < 30 and stats.last is not None and stats.last > 0


def test_the_watch_costs_a_few_commands_however_many_nodes(grid):
    """Beat runs the watch per RM every TTL: on a large grid a command (and a decoded
    registration) per node of every RM made it the scheduler's biggest idle cost."""
    app, client, registry, _ = grid
    registry.register_many([("rmA", f"a{i:03d}", {}) for i in range(80)]
                           + [("rmB", f"b{i:03d}", {}) for i in range(300)], {}, "test",
                           time.time())
    watch_nodes(app, "rmA", registry)
    client.delete("grid_tasks:alive:rmA:a013")
    before = {k: v["calls"] for k, v in client.info("commandstats").items()}
    changes = watch_nodes(app, "rmA", registry)
    after = {k: v["calls"] for k, v in client.info("commandstats").items()}
    ran = sum(n - before.get(k, 0) for k, n in after.items() if k != "cmdstat_info")
    assert changes == [NodeChange("a013", "Up", "Unknown")]
    assert ran <= 12, ran  # node set, heartbeats, one status, seen hash, trigger

"""Node daemons as real Celery workers: registration, heartbeats, Unknown when killed."""

from __future__ import annotations

import signal
import time

import pytest

from grid_tasks.celery_app import node_queue
from grid_tasks.gram.node_record import record_in_db, record_when_ready
from grid_tasks.node.daemon import NodeDaemonStep, node_identity
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.node.tasks import NODE_CHECK, check_options
from grid_tasks.services import Services
from grid_tasks.states import NodeState


def test_identity_from_app_setting_or_environment(celery_app_factory):
    app = celery_app_factory()
    assert node_identity(app, environ={}) == (None, None)
    assert node_identity(app, environ={"GRID_TASKS_RM": "rmA", "GRID_TASKS_NODE": "n1"}) == (
        "rmA", "n1")
    app.conf.grid_tasks_node = ("rmB", "node3")
    assert node_identity(app, environ={"GRID_TASKS_RM": "x"}) == ("rmB", "node3")


def test_in_process_daemon_registers_beats_and_says_goodbye(settings, celery_app_factory,
                                                            in_process_worker):
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    app = celery_app_factory(node=("rmB", "node3"))
    assert NodeDaemonStep in app.steps["worker"]
    from celery.contrib.testing.worker import start_worker

    with start_worker(app, pool="threads", perform_ping_check=False):
        status = registry.status("rmB", "node3")
        assert status.state is NodeState.IDLE and status.source == "configured"
        assert status.procs == 2 and status.features == ("bigdisk",)
        first = status.last_heartbeat
        # The first beat follows the SQL record of the registration (a slow import on a
        # loaded machine), so wait for it with a deadline; then beats come every interval.
        second = _next_beat(registry, first, timeout=10)
        assert second > first
        third = _next_beat(registry, second, timeout=3 * settings.heartbeat_interval)
        assert third > second  # still beating
        assert registry.status("rmB", "node3").state is NodeState.IDLE
        answer = celery_app_factory().send_task(
            NODE_CHECK, **check_options("rmB", "node3")).get(timeout=20)
        assert answer["queue"] == node_queue("rmB", "node3")
    assert registry.status("rmB", "node3").state is NodeState.DOWN


def _next_beat(registry: NodeRegistry, after: float | None, timeout: float) -> float:
    """The node3 heartbeat time once it moves past ``after`` (``after`` at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        last = registry.status("rmB", "node3").last_heartbeat
        if (last is not None and after is not None and last > after) \
                or time.monotonic() >= deadline:
            return last
        time.sleep(0.02)


def test_registration_is_recorded_in_the_database(settings):
    pytest.importorskip("grid_tasks.db")
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.topology import load_topology

    assert prepare_database(settings, load_topology(settings.topology_file))
    res = load_topology(settings.topology_file).node("rmA", "node1").resources()
    assert record_in_db(Services(settings).sessions, "rmA", "node1", res)
    row = _node_row(settings, "rmA", "node1")
    assert row.last_seen is not None and row.procs == 4


def _node_row(settings, rm: str, node: str):
    """The node's SQL row as stored (detached: read its columns only)."""
    from grid_tasks import db

    factory = db.session_factory(db.get_engine(settings.database_url))
    try:
        with db.session_scope(factory) as session:
            row = db.get_node(session, rm, node)
            session.expunge(row)
            return row
    finally:
        db.dispose_engines(settings.database_url)


def test_first_record_waits_for_the_database_to_be_prepared(settings):
    # `grid-tasks up` starts the daemons first and migrates meanwhile: a daemon that is
    # quicker finds no tables (then no node row) and records once they are there.
    import threading

    pytest.importorskip("grid_tasks.db")
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.topology import load_topology

    topology = load_topology(settings.topology_file)
    res = topology.node("rmB", "node3").resources()
    outcome: list[object] = []
    recorder = threading.Thread(target=lambda: outcome.append(
        record_when_ready(Services(settings).sessions, "rmB", "node3", res, delays=(0.05,) * 100)))
    recorder.start()
    time.sleep(0.3)
    assert outcome == [] and recorder.is_alive(), "it must wait, not give up"
    assert prepare_database(settings, topology)
    recorder.join(timeout=30)
    assert outcome == [True]
    row = _node_row(settings, "rmB", "node3")
    assert row.registered_at is not None and row.procs == 2


def test_first_record_gives_up_on_a_database_that_never_gets_ready(settings):
    from grid_tasks.errors import NotFoundError

    pytest.importorskip("grid_tasks.db")
    res = {"procs": 2}
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        record_when_ready(Services(settings).sessions, "rmB", "node3", res, delays=(0.05, 0.05))
    assert time.monotonic() - started < 10
    assert isinstance(info.value, NotFoundError) or "no such table" in str(info.value)


def test_killed_daemon_shows_unknown_within_two_intervals(settings, node_worker):
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    child = node_worker("rmA", "node1")
    assert registry.status("rmA", "node1").state is NodeState.IDLE
    child.process.send_signal(signal.SIGKILL)
    child.process.wait()
    killed = time.monotonic()
    while registry.status("rmA", "node1").state is not NodeState.UNKNOWN:
        assert time.monotonic() - killed < 5, "node never turned Unknown"
        time.sleep(0.02)
    elapsed = time.monotonic() - killed
    assert elapsed <= 2 * settings.heartbeat_interval + 0.1


def test_stopped_daemon_shows_down(settings, node_worker):
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    child = node_worker("rmB", "node4")
    child.process.send_signal(signal.SIGTERM)  # warm shutdown: the daemon says goodbye
    child.process.wait(timeout=20)
    assert registry.status("rmB", "node4").state is NodeState.DOWN


def test_plain_celery_worker_with_identity_env_is_a_node_daemon(settings, grid_env, tmp_path,
                                                                celery_app_factory):
    import sys

    from grid_tasks.embedded.supervisor import Supervisor, leftover

    env = {**grid_env, "GRID_TASKS_RM": "rmB", "GRID_TASKS_NODE": "node4"}
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    sup = Supervisor(tmp_path / "logs")
    try:
        child = sup.spawn("plain", [sys.executable, "-m", "celery", "-A",
                                    "grid_tasks.celery_app", "worker", "-P", "threads",
                                    "-l", "WARNING", "--without-mingle", "--without-gossip"],
                          env=env)
        try:
            registry.wait_alive([("rmB", "node4")], timeout=30)
        except Exception:
            raise AssertionError(child.log_tail(20))
        answer = celery_app_factory().send_task(
            NODE_CHECK, **check_options("rmB", "node4")).get(timeout=20)
        # no -Q given: the daemon consumes its own node queue (not the scheduler's)
        assert answer["queue"] == "node.rmB.node4"
        assert answer["facts"]["pid"] == child.pid
    finally:
        pids = sup.all_pids()
        sup.stop_all()
        assert leftover(pids) == []


def test_daemon_triggers_its_rms_iteration_on_register_return_and_goodbye(settings,
                                                                          celery_app_factory):
    """Node changes fire an iteration at once: registration, a beat after the heartbeat
    expired (the node was Unknown), and the goodbye (Down)."""
    import redis
    from celery.contrib.testing.worker import start_worker

    from grid_tasks.node.registry import alive_key
    from grid_tasks.effects import dirty_key, queued_key

    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.topology import load_topology

    # the trigger follows the first SQL record, which waits for a prepared database
    prepare_database(settings, load_topology(settings.topology_file))
    client = redis.Redis.from_url(settings.redis_url)
    app = celery_app_factory(node=("rmB", "node3"))

    def wait_triggered() -> None:
        deadline = time.monotonic() + 10
        while not client.exists(dirty_key("rmB")):
            assert time.monotonic() < deadline, "no iteration trigger"
            time.sleep(0.02)
        assert client.exists(queued_key("rmB"))  # an iterate task was enqueued
        client.delete(dirty_key("rmB"), queued_key("rmB"))

    with start_worker(app, pool="threads", perform_ping_check=False):
        wait_triggered()  # registered
        assert not client.exists(dirty_key("rmA"))  # only its own RM
        client.delete(alive_key("rmB", "node3"))  # as if the TTL ran out: Unknown
        wait_triggered()  # the next beat brings it back
    wait_triggered()  # goodbye: Down
    client.close()

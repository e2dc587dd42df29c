"""The scheduler worker survives a restart of its Redis (no crash, same PID).

Regression test: with deliveries unacknowledged at the moment Redis went away,
Celery's reconnect used to close the lost connection twice and kombu's Redis
transport raised ``AttributeError: 'NoneType' object has no attribute 'hostname'``,
an "unrecoverable error" that ended the worker process.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from grid_tasks.celery_app import celery_config
from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.supervisor import Supervisor, leftover
from tests.conftest import REPO_ROOT
from tests.node.restart_tasks import HOLD, WHOAMI


def _wait(predicate, timeout: float, what: str, tail=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{tail()}"
        time.sleep(0.05)


def _ask_pid(client, worker, timeout: float) -> int:
    """Send ``whoami`` until it is answered (the client reconnects too), its PID."""
    deadline = time.monotonic() + timeout
    while True:
        assert worker.alive(), f"the worker died:\n{worker.log_tail(60)}"
        try:
            return client.send_task(WHOAMI).get(timeout=5)
        except Exception:  # broker or backend still reconnecting: ask again
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_consumer_is_the_resilient_one(settings) -> None:
    assert celery_config(settings)["worker_consumer"] == \
        "grid_tasks.node.consumer:ResilientConsumer"


def test_scheduler_worker_survives_a_redis_restart(settings, grid_env, grid_tasks_command,
                                                    celery_app_factory, tmp_path: Path) -> None:
    _restart_under_worker(settings, grid_env, grid_tasks_command, celery_app_factory,
                          tmp_path, outage=0.5)


@pytest.mark.slow  # ~30 s: an outage longer than the bounded startup retries (~12 s)
def test_worker_outlasts_a_long_redis_outage(settings, grid_env, grid_tasks_command,
                                            celery_app_factory, tmp_path: Path) -> None:
    _restart_under_worker(settings, grid_env, grid_tasks_command, celery_app_factory,
                          tmp_path, outage=16.0)


def _restart_under_worker(settings, grid_env, grid_tasks_command, celery_app_factory,
                          tmp_path: Path, outage: float) -> None:
    server = RedisServer(tmp_path / "redis").start()
    own = settings.replace(broker_url=server.url(1), result_backend=server.url(2),
                           redis_url=server.url(3))
    env = {**grid_env, **own.to_env(), "PYTHONPATH": str(REPO_ROOT)}
    argv = [*grid_tasks_command, "worker", "--scheduler", "--no-check", "-l", "INFO",
            "--", "-I", "tests.node.restart_tasks"]
    markers = tmp_path / "markers"
    markers.mkdir()
    sup = Supervisor(tmp_path / "logs")
    client = celery_app_factory(own)
    pids: set[int] = set()
    try:
        worker = sup.spawn("scheduler", argv, env=env)
        before = _ask_pid(client, worker, 60)
        # An acks-late delivery runs (unacknowledged) while the other slot's BRPOP
        # waits: the state in which Redis going away used to kill the worker.
        client.send_task(HOLD, kwargs={"marker_dir": str(markers), "seconds": 3.0})
        _wait(lambda: any(markers.glob("running-*")), 30, "the hold to run",
              lambda: worker.log_tail(30))
        server.stop()
        time.sleep(outage)
        server.start()
        # a fresh client: this one's result backend may have given up during a long outage
        client = celery_app_factory(own)
        after = _ask_pid(client, worker, 60)
        # the held task ends (after Redis is back, or during a long outage): its late
        # ack of the lost connection's delivery must not end the worker either
        _wait(lambda: any(markers.glob("done-*")), 30, "the hold to end",
              lambda: worker.log_tail(30))
        time.sleep(0.5)  # the ack follows the task's return
        assert _ask_pid(client, worker, 30) == before
        pids = sup.all_pids()
        log = (tmp_path / "logs" / "scheduler.log").read_text(errors="replace")
        assert "Unrecoverable error" not in log and "AttributeError" not in log, worker.log_tail(60)
        assert worker.alive() and after == before == worker.pid
    finally:
        pids |= sup.all_pids()
        sup.stop_all(timeout=10)
        server.stop()
    assert leftover(pids) == []


@pytest.mark.parametrize("delivered", [0, 2])
def test_settle_unacked_never_leaves_half_restored_state(delivered: int) -> None:
    """Redis down: the unacked deliveries are dropped locally (Redis keeps them for the
    visibility-timeout restore) and a later close does not try again."""
    from collections import OrderedDict

    from grid_tasks.node.consumer import settle_unacked

    class QoS:
        def __init__(self) -> None:
            self._delivered: OrderedDict = OrderedDict((i, object()) for i in range(delivered))

        def restore_unacked_once(self) -> None:
            self._delivered.restored = True  # what kombu does in its finally
            if self._delivered:
                raise ConnectionError("Redis is down")

    class Channel:
        _qos = QoS()

    class Conn:
        _default_channel = Channel()

    qos = Conn._default_channel._qos
    settle_unacked(Conn())
    assert not qos._delivered and qos._delivered.restored

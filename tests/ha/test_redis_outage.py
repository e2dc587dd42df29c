"""A leading beat rides out a Redis restart and a Redis that comes back empty."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest
import redis

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.stack import grid_tasks_command
from grid_tasks.embedded.supervisor import Supervisor, leftover
from grid_tasks.security.role_keys import ensure_grid_keys
from grid_tasks.security.roles import Role
from tests.conftest import DEMO_TOPOLOGY, REPO_ROOT
from tests.ha import probe

pytestmark = pytest.mark.timeout(120)


def _wait_more(client: redis.Redis, than: int, timeout: float, why: str, child) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            n = client.llen(probe.QUEUE)
        except redis.ConnectionError:
            n = -1
        if n > than:
            return n
        assert child.alive(), f"the beat died:\n{child.log_tail(30)}"
        time.sleep(0.05)
    raise AssertionError(f"no new send after {why}:\n{child.log_tail(30)}")


def test_beat_survives_a_redis_restart_and_rebuilds_a_lost_schedule(tmp_path):
    server = RedisServer(tmp_path / "redis").start()  # our own: we restart it
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update({"GRID_TASKS_BROKER_URL": server.url(1), "GRID_TASKS_RESULT_BACKEND":
                server.url(2), "GRID_TASKS_REDIS_URL": server.url(3),
                "GRID_TASKS_TOPOLOGY": str(DEMO_TOPOLOGY),
                "GRID_TASKS_STATE_DIR": str(tmp_path / "state"),
                "GRID_TASKS_TEST_PROBE_EVERY": "0.2", "PYTHONPATH": str(REPO_ROOT)})
    keys = ensure_grid_keys(tmp_path / "state" / "keys", "tester",
                            now=dt.datetime.now(dt.timezone.utc))
    env.update(keys.signing(Role.SCHEDULER).to_env())  # a beat signs as a scheduler
    supervisor = Supervisor(tmp_path / "logs")
    child = supervisor.spawn("beat", grid_tasks_command(
        "beat", "--lease", "1.5", "--poll", "0.1", "--include", probe.__name__, "--no-check"),
        env=env, cwd=REPO_ROOT)
    client = redis.Redis.from_url(server.url(1))
    try:
        _wait_more(client, 2, 30, "start", child)
        server.stop()
        time.sleep(1.5)
        assert child.alive(), f"the beat died with Redis:\n{child.log_tail(30)}"
        server.start()  # same port and password, no data kept
        _wait_more(client, 0, 15, "the restart", child)
        client.flushall()  # and once more, lost while the beat keeps running
        _wait_more(client, 0, 15, "the flush", child)
    finally:
        pids = supervisor.all_pids()
        supervisor.stop_all(timeout=10)
        client.close()
        server.stop()
    assert leftover(pids) == []

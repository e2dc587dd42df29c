"""A launch-critical task whose worker is SIGKILLed comes back and runs (acks late)."""

from __future__ import annotations

import signal
import time

from grid_tasks.celery_app import celery_config
from grid_tasks.embedded.supervisor import Supervisor, leftover
from tests.conftest import REPO_ROOT


def test_killed_worker_task_is_redelivered(settings, grid_env, grid_tasks_command,
                                           celery_app_factory, tmp_path):
    fast = settings.replace(visibility_timeout=2.0)
    transport = celery_config(fast)["broker_transport_options"]
    assert transport["unacked_restore_interval"] == 1
    env = {**grid_env, **fast.to_env(), "PYTHONPATH": str(REPO_ROOT)}
    argv = [*grid_tasks_command, "worker", "--scheduler", "--no-check", "-l", "WARNING",
            "--", "-I", "tests.node.lost_tasks"]
    markers = tmp_path / "markers"
    markers.mkdir()
    client = celery_app_factory(fast)
    sup = Supervisor(tmp_path / "logs")
    try:
        first = sup.spawn("first", argv, env=env)
        result = client.send_task("tests.node.lost_tasks.launch_once",
                                  kwargs={"marker_dir": str(markers)})
        deadline = time.monotonic() + 30
        while not list(markers.glob("attempt-*")):
            assert time.monotonic() < deadline, first.log_tail(20)
            time.sleep(0.05)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
        killed = time.monotonic()
        second = sup.spawn("second", argv, env=env)
        answer = result.get(timeout=30)
        assert answer["attempt"] == 2 and answer["pid"] != first.pid
        assert time.monotonic() - killed < 60
        assert second.alive()
    finally:
        pids = sup.all_pids()
        sup.stop_all(timeout=10)
        assert leftover(pids) == []

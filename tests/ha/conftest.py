"""Fixtures for the HA beat tests: real ``grid-tasks beat`` processes and a probe worker."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from grid_tasks.embedded.stack import grid_tasks_command
from grid_tasks.embedded.supervisor import Child, Supervisor, leftover
from grid_tasks.ha.config import LEASE_KEY
from grid_tasks.ha.lease import read_holder
from grid_tasks.ha.status import read_status
from grid_tasks.settings import Settings
from tests.conftest import REPO_ROOT
from tests.ha import probe

LEASE = 2.0
POLL = 0.1
EVERY = 0.3


class Beats:
    """Starts named beat processes on the test's Redis and watches the shared state."""

    def __init__(self, settings: Settings, env: dict[str, str], log_dir: Path) -> None:
        self.supervisor = Supervisor(log_dir)
        self.env = {**env, "PYTHONPATH": str(REPO_ROOT),
                    "GRID_TASKS_TEST_PROBE_EVERY": repr(EVERY)}
        self.client = redis.Redis.from_url(settings.redis_url)
        self.children: dict[str, Child] = {}

    def start(self, name: str) -> Child:
        argv = grid_tasks_command("beat", "--lease", repr(LEASE), "--poll", repr(POLL),
                                  "--name", name, "--include", probe.__name__,
                                  "--no-check", "-l", "INFO")
        child = self.supervisor.spawn(f"beat-{name}", argv, env=self.env, cwd=REPO_ROOT)
        self.children[name] = child
        return child

    def leader(self) -> str | None:
        holder = read_holder(self.client, LEASE_KEY)
        return holder.identity if holder else None

    def role(self, name: str) -> str | None:
        roles = {m.identity: m.role for m in read_status(self.client).members}
        return roles.get(name)

    def wait(self, what: Callable[[], bool], timeout: float, why: str) -> float:
        """Poll ``what`` every 10 ms; the time it became true."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if what():
                return time.time()
            for name, child in self.children.items():
                if child.process.poll() is not None and child.process.returncode > 0:
                    raise AssertionError(f"beat {name} exited:\n{child.log_tail(30)}")
            time.sleep(0.01)
        logs = "\n".join(f"--- {n}\n{c.log_tail(15)}" for n, c in self.children.items())
        raise AssertionError(f"timed out waiting for {why}\n{logs}")

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.killpg(self.children[name].pid, sig)  # its own session: only that beat


@pytest.fixture
def beats(settings: Settings, grid_env: dict[str, str], tmp_path: Path) -> Iterator[Beats]:
    found = Beats(settings, grid_env, tmp_path / "beat-logs")
    yield found
    pids = found.supervisor.all_pids()
    for child in found.children.values():
        if child.process.poll() is None:
            os.killpg(child.pid, signal.SIGCONT)  # a stopped beat cannot handle SIGTERM
    found.supervisor.stop_all(timeout=10)
    found.client.close()
    assert leftover(pids) == [], "beat processes survived teardown"


@pytest.fixture
def probe_runs(settings: Settings, celery_app_factory: Any,
               in_process_worker: Any) -> Callable[[], list[tuple[float, str]]]:
    """A real worker executing the probe; returns a reader of its recorded runs."""
    app = celery_app_factory()
    in_process_worker(app, queues=[probe.QUEUE])
    client = redis.Redis.from_url(settings.redis_url)
    return lambda: probe.runs(client)

"""A live grid shared by a test module: scheduler worker and node daemons as subprocesses.

Starting workers costs seconds, so one grid serves the whole package
(``module_grid``, package-scoped); tests must leave it idle (every job finished or
cancelled) and must not use the shared ``settings`` fixture, whose FLUSHALL would
wipe the grid's queues.  Tests without workers use :func:`grid_settings` on other dbs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.settings import Settings
from tests.conftest import DEMO_TOPOLOGY

NODES = (("rmA", "node1"), ("rmA", "node2"), ("rmB", "node3"))
LAUNCH_TIMEOUT = "5"


def grid_settings(redis_server: Any, state: Path, db_url: str | None = None,
                  dbs: tuple[int, int, int] = (4, 5, 6)) -> Settings:
    """Settings on the private Redis (broker, results, redis dbs; flushed), relaxed heartbeats.

    Heartbeats are 0.5 s / TTL 3 s, not the 0.2/0.4 s of the shared fixture: on a
    busy 2-core machine a subprocess daemon misses 0.4 s TTLs and reads Unknown.
    """
    for db in dbs:
        client = redis.Redis.from_url(redis_server.url(db))
        client.flushdb()
        client.close()
    state.mkdir(parents=True, exist_ok=True)
    return Settings(
        broker_url=redis_server.url(dbs[0]), result_backend=redis_server.url(dbs[1]),
        redis_url=redis_server.url(dbs[2]),
        database_url=db_url or f"sqlite:///{state / 'grid_tasks.db'}",
        state_dir=state, topology_file=DEMO_TOPOLOGY,
        heartbeat_interval=0.5, heartbeat_ttl=3.0, visibility_timeout=30.0,
        single_user=True)  # a one-user test grid: root node daemons run its jobs


class LiveGrid:
    """Handles of a running test grid."""

    def __init__(self, settings: Settings, grid: Any, children: dict[str, Any],
                 supervisor: Any, env: dict[str, str]) -> None:
        self.settings, self.grid, self.children = settings, grid, children
        self.supervisor, self.env = supervisor, env

    def start_node(self, rm: str, node: str) -> Any:
        from grid_tasks.embedded.stack import grid_tasks_command
        from grid_tasks.node.registry import NodeRegistry

        argv = grid_tasks_command("worker", "--rm", rm, "--node", node, "-l", "WARNING",
                                  "--no-check")
        env = {k: v for k, v in self.env.items() if k != "GRID_TASKS_DATABASE_URL"}
        child = self.supervisor.spawn(f"{rm}-{node}-{len(self.supervisor.all_pids())}", argv,
                                      env=env)  # no database: nodes report to a gatekeeper
        self.children[node] = child
        NodeRegistry.from_url(self.settings.redis_url, self.settings.heartbeat_ttl) \
            .wait_alive([(rm, node)], timeout=30)
        return child


@pytest.fixture(scope="package")
def module_grid(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGrid]:
    yield from _live_grid(redis_server, tmp_path_factory, None)


def _live_grid(redis_server: Any, tmp_path_factory: pytest.TempPathFactory,
               db_url: str | None, dbs: tuple[int, int, int] = (4, 5, 6),
               extra_env: dict[str, str] | None = None,
               gatekeepers: bool = True) -> Iterator[LiveGrid]:
    """A live grid: scheduler worker and node daemons as subprocesses, as in production.

    (In-process Celery test workers died now and then in CI: their consumer's BRPOP
    socket was closed under them from another thread of the test process.)
    ``extra_env`` goes to every worker (``GRID_TASKS_*`` of this process do not).
    ``gatekeepers``: the scheduler worker also serves every RM's gatekeeper queue (off
    for a grid that runs its own gatekeeper processes, as the DUROC tests do)."""
    base = tmp_path_factory.mktemp("grid")
    # Each live grid gets its own redis-server, stopped with the grid: a worker of an
    # earlier grid that failed to shut down can then never consume this grid's tasks.
    own = RedisServer(base / "redis")
    own.start()
    try:
        yield from _grid_on(own, base, db_url, dbs, extra_env or {}, gatekeepers)
    finally:
        own.stop()


def _grid_on(redis_server: Any, base: Path, db_url: str | None,
             dbs: tuple[int, int, int], extra_env: dict[str, str],
             gatekeepers: bool = True) -> Iterator[LiveGrid]:
    from grid_tasks import db
    from grid_tasks.client import Grid
    from grid_tasks.embedded.stack import grid_tasks_command, prepare_database
    from grid_tasks.embedded.supervisor import Supervisor, leftover
    from grid_tasks.topology import load_topology

    settings = grid_settings(redis_server, base / "state", db_url, dbs)
    assert prepare_database(settings, load_topology(settings.topology_file))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.to_env())
    env.update({"GRID_TASKS_LAUNCH_TIMEOUT": LAUNCH_TIMEOUT, "PYTHONUNBUFFERED": "1"})
    env.update(extra_env)
    supervisor = Supervisor(base / "worker-logs")
    grid = Grid(settings)
    live = LiveGrid(settings, grid, {}, supervisor, env)
    roles = ("--scheduler", "--gatekeepers") if gatekeepers else ("--scheduler",)
    supervisor.spawn("scheduler", grid_tasks_command(
        "worker", *roles, "--no-check", "-l", "WARNING", "-c", "2"), env=env)
    try:
        for rm, node in NODES:
            live.start_node(rm, node)
        yield live
    finally:
        pids = supervisor.all_pids()
        supervisor.stop_all(timeout=10)
        grid.close()
    db.dispose_engines()
    assert leftover(pids) == [], "worker processes survived teardown"


@pytest.fixture(scope="package")
def postgres_grid(redis_server: Any,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGrid]:
    """The same grid on PostgreSQL (skipped unless GRID_TASKS_TEST_POSTGRES_URL is set)."""
    from grid_tasks.db.testing import postgres_test_url, temporary_database

    url = postgres_test_url()
    if not url:
        pytest.skip("GRID_TASKS_TEST_POSTGRES_URL not set")
    with temporary_database(url) as db_url:
        # Both package-scoped grids can be alive at once: separate Redis databases, or
        # one grid's node daemons would consume the other's launches.
        yield from _live_grid(redis_server, tmp_path_factory, db_url, dbs=(12, 13, 14))


@pytest.fixture
def quiet_settings(redis_server: Any, tmp_path: Path) -> Settings:
    """Settings for worker-less tests beside the live grid (Redis dbs 7-9)."""
    return grid_settings(redis_server, tmp_path / "state", dbs=(7, 8, 9))

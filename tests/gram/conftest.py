"""A live grid shared by a test module: in-process scheduler worker, subprocess node daemons.

Starting workers costs seconds, so one grid serves the whole package
(``module_grid``, package-scoped); tests must leave it idle (every job finished or
cancelled) and must not use the shared ``settings`` fixture, whose FLUSHALL would
wipe the grid's queues.  Tests without workers use :func:`grid_settings` on other dbs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from grid_tasks.celery_app import SCHEDULER_QUEUE
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
        heartbeat_interval=0.5, heartbeat_ttl=3.0, visibility_timeout=30.0)


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
        child = self.supervisor.spawn(f"{rm}-{node}-{len(self.supervisor.all_pids())}", argv,
                                      env=self.env)
        self.children[node] = child
        NodeRegistry.from_url(self.settings.redis_url, self.settings.heartbeat_ttl) \
            .wait_alive([(rm, node)], timeout=30)
        return child


@pytest.fixture(scope="package")
def module_grid(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGrid]:
    yield from _live_grid(redis_server, tmp_path_factory, None)


def _live_grid(redis_server: Any, tmp_path_factory: pytest.TempPathFactory,
               db_url: str | None, dbs: tuple[int, int, int] = (4, 5, 6),
               scheduler_process: bool = True,
               extra_env: dict[str, str] | None = None) -> Iterator[LiveGrid]:
    """A live grid; its scheduler worker is a ``grid-tasks worker --scheduler``
    subprocess, as in production, or with ``scheduler_process=False`` a thread pool
    worker in this process.  (In-process workers died now and then in CI: their
    consumer's BRPOP socket was closed under them from another thread of the test
    process - EBADF, then an unrecoverable ValueError; cause not yet found.)
    ``extra_env`` goes to every worker subprocess (``GRID_TASKS_*`` of this process do not)."""
    base = tmp_path_factory.mktemp("grid")
    # Each live grid gets its own redis-server, stopped with the grid: a worker of an
    # earlier grid that failed to shut down can then never consume this grid's tasks.
    own = RedisServer(base / "redis")
    own.start()
    try:
        yield from _grid_on(own, base, db_url, dbs, scheduler_process, extra_env or {})
    finally:
        own.stop()


def _grid_on(redis_server: Any, base: Path, db_url: str | None,
             dbs: tuple[int, int, int], scheduler_process: bool,
             extra_env: dict[str, str]) -> Iterator[LiveGrid]:
    from celery.contrib.testing.worker import start_worker

    from grid_tasks import db
    from grid_tasks.celery_app import create_app
    from grid_tasks.client import Grid
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.embedded.supervisor import Supervisor, leftover
    from grid_tasks.topology import load_topology

    settings = grid_settings(redis_server, base / "state", db_url, dbs)
    assert prepare_database(settings, load_topology(settings.topology_file))
    saved = os.environ.get("GRID_TASKS_LAUNCH_TIMEOUT")
    os.environ["GRID_TASKS_LAUNCH_TIMEOUT"] = LAUNCH_TIMEOUT
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.to_env())
    env["GRID_TASKS_LAUNCH_TIMEOUT"] = LAUNCH_TIMEOUT
    env.update(extra_env)
    env["PYTHONUNBUFFERED"] = "1"
    supervisor = Supervisor(base / "worker-logs")
    app = create_app(settings)
    grid = Grid(settings)
    live = LiveGrid(settings, grid, {}, supervisor, env)
    with ExitStack() as stack:
        if scheduler_process:
            from grid_tasks.embedded.stack import grid_tasks_command

            supervisor.spawn("scheduler", grid_tasks_command(
                "worker", "--scheduler", "--no-check", "-l", "WARNING", "-c", "2"), env=env)
        else:
            stack.enter_context(_tolerant(start_worker(app, pool="threads", concurrency=2,
                                                       perform_ping_check=False,
                                                       shutdown_timeout=60.0,
                                                       queues=[SCHEDULER_QUEUE])))
        for rm, node in NODES:
            live.start_node(rm, node)
        try:
            yield live
        finally:
            pids = supervisor.all_pids()
            supervisor.stop_all(timeout=10)
            grid.close()
    app.close()
    db.dispose_engines()
    if saved is None:
        os.environ.pop("GRID_TASKS_LAUNCH_TIMEOUT", None)
    else:
        os.environ["GRID_TASKS_LAUNCH_TIMEOUT"] = saved
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


@contextmanager
def _tolerant(worker: Any) -> Iterator[Any]:
    """The in-process scheduler worker; a worker thread still busy at teardown is a
    warning naming what it was doing, not an error of whichever test ran last, and
    it must not break the next grid of the session (Celery's worker state is global)."""
    import warnings

    with ExitStack() as inner:
        yielded = inner.enter_context(worker)
        try:
            yield yielded
        finally:
            try:
                inner.close()
            except RuntimeError as exc:
                if "failed to exit" not in str(exc):
                    raise
                warnings.warn(f"scheduler worker thread still busy at teardown: {exc}\n"
                              + _busy_stacks())
                _reset_worker_globals()


def _reset_worker_globals() -> None:
    """What Celery's test worker resets only once its thread has exited: without it
    the next in-process worker terminates at once and result.get() refuses to run."""
    from celery._state import _set_task_join_will_block
    from celery.worker import state

    state.should_terminate = None
    _set_task_join_will_block(False)


def _busy_stacks() -> str:
    """The stacks of the live threads but idle pool threads (the busy one comes first)."""
    import sys
    import threading
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        stack = traceback.format_stack(frame)
        if ident == threading.get_ident() or "work_queue.get" in stack[-1]:
            continue
        out.append(f"--- thread {names.get(ident, ident)}\n" + "".join(stack[-12:]))
    return "\n".join(out) or "(every other thread idle)"

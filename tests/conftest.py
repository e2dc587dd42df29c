"""Shared fixtures: a private Redis, settings pointing at it, real Celery workers.

Reusable by every package's tests:

* ``redis_server`` (session) - a private ``redis-server`` on a free loopback port,
  with a password; never the machine's Redis.  ``redis_server.url(db)``.
* ``settings`` - :class:`Settings` on that server (broker db 1, results db 2,
  tokens/heartbeats db 3, all flushed before each test), a tmp state dir with a
  SQLite URL, the demo topology, fast heartbeats (0.2 s, TTL 0.4 s).
* ``celery_app_factory`` - ``make(settings=None, node=None) -> Celery``: a fresh
  app per call (``node=("rmA", "node1")`` makes its workers that node's daemon).
  The newest app is also made *current*, so ``some_shared_task.delay()`` in a test
  goes to the private broker, never to the module-level app's default Redis.
* ``in_process_worker`` - ``start(app, queues=None, pool="threads")``: a real
  worker thread (``celery.contrib.testing.worker.start_worker``), stopped at teardown.
* ``node_worker`` - ``start(rm, node, **env) -> Child``: a ``grid-tasks worker``
  subprocess, registered before it returns; every process is killed at teardown
  and the test fails if any survives.  Like every node daemon it gets no database
  URL: a test that runs jobs on it needs the RM's gatekeeper (``gatekeeper_worker``).
* ``gatekeeper_worker`` - ``start(*args, **env) -> Child``: a ``grid-tasks worker
  --rm rmA`` gatekeeper subprocess on ``settings`` (or ``grid-tasks worker *args``, e.g.
  ``--scheduler --gatekeepers``), which records what nodes report.
* ``grid_tasks_command`` - argv prefix running ``grid-tasks`` with this interpreter.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator

# Imported here, in the main thread, before any in-process Celery worker thread runs:
# CPython 3.11.7 can raise "SystemError: AST constructor recursion depth mismatch" when
# pytest's assertion rewriter compiles a lazily imported plugin module while another
# thread compiles too (fixed in 3.11.8).
import hypothesis  # noqa: F401
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.stack import grid_tasks_command as _grid_tasks_command
from grid_tasks.embedded.supervisor import Child, Supervisor, leftover
from grid_tasks.settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "config"
DEMO_TOPOLOGY = CONFIG_DIR / "demo-grid.toml"
SHARED_DIR = REPO_ROOT.parent / "shared"  # specs, workloads: beside the checkout


@pytest.fixture(scope="session", autouse=True)
def private_grid_records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The tests' stacks record themselves (grid_tasks.embedded.locate) in a folder of
    the session's, never in the user's $XDG_RUNTIME_DIR, where a real grid may run."""
    folder = tmp_path_factory.mktemp("xdg-runtime")
    previous = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(folder)
    try:
        yield folder
    finally:
        if previous is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = previous


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server for the whole session (never 127.0.0.1:6379)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def settings(redis_server: RedisServer, tmp_path: Path) -> Settings:
    """Settings on the private Redis (flushed), a tmp state dir and the demo topology."""
    client = redis.Redis.from_url(redis_server.url(0))
    client.flushall()
    client.close()
    state = tmp_path / "state"
    state.mkdir()
    return Settings(
        broker_url=redis_server.url(1), result_backend=redis_server.url(2),
        redis_url=redis_server.url(3), database_url=f"sqlite:///{state / 'grid_tasks.db'}",
        state_dir=state, topology_file=DEMO_TOPOLOGY,
        heartbeat_interval=0.2, heartbeat_ttl=0.4, visibility_timeout=30.0,
        single_user=True,  # a one-user test grid: node daemons run jobs as this user
    )


@pytest.fixture
def grid_env(settings: Settings) -> dict[str, str]:
    """A child-process environment for ``settings`` (no stray GRID_TASKS_* inherited)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.to_env())
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def grid_tasks_command() -> list[str]:
    return _grid_tasks_command()


@pytest.fixture
def celery_app_factory(settings: Settings) -> Iterator[Callable[..., Any]]:
    """``make(settings=None, node=None)``: fresh Celery apps, closed at teardown."""
    from celery import current_app

    from grid_tasks.celery_app import create_app

    previous = current_app._get_current_object()
    apps = []

    def make(app_settings: Settings | None = None,
             node: tuple[str, str] | None = None) -> Any:
        app = create_app(app_settings or settings)
        if node is not None:
            app.conf.grid_tasks_node = node
        app.set_current()
        apps.append(app)
        return app

    yield make
    previous.set_current()
    for app in apps:
        app.close()


@pytest.fixture
def in_process_worker() -> Iterator[Callable[..., Any]]:
    """``start(app, queues=None, pool="threads", concurrency=2)``: a worker in a thread."""
    from celery.contrib.testing.worker import start_worker

    with ExitStack() as stack:
        def start(app: Any, queues: list[str] | None = None, pool: str = "threads",
                  concurrency: int = 2) -> Any:
            kwargs: dict[str, Any] = {"perform_ping_check": False, "pool": pool,
                                      "concurrency": concurrency, "shutdown_timeout": 15.0}
            if queues:
                kwargs["queues"] = queues
            return stack.enter_context(start_worker(app, **kwargs))

        yield start


@pytest.fixture
def node_worker(settings: Settings, grid_env: dict[str, str],
                tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """``start(rm, node, wait=True, **env)``: a ``grid-tasks worker`` node daemon subprocess."""
    from grid_tasks.node.registry import NodeRegistry

    supervisor = Supervisor(tmp_path / "worker-logs")
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)

    def start(rm: str, node: str, wait: bool = True, **extra_env: str) -> Child:
        argv = _grid_tasks_command("worker", "--rm", rm, "--node", node, "-l", "WARNING",
                                   "--no-check")
        env = {**grid_env, **extra_env}
        env.pop("GRID_TASKS_DATABASE_URL", None)  # nodes hold no database credentials
        child = supervisor.spawn(f"{rm}-{node}", argv, env=env)
        if wait:
            try:
                registry.wait_alive([(rm, node)], timeout=30)
            except Exception:
                raise AssertionError(f"{rm}/{node} did not register:\n{child.log_tail(20)}")
        return child

    yield start
    pids = supervisor.all_pids()
    supervisor.stop_all(timeout=10)
    assert leftover(pids) == [], "worker processes survived teardown"


@pytest.fixture
def gatekeeper_worker(grid_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """``start(*args, **env)``: a ``grid-tasks worker --rm rmA`` gatekeeper subprocess, or
    ``grid-tasks worker *args`` (it records node daemons' reports and registrations)."""
    supervisor = Supervisor(tmp_path / "gatekeeper-logs")

    def start(*args: str, **extra_env: str) -> Child:
        argv = _grid_tasks_command("worker", *(args or ("--rm", "rmA")), "-l", "WARNING",
                                   "--no-check")
        return supervisor.spawn(f"gatekeeper-{len(supervisor.all_pids())}", argv,
                                env={**grid_env, **extra_env})

    yield start
    pids = supervisor.all_pids()
    supervisor.stop_all(timeout=10)
    assert leftover(pids) == [], "gatekeeper processes survived teardown"


@pytest.fixture
def throwaway_user() -> Iterator[pwd.struct_passwd]:
    """A system user made for this test and removed afterwards (needs root and useradd)."""
    yield from made_user()


def made_user() -> Iterator[pwd.struct_passwd]:
    """A fresh system user, removed when the generator ends (for fixtures of any scope)."""
    name = f"gtuser{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", "--user-group", name],
                   check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
        with pytest.raises(KeyError):
            pwd.getpwnam(name)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder any account may write (tmp_path sits under a folder private to root), for
    the output of jobs run as a throwaway account."""
    path = Path(tempfile.mkdtemp(prefix="grid-tasks-test-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)

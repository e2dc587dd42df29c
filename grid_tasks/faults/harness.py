"""A private grid for fault injection: its own Redis, database, scheduler and node daemons.

Everything runs as real processes (``grid-tasks worker`` subprocesses, a private
``redis-server``) with fast settings - short heartbeats, leases, visibility timeout,
a 1 s RMPOLLINTERVAL - so a fault case recovers in seconds, not minutes.  Nothing
here touches the machine's shared Redis or database.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.stack import grid_tasks_command, prepare_database
from grid_tasks.embedded.supervisor import Child, Supervisor, leftover
from grid_tasks.errors import GridTasksError
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.private_files import private_dir
from grid_tasks.security.role_keys import GridKeys, also_trust, ensure_grid_keys
from grid_tasks.security.roles import Role
from grid_tasks.security.signing import setup_signing
from grid_tasks.settings import Settings, default_config_file, node_env
from grid_tasks.topology import load_topology
from grid_tasks.utc import as_utc

T = TypeVar("T")

#: Environment variable put into every fault job's processes, to find them later.
MARKER_ENV = "GT_FAULT_MARKER"


class FaultTimeout(GridTasksError):
    """A fault case waited longer than its bound for something to happen."""


def until(predicate: Callable[[], T], timeout: float, what: str, poll: float = 0.05) -> T:
    """Poll ``predicate`` until truthy; its value.  FaultTimeout after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise FaultTimeout(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)


def _fast_policy_dir(directory: Path, poll_s: int) -> Path:
    """The demo topology and its policy copied with a short RMPOLLINTERVAL and DEFERTIME
    (a launch lost to an injected fault is retried within seconds, not minutes)."""
    directory.mkdir(parents=True, exist_ok=True)
    src = default_config_file("demo-grid.toml")
    shutil.copy(src, directory / "grid.toml")
    (policy,) = {rm.policy_file for rm in load_topology(src).rms.values()}
    cfg = policy.read_text()
    cfg = re.sub(r"^RMPOLLINTERVAL.*$", f"RMPOLLINTERVAL          00:00:{poll_s:02d}", cfg,
                 flags=re.MULTILINE)
    cfg = re.sub(r"^DEFERTIME.*$", "DEFERTIME               00:00:02", cfg, flags=re.MULTILINE)
    (directory / policy.name).write_text(cfg)
    return directory / "grid.toml"


class FaultGrid:
    """The grid a fault case runs on; :meth:`start`, then :meth:`stop` (or ``with``)."""

    def __init__(self, state_dir: Path, *, database_url: str | None = None,
                 heartbeat: float = 0.5, heartbeat_ttl: float = 3.0,
                 visibility_timeout: float = 5.0, launch_timeout: float = 5.0,
                 beats: tuple[str, ...] = ("beat-a", "beat-b"), beat_lease: float = 2.0,
                 gridmap_file: Path | None = None) -> None:
        self.state_dir = Path(state_dir).resolve()
        # a grid map runs jobs as its unprivileged accounts (a root grid without one runs
        # them as root: a one-user grid, what the fault cases need)
        self.gridmap_file = gridmap_file
        self.database_url = database_url or f"sqlite:///{self.state_dir / 'grid_tasks.db'}"
        self.heartbeat, self.heartbeat_ttl = heartbeat, heartbeat_ttl
        self.visibility_timeout, self.launch_timeout = visibility_timeout, launch_timeout
        self.beat_names, self.beat_lease = beats, beat_lease
        self.beats: dict[str, Child] = {}
        self.redis = RedisServer(self.state_dir / "redis")
        self.supervisor = Supervisor(self.state_dir / "logs")
        self.nodes: dict[str, Child] = {}
        self.scheduler: Child | None = None
        self.settings: Settings | None = None
        self.keys: GridKeys | None = None
        self.topology = None
        self._grid: Any = None
        self._pids: set[int] = set()
        #: POSIX time each node's current daemon was spawned (its SQL record is newer)
        self.spawned: dict[str, float] = {}
        #: PIDs this grid stopped (SIGSTOP) and must resume: pid -> what it is
        self.frozen: dict[int, str] = {}

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> "FaultGrid":
        private_dir(self.state_dir)  # 0700 from the start: it holds the grid's secrets
        topology_file = _fast_policy_dir(self.state_dir / "config", 1)
        self.topology = load_topology(topology_file)
        self.redis.start()
        self.settings = Settings(
            broker_url=self.redis.url(1), result_backend=self.redis.url(2),
            redis_url=self.redis.url(3), database_url=self.database_url,
            state_dir=self.state_dir, topology_file=topology_file,
            heartbeat_interval=self.heartbeat, heartbeat_ttl=self.heartbeat_ttl,
            visibility_timeout=self.visibility_timeout, gridmap_file=self.gridmap_file,
            single_user=self.gridmap_file is None)
        # signed like every grid that ships: the test process is this grid's user
        self.keys = ensure_grid_keys(self.state_dir / "keys", getpass.getuser(),
                                     now=dt.datetime.now(dt.timezone.utc))
        if self.gridmap_file is None:  # one user: it administers its grid
            also_trust(self.keys.user, Role.OPERATOR, getpass.getuser())
        self.settings = self.settings.replace(signing=self.keys.signing(Role.USER))
        try:
            prepare_database(self.settings, self.topology)
            self.start_scheduler()
            for name in self.beat_names:
                self.start_beat(name)
            for spec in self.topology.iter_nodes():
                self.start_node(spec.rm, spec.name, wait=False)
            self.wait_nodes([(s.rm, s.name) for s in self.topology.iter_nodes()])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> list[int]:
        """Stop everything; the PIDs of this grid that survived (should be none)."""
        self._pids |= self.supervisor.all_pids()
        self.thaw()  # a stopped process ignores SIGTERM until resumed
        if self._grid is not None:
            self._grid.close()
            self._grid = None
        self.supervisor.stop_all(timeout=10)
        self.redis.stop()

        db.dispose_engines()
        return leftover(self._pids)

    def __enter__(self) -> "FaultGrid":
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    # -- processes ---------------------------------------------------------------------
    def env(self, role: Role = Role.SCHEDULER, **extra: str) -> dict[str, str]:
        """A child's environment: the grid's settings with ``role``'s key (a node's
        without the database: nodes report to their gatekeeper)."""
        assert self.settings is not None, "start() the grid first"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
        assert self.keys is not None
        mine = self.settings.replace(signing=self.keys.signing(role))
        env.update(node_env(mine) if role is Role.NODE else mine.to_env())
        env.update({"PYTHONUNBUFFERED": "1",
                    "GRID_TASKS_LAUNCH_TIMEOUT": repr(self.launch_timeout)})
        env.update(extra)
        return env

    def start_scheduler(self, standby: bool = False) -> Child:
        """The scheduler worker (with every gatekeeper queue); ``standby``: a second
        one beside it, not revived (a case stops it with ``supervisor.stop``)."""
        args = ["worker", "--scheduler", "--gatekeepers", "--no-check", "-l", "WARNING"]
        name = f"scheduler-standby-{len(self.supervisor.children)}" if standby else "scheduler"
        child = self.supervisor.spawn(name, grid_tasks_command(*args), env=self.env())
        if not standby:
            self.scheduler = child
        return child

    def start_beat(self, name: str) -> Child:
        """One of the HA beats (two by default, one active through a Redis lease)."""
        argv = grid_tasks_command("beat", "--lease", repr(self.beat_lease), "--poll", "0.1",
                                  "--name", name, "--no-check", "-l", "WARNING")
        self.beats[name] = self.supervisor.spawn(f"{name}-{len(self.supervisor.children)}",
                                                 argv, env=self.env())
        return self.beats[name]

    def start_node(self, rm: str, node: str, wait: bool = True, **env: str) -> Child:
        """A node daemon with the node key; ``env`` overrides its environment (the
        security self-test weakens one on purpose, e.g. ``GRID_TASKS_SIGNING="0"``: such
        a node may be refused its SQL record, so only its heartbeat is awaited)."""
        argv = grid_tasks_command("worker", "--rm", rm, "--node", node, "--no-check",
                                  "-l", "WARNING")
        name = f"node-{node}-{len(self.supervisor.children)}"
        self.spawned[node] = time.time()
        child = self.supervisor.spawn(name, argv, env=self.env(Role.NODE, **env))
        self.nodes[node] = child
        if wait:
            self.wait_nodes([(rm, node)], recorded=not env)
        return child

    def wait_nodes(self, names: list[tuple[str, str]], timeout: float = 40.0,
                   recorded: bool = True) -> None:
        """Until every named node heartbeats in Redis *and* its current daemon is
        recorded in SQL (the gatekeeper writes ``record_node`` a moment after the first
        heartbeat; a fault injected before that hits a node the scheduler half knows)."""
        assert self.settings is not None
        deadline = time.monotonic() + timeout
        registry = NodeRegistry.from_url(self.settings.redis_url, self.settings.heartbeat_ttl)
        try:
            registry.wait_alive(names, timeout=timeout)
        finally:
            registry.client.close()
        if not recorded:
            return
        until(lambda: not self.unrecorded(names), max(1.0, deadline - time.monotonic()),
              f"nodes recorded in SQL: {', '.join(self.unrecorded(names))}", poll=0.1)

    def unrecorded(self, names: list[tuple[str, str]]) -> list[str]:
        """The named nodes whose current daemon has no SQL record yet."""
        wanted = {node: rm for rm, node in names}
        with db.session_scope(self.grid.sessions) as session:
            rows = {r.name: r for r in session.scalars(
                select(db.Node).where(db.Node.name.in_(list(wanted))))}
        missing = []
        for node, rm in wanted.items():
            row = rows.get(node)
            since = dt.datetime.fromtimestamp(self.spawned.get(node, 0.0) - 1.0,
                                              dt.timezone.utc)
            if row is None or row.registered_at is None or row.last_seen is None \
                    or as_utc(row.last_seen) < since:
                missing.append(f"{rm}/{node}")
        return missing

    def freeze(self, node: str) -> int:
        """SIGSTOP the node daemon process only (its job processes keep running); the
        PID, resumed by :meth:`thaw` or :meth:`ensure_healthy`."""
        pid = self.nodes[node].pid
        os.kill(pid, signal.SIGSTOP)
        self.frozen[pid] = node
        return pid

    def thaw(self) -> list[str]:
        """SIGCONT everything this grid froze; what was resumed."""
        resumed = []
        for pid, what in list(self.frozen.items()):
            try:
                os.kill(pid, signal.SIGCONT)
                resumed.append(what)
            except ProcessLookupError:
                pass
            del self.frozen[pid]
        return resumed

    def ensure_healthy(self, timeout: float = 60.0) -> list[str]:
        """Make the grid whole before a case: resume what a case froze, restart what
        exited, and wait until every node heartbeats and is recorded in SQL; what was
        done (e.g. ``["resumed node3", "restarted scheduler"]``)."""
        self.sign_as_user()
        done = [f"resumed {w}" for w in self.thaw()]
        process = self.redis.process
        if process is None or process.poll() is not None:  # a case died with it stopped
            self.redis.start()
            done.append("restarted redis-server")
        done += [f"restarted {w}" for w in self.revive()]
        assert self.topology is not None
        self.wait_nodes([(s.rm, s.name) for s in self.topology.iter_nodes()], timeout)
        return done

    def kill_node(self, node: str, whole_group: bool = True) -> None:
        """SIGKILL a node daemon: its process group, or only the daemon process."""
        child = self.nodes[node]
        self._pids |= self.supervisor.all_pids()
        if whole_group:
            os.killpg(child.pid, signal.SIGKILL)
        else:
            os.kill(child.pid, signal.SIGKILL)
        child.process.wait(10)
        self.frozen.pop(child.pid, None)

    def revive(self) -> list[str]:
        """Restart every scheduler or node daemon that exited, as a process manager
        (compose's ``restart: unless-stopped``, systemd) would; the names restarted."""
        revived = []
        if self.scheduler is not None and not self.scheduler.alive():
            self._pids |= self.supervisor.all_pids()
            self.start_scheduler()
            revived.append("scheduler")
        assert self.topology is not None
        for spec in self.topology.iter_nodes():
            child = self.nodes.get(spec.name)
            if child is not None and not child.alive():
                self._pids |= self.supervisor.all_pids()
                self.start_node(spec.rm, spec.name, wait=False)
                revived.append(spec.name)
        for name, child in list(self.beats.items()):
            if not child.alive():
                self._pids |= self.supervisor.all_pids()
                self.start_beat(name)
                revived.append(name)
        return revived

    def all_pids(self) -> set[int]:
        self._pids |= self.supervisor.all_pids()
        return set(self._pids)

    def sign_as_user(self) -> None:
        """Make this process sign and verify as this grid's user again.  Kombu's
        serializer registry is process-wide: a grid started later in this process (the
        database cases run on grids of their own) registered *its* key, and this grid's
        RMs would refuse every message signed with it ("unknown signer")."""
        assert self.settings is not None
        setup_signing(self.grid.app, self.settings.signing)

    # -- clients -----------------------------------------------------------------------
    @property
    def grid(self) -> Any:
        """A :class:`grid_tasks.client.Grid` on this grid (made lazily, closed at stop)."""
        if self._grid is None:
            self._grid = Grid(self.settings)
        return self._grid

    def submit(self, rsl: str, rm: str, marker: str) -> Any:
        """Submit a job whose processes carry ``MARKER_ENV=marker``."""
        return self.grid.submit(rsl, rm=rm, extra_env={MARKER_ENV: marker})

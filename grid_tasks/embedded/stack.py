"""The embedded stack: a whole grid on one machine (``grid-tasks up`` / ``demo``).

Starts, in order: a private redis-server (broker, results, tokens, heartbeats in
separate databases), the database (SQLite in the state dir, or the PostgreSQL
database named by ``--database-url``; migrated and the topology synced once, before
any daemon starts), two scheduler workers (the scheduler queue and the iterations of
every RM not marked ``scheduler = "own"``), one iteration worker per RM so marked, one
gatekeeper per RM, two highly available beats (:mod:`grid_tasks.ha`), one node daemon
per node of the topology, a ``/metrics`` endpoint in this process, optionally Flower
with basic auth and a private Slurm cluster.  :meth:`stop` (also on Ctrl-C / SIGTERM via
:func:`stop_on_signals`) leaves no process behind.
"""

from __future__ import annotations

import datetime as dt
import getpass
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from grid_tasks.embedded.database import check_database_url, prepare_database
from grid_tasks.embedded.demo_slurm import RUNNING_NOTE, DemoSlurm, start_demo_slurm
from grid_tasks.embedded.demo_slurm import start_local_slurm
from grid_tasks.embedded.envfile import ENV_FILE, write_env_file
from grid_tasks.embedded.flower import FLOWER_USER, flower_argv, flower_env, flower_password
from grid_tasks.embedded.locate import StackLock, announce, withdraw
from grid_tasks.embedded.redis_server import RedisServer, free_port
from grid_tasks.embedded.supervisor import Supervisor
from grid_tasks.errors import GridTasksError
from grid_tasks.ha.launch import beat_commands
from grid_tasks.metrics.server import start_metrics_server
from grid_tasks.node.harness import format_identities
from grid_tasks.node.registry import NodeRegistry, NodeStatus
from grid_tasks.private_files import private_dir
from grid_tasks.security.config import SigningSettings
from grid_tasks.security.role_keys import GridKeys, also_trust, ensure_grid_keys
from grid_tasks.security.roles import Role
from grid_tasks.settings import Settings, default_config_file, default_ttl, node_env
from grid_tasks.topology import GridTopology, SchedulerPlacement, load_topology

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

@dataclass(frozen=True)
class StackOptions:
    """What to start and how fast nodes heartbeat."""

    topology_file: Path = default_config_file("demo-grid.toml")
    state_dir: Path = Path(".state") / "embedded"
    flower: bool = False
    flower_port: int | None = None
    heartbeat_interval: float = 1.0
    start_timeout: float = 30.0
    loglevel: str = "INFO"
    #: sign every message (keys made in ``<state_dir>/keys`` on first start); off only
    #: when the operator's environment says ``GRID_TASKS_SIGNING=0``
    signing: bool = True
    #: the operator's grid map; None: a single-user grid, jobs run as the invoking user
    gridmap_file: Path | None = None
    #: leave a per-user record so commands in other directories find this grid
    #: (:mod:`grid_tasks.embedded.locate`); off for the demo's throwaway grid
    announce: bool = True
    #: also run a private Slurm cluster as RM ``slurm1`` when this machine can (the demo:
    #: :mod:`grid_tasks.embedded.demo_slurm`); ``slurm_note`` then says which way it went
    slurm: bool = False
    #: with ``slurm``: refuse to start without the cluster (``up --slurm``) rather than
    #: run without it (the demo)
    slurm_required: bool = False
    #: the grid's database (SQLAlchemy URL: SQLite or PostgreSQL); None: SQLite in the
    #: state dir.  It reaches the children in their environment only, never in an argv.
    database_url: str | None = None
    #: scale testing: K harness processes (:mod:`grid_tasks.node.harness`) split the
    #: nodes between them instead of one node daemon each; 0: real daemons
    node_harness: int = 0
    #: with ``node_harness``: ``real`` job managers or the ``standin``
    harness_jobs: str = "real"


class EmbeddedStack:
    """A running grid on this machine; use as a context manager or start()/stop()."""

    def __init__(self, options: StackOptions | None = None) -> None:
        self.options = options or StackOptions()
        if self.options.database_url is not None:
            check_database_url(self.options.database_url)
        self.topology: GridTopology = load_topology(self.options.topology_file)
        self.state_dir = Path(self.options.state_dir).resolve()
        self.redis = RedisServer(self.state_dir / "redis")
        self.supervisor = Supervisor(self.state_dir / "logs")
        self.settings: Settings | None = None
        self.flower_url: str | None = None
        self.flower_port: int | None = None
        self.flower_auth: str | None = None  # "user:password", in memory only
        self.flower_password_file: Path | None = None
        self.metrics: Any = None  # the /metrics endpoint (MetricsServer) while running
        self.keys: GridKeys | None = None  # each role's key, when signing
        self.lock = StackLock(self.state_dir)  # held from start to stop: one grid per dir
        self.topology_file = Path(self.options.topology_file)
        self.slurm: DemoSlurm | None = None  # the optional Slurm cluster, while it runs
        self.slurm_note: str | None = None  # one line: it runs, or why not

    @property
    def metrics_url(self) -> str | None:
        """Where Prometheus scrapes this grid (``.../metrics``), while it runs."""
        return self.metrics.url if self.metrics is not None else None

    # --- lifecycle -----------------------------------------------------------------

    def start(self, progress: Progress | None = None) -> Settings:
        """Bring everything up; returns the settings clients use to reach this grid."""
        say = progress or (lambda _msg: None)
        self.topology.check_policy_files()  # a grid that could never schedule: refuse
        self.lock.acquire()  # before anything is touched: the state may be another grid's
        try:
            private_dir(self.state_dir)  # database, env file, logs: owner only
            if self.options.slurm:
                say("starting a Slurm cluster if Slurm is installed")
                self._start_slurm()
            self.settings = self._start_redis_and_database(say)
            say("starting scheduler and node daemons")
            self._spawn_workers()
            say("starting beats")
            self._spawn_beats()  # after: their periodic iterations read the database
            self._start_metrics()
            if self.options.flower:
                self._spawn_flower()
            say("waiting for every node to register")
            self.wait_nodes()
            if self.options.flower:
                say("waiting for Flower to listen")
                self.wait_flower()
            return self.settings
        except BaseException:
            self.stop()
            raise

    def _start_redis_and_database(self, say: Progress) -> Settings:
        """Start Redis and prepare the database beside it (neither needs the other).

        The database is prepared once, before any daemon starts: run beside N starting
        daemons it got 1/N of the CPU and took longer with every node (issue 25: 52 of
        90 s at 128 nodes), past the gatekeepers' 30 s of retrying a node's first record.
        """
        with ThreadPoolExecutor(1, thread_name_prefix="prepare-database") as pool:
            prepared = pool.submit(prepare_database, Settings(
                database_url=self._database_url(), state_dir=self.state_dir), self.topology)
            say("starting redis-server")
            # killed with us even by SIGKILL, like the workers (when the starting thread
            # lives as long as the stack: the signal follows the thread)
            self.redis.die_with_parent = threading.current_thread() is threading.main_thread()
            self.redis.start()
            settings = self._settings()
            write_env_file(self.state_dir / ENV_FILE, settings)
            if self.options.announce:
                announce(self.state_dir)
            say("preparing the database")
            prepared.result()
        return settings

    def stop(self) -> None:
        """Stop every process started (workers first, Redis last).

        A second Ctrl-C or SIGTERM meanwhile is ignored: the stop it asks for is under
        way, and cutting it short would leave Redis running."""
        with _signals_ignored():
            if self.metrics is not None:
                metrics, self.metrics = self.metrics, None
                metrics.stop()
            self.supervisor.stop_all(timeout=10.0)
            self.redis.stop()
            if self.slurm is not None:  # after the gatekeeper that submits to it
                slurm, self.slurm = self.slurm, None
                slurm.stop()
            if self.lock.held:  # only the holder's files: a refused start removes none
                (self.state_dir / ENV_FILE).unlink(missing_ok=True)
                if self.options.announce:
                    withdraw(self.state_dir)
                self.lock.release()

    def __enter__(self) -> "EmbeddedStack":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- pieces --------------------------------------------------------------------

    def _start_slurm(self) -> None:
        """The Slurm cluster (optional, or required: ConfigError saying why it cannot
        run); with it, the topology that adds its RM."""
        if self.options.slurm_required:
            self.slurm = start_local_slurm(self.state_dir, self.topology_file)
            self.slurm_note = RUNNING_NOTE
        else:
            self.slurm, self.slurm_note = start_demo_slurm(self.state_dir, self.topology_file)
        if self.slurm is not None:
            self.topology_file = self.slurm.topology_file
            self.topology = load_topology(self.topology_file)

    def _settings(self) -> Settings:
        """The settings of this grid's clients (the invoking user's key)."""
        interval = self.options.heartbeat_interval
        if self.options.signing:
            user = getpass.getuser()
            self.keys = ensure_grid_keys(self.state_dir / "keys", user,
                                         now=dt.datetime.now(dt.timezone.utc))
            if self.options.gridmap_file is None:  # one user: it administers its grid
                also_trust(self.keys.user, Role.OPERATOR, user)
        return Settings(
            broker_url=self.redis.url(1), result_backend=self.redis.url(2),
            redis_url=self.redis.url(3),
            database_url=self._database_url(),
            state_dir=self.state_dir, topology_file=self.topology_file.resolve(),
            heartbeat_interval=interval, heartbeat_ttl=default_ttl(interval),
            signing=self.signing_for(Role.USER), gridmap_file=self.options.gridmap_file,
            single_user=self.options.gridmap_file is None,
        )

    def _database_url(self) -> str:
        return self.options.database_url or f"sqlite:///{self.state_dir / 'grid_tasks.db'}"

    def signing_for(self, role: Role) -> SigningSettings:
        """How a process of ``role`` signs (off when the operator turned signing off)."""
        return SigningSettings(enabled=False) if self.keys is None else self.keys.signing(role)

    def child_env(self, role: Role = Role.SCHEDULER, **extra: str) -> dict[str, str]:
        """Environment for a child process of ``role``: ours, minus stale GRID_TASKS_*,
        plus the stack's settings with that role's key (a node's without the database)."""
        assert self.settings is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
        mine = self.settings.replace(signing=self.signing_for(role))
        env.update(node_env(mine) if role is Role.NODE else mine.to_env())
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra)
        return env

    def _grid_tasks(self, *args: str) -> list[str]:
        return grid_tasks_command(*args)

    def _spawn_workers(self) -> None:
        for name, args in service_workers(self.topology, self.options.loglevel):
            self.supervisor.spawn(name, self._grid_tasks(*args), env=self.child_env())
        lvl = self.options.loglevel
        if self.options.node_harness > 0:
            self._spawn_harnesses()
            return
        for spec in self.topology.iter_nodes():  # its role's default pool: solo
            self.supervisor.spawn(f"node-{spec.rm}-{spec.name}", self._grid_tasks(
                "worker", "--rm", spec.rm, "--node", spec.name, "--no-check", "-l", lvl),
                env=self.child_env(Role.NODE))

    def _spawn_harnesses(self) -> None:
        """``node_harness`` processes, each serving an even, contiguous share of the
        nodes (in topology order) as a scale harness."""
        names = self.node_names()
        count = min(self.options.node_harness, len(names))
        for i in range(count):
            share = names[i * len(names) // count:(i + 1) * len(names) // count]
            self.supervisor.spawn(f"node-harness-{i}", self._grid_tasks(
                "worker", "--harness", "--nodes", format_identities(share),
                "--jobs", self.options.harness_jobs, "--no-check",
                "-l", self.options.loglevel), env=self.child_env(Role.NODE))

    def _spawn_beats(self) -> None:
        """Two HA beats (one leads through a Redis lease, one stands by), never a beat
        embedded in the scheduler worker beside them."""
        for name, argv in beat_commands(2, loglevel=self.options.loglevel):
            self.supervisor.spawn(name, argv, env=self.child_env())

    def _start_metrics(self) -> None:
        assert self.settings is not None
        self.metrics = start_metrics_server(self.settings, port=free_port())

    def _spawn_flower(self) -> None:
        """Flower behind basic auth; the password reaches it in its environment only."""
        port = self.flower_port = self.options.flower_port or free_port()
        password, self.flower_password_file = flower_password(self.state_dir)
        self.flower_auth = f"{FLOWER_USER}:{password}"
        self.flower_url = f"http://127.0.0.1:{port}/"
        # Flower signs as an operator: a Flower login can watch and control workers
        # but cannot send a task that any worker runs
        self.supervisor.spawn("flower", flower_argv(port, self.state_dir / "flower.db"),
                              env=self.child_env(Role.OPERATOR, **flower_env(self.flower_auth)))

    def registry(self) -> NodeRegistry:
        assert self.settings is not None
        return NodeRegistry.from_settings(self.settings)

    def node_names(self) -> list[tuple[str, str]]:
        return [(n.rm, n.name) for n in self.topology.iter_nodes()]

    def wait_nodes(self, timeout: float | None = None) -> list[NodeStatus]:
        """Wait until every node has a live heartbeat, failing early if a child dies."""
        registry = self.registry()
        deadline = time.monotonic() + (timeout or self.options.start_timeout)
        while True:
            self.supervisor.check()
            try:
                return registry.wait_alive(self.node_names(), timeout=0.25, poll=0.05)
            except GridTasksError:
                if time.monotonic() >= deadline:
                    raise

    def wait_flower(self, timeout: float | None = None) -> None:
        """Wait until Flower accepts connections, so its URL works once it is printed."""
        port = self.flower_port
        assert port is not None, "no Flower started"
        deadline = time.monotonic() + (timeout or self.options.start_timeout)
        while not _listening(port):
            self.supervisor.check()
            if time.monotonic() >= deadline:
                raise GridTasksError(f"Flower did not listen on port {port} in time; "
                                     f"see {self.state_dir / 'logs' / 'flower.log'}")
            time.sleep(0.1)

    def pids(self) -> set[int]:
        """Every process of this stack (for leak checks)."""
        pids = self.supervisor.all_pids()
        if self.redis.pid:
            pids.add(self.redis.pid)
        return pids


def service_workers(topology: GridTopology, loglevel: str) -> list[tuple[str, list[str]]]:
    """(name, ``grid-tasks`` arguments) of the grid's service workers: schedulers,
    gatekeepers and the iteration workers of the RMs marked ``scheduler = "own"``."""
    lvl = ("--no-check", "-l", loglevel)
    # Two scheduler-queue workers: iterations of different RMs (and everything else on
    # that queue) run in two processes, not behind one GIL (bench_gram (c)).
    found = [("scheduler", ["worker", "--scheduler", *lvl, "-c", "4"]),
             ("scheduler-2", ["worker", "--scheduler", *lvl, "-c", "4",
                              "--", "-n", "scheduler-2@%h"])]
    # One gatekeeper per RM, as each cluster runs its own: the subjobs of a coallocated
    # job are submitted, and their RMs' iterations run (iterate_here), in parallel
    # processes rather than behind one GIL (bench_duroc).  Threads, not CPUs: DUROC
    # subjob watchers spend their slot blocked on Redis.
    found += [(f"gatekeeper-{rm}", ["worker", "--rm", rm, *lvl, "-c", "8",
                                    "--", "-n", f"gatekeeper-{rm}@%h"]) for rm in topology.rms]
    # A deep RM's Maui in a process of its own, as a real site runs one per cluster: its
    # iterations then hold no thread, nor GIL, of the shared schedulers (issue 25).
    found += [(f"iterations-{rm}", ["worker", "--iterations", rm, *lvl])
              for rm in topology.iterations(SchedulerPlacement.OWN)]
    return found


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def grid_tasks_command(*args: str) -> list[str]:
    """argv running ``grid-tasks ARGS`` with this interpreter (no PATH lookup needed)."""
    boot = "import sys; from grid_tasks.cli import main; sys.exit(main(prog_name='grid-tasks'))"
    return [sys.executable, "-c", boot, *args]


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP ignored for the duration (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in sigs}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn the first SIGINT, SIGTERM or SIGHUP into KeyboardInterrupt for the duration,
    and ignore the ones after it until the context ends.

    The first signal starts the stop; an impatient second Ctrl-C must not interrupt it
    before :meth:`EmbeddedStack.stop` has begun (which ignores signals itself), or the
    stop is skipped and the grid's processes outlive the command."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def handler(signum: int, frame: FrameType | None) -> Any:
        for sig in sigs:  # before raising: no window for a second one
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in sigs}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

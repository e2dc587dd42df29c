"""The environment of benchmarks/scale_queue.py: a private Redis, a SQLite file or a
private PostgreSQL database, the demo topology, idle jobs inserted in bulk, and the
timed iterations (see scale_queue.py)."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import random
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
USERS = ("alice", "bob", "carol", "dave")
#: Rows per INSERT statement (bounded memory while filling 100,000).
BATCH = 5_000


class QueueBench:
    """One backend's grid, filled and iterated in this process."""

    def __init__(self, tmp: Path, backend: str) -> None:
        self.tmp, self.backend = tmp, backend
        self.pg_name = f"bench_queue_{__import__('os').getpid()}" if backend == "postgresql" else None
        self.rng = random.Random(7)

    # -- set-up and tear-down -----------------------------------------------------------
    def __enter__(self) -> "QueueBench":
        logging.disable(logging.WARNING)
        from grid_tasks.embedded.redis_server import RedisServer
        self.server = RedisServer(self.tmp / "redis")
        self.server.start()
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        import redis

        from grid_tasks import db
        from grid_tasks.celery_app import create_app
        from grid_tasks.embedded.stack import prepare_database
        from grid_tasks.node.registry import NodeRegistry
        from grid_tasks.security.keys import init_keys
        from grid_tasks.settings import Settings
        from grid_tasks.topology import load_topology

        env = {"GRID_TASKS_REDIS_URL": self.server.url(3), "GRID_TASKS_BROKER_URL": self.server.url(1),
               "GRID_TASKS_RESULT_BACKEND": self.server.url(2), "GRID_TASKS_STATE_DIR": str(self.tmp),
               "GRID_TASKS_TOPOLOGY": str(ROOT / "config" / "demo-grid.toml")}
        if self.pg_name:
            self._create_pg()
            env["GRID_TASKS_DATABASE_URL"] = f"postgresql+psycopg://postgres@127.0.0.1:5432/{self.pg_name}"
        self.env = env  # what the own-process scheduler (DeepProcess) starts from
        self.settings = Settings.from_env(env)
        topology = load_topology(self.settings.topology_file)
        prepare_database(self.settings, topology)
        init_keys(self.tmp / "keys", "bench", now=datetime.now(timezone.utc))
        self.app = create_app(self.settings)
        self.redis = redis.Redis.from_url(self.settings.redis_url)
        self.registry = NodeRegistry(self.redis, 3600)
        for node in topology.iter_nodes():  # every node alive (no daemon runs here)
            self.registry.register(node.rm, node.name, {}, {}, "bench", time.time())
        self.sessions = db.session_factory(db.get_engine(self.settings.database_url))
        self._as_a_worker()

    @staticmethod
    def _as_a_worker() -> None:
        """What a worker does as it starts that weighs on the figures (a tree without
        it, e.g. an older peer, runs as it did)."""
        try:
            from grid_tasks.malloc import return_big_blocks
        except ImportError:
            return
        return_big_blocks()

    def __exit__(self, *exc: Any) -> None:
        from grid_tasks import db
        if getattr(self, "settings", None) is not None:
            db.dispose_engines(self.settings.database_url)
        if getattr(self, "app", None) is not None:
            self.app.close()
        self.server.stop()
        if self.pg_name:
            self._drop_pg()

    def _create_pg(self) -> None:
        import psycopg
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.pg_name}")

    def _drop_pg(self) -> None:
        import psycopg
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:  # only the one made here
            conn.execute(f"DROP DATABASE IF EXISTS {self.pg_name} WITH (FORCE)")

    # -- the deep queue -----------------------------------------------------------------
    def fill(self, depth: int) -> None:
        """rmA: one running job on 6 of its 8 processors (leases alive), ``depth`` idle
        jobs of 3-8 tasks (none fits the 2 free processors)."""
        from sqlalchemy import insert

        from grid_tasks import db
        from grid_tasks.db.models import Job as JobRow
        from grid_tasks.gram import keys
        from grid_tasks.states import JobState, MauiJobState

        now = datetime.now(timezone.utc)
        running = dict(self._row(now, 6), state=JobState.ACTIVE, maui_state=MauiJobState.RUNNING,
                       user_name="zed", walltime=86_400, start_time=now - timedelta(minutes=5),
                       nodes_allocated={"node1": 4, "node2": 2}, launch_token="bench")
        with db.session_scope(self.sessions) as s:
            running_id = s.execute(insert(JobRow.__table__).returning(JobRow.id), [running]).scalar()
        for node in ("node1", "node2"):
            self.redis.set(keys.lease_key(running_id, node), 1, ex=86_400)
        for start in range(0, depth, BATCH):
            rows = [self._row(now, self.rng.randint(3, 8)) for _ in range(min(BATCH, depth - start))]
            with db.session_scope(self.sessions) as s:
                s.execute(insert(JobRow.__table__), rows)
        del rows
        if self.pg_name:  # the statistics autovacuum keeps (a table just filled has none:
            # the planner then took a bitmap scan of all 100,000 idle rows for the jobs
            # holding nodes, 40 ms a read, three reads an iteration)
            from sqlalchemy import text
            with db.session_scope(self.sessions) as s:
                s.execute(text("ANALYZE jobs"))
        gc.collect()

    def _row(self, now: datetime, tasks: int) -> dict[str, Any]:
        from grid_tasks.states import JobState, MauiJobState
        return dict(rm="rmA", state=JobState.PENDING, maui_state=MauiJobState.IDLE,
                    user_name=self.rng.choice(USERS), tasks=tasks, procs=tasks,
                    walltime=self.rng.choice([600, 1800, 3600, 7200]), start_time=None,
                    submit_time=now - timedelta(seconds=self.rng.randint(0, 3600)),
                    request={"executable": "/bin/true"}, version=1, priority=0, holds=[],
                    dependencies=[], early_start=True, nodes_allocated={}, launch_token=None)

    def change(self) -> None:
        """What changes between two iterations of a busy RM: a few jobs submitted, one
        cancelled (its row leaves the idle queue, its version bumped)."""
        from sqlalchemy import insert, select, update

        from grid_tasks import db
        from grid_tasks.db.models import Job as JobRow
        from grid_tasks.states import JobState

        now = datetime.now(timezone.utc)
        with db.session_scope(self.sessions) as s:
            s.execute(insert(JobRow.__table__), [self._row(now, 4) for _ in range(5)])
            victim = s.execute(select(JobRow.id).where(JobRow.rm == "rmA",
                                                       JobRow.state == JobState.PENDING)
                               .order_by(JobRow.id.desc()).limit(1)).scalar()
            s.execute(update(JobRow.__table__).where(JobRow.id == victim).values(
                state=JobState.FAILED, version=JobRow.version + 1))

    def iterate_deep(self) -> dict[str, float]:
        """One live iteration of rmA: CPU seconds of this thread and wall seconds."""
        from grid_tasks.scheduling.iteration import run_iteration
        t0, c0 = time.perf_counter(), time.thread_time()
        report = run_iteration(self.app, "rmA", sessions=self.sessions, redis=self.redis,
                               registry=self.registry)
        figures = {"cpu": time.thread_time() - c0, "wall": time.perf_counter() - t0}
        if report.started:
            raise SystemExit(f"the deep RM started {report.started}: the set-up is wrong")
        return figures

    def restart(self) -> dict[str, float]:
        """What a new scheduler process does before its first task (the warm start of
        grid_tasks.scheduling.warm_start: rmA's queue loaded, the core run once in
        memory), after forgetting what this process kept: CPU and wall seconds (a tree
        without a warm start, e.g. an older peer, only forgets)."""
        from grid_tasks.scheduling import idle_queue
        idle_queue.forget("rmA")
        gc.collect()
        try:
            from grid_tasks.scheduling.warm_start import warm_queues
        except ImportError:
            return {"cpu": 0.0, "wall": 0.0}
        from grid_tasks.services import Services
        services = Services(self.settings)
        t0, c0 = time.perf_counter(), time.thread_time()
        warm_queues(services, ["rmA"])
        return {"cpu": time.thread_time() - c0, "wall": time.perf_counter() - t0}

    @staticmethod
    def rss() -> int:
        """Resident set size of this process now (bytes), after a collection."""
        gc.collect()
        import os
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    # -- the other RM's throughput ------------------------------------------------------
    #: rmB alone; rmA iterating in another thread of this process (a shared scheduler
    #: worker); the same, rmA resting as the shared workers' spacing policy has it while
    #: rmB waits; rmA iterating in a process of its own (``scheduler = "own"``).
    PHASES = ("alone", "with_deep", "spaced", "own_process")

    def throughput(self, seconds: float) -> dict[str, float]:
        """rmB jobs/s alone, with rmA iterating back to back in another thread of this
        process, and with rmA iterating back to back in another process (alternating
        halves, so drift weighs on all three); ``deep_per_s``: rmA's iterations a
        second in each phase."""
        done = {k: [0, 0.0] for k in self.PHASES}
        deep_runs = {k: 0 for k in self.PHASES}
        with DeepProcess(self.env) as other:
            for phase in self.PHASES * 2:
                stop = threading.Event()
                counted = [0]
                deep = threading.Thread(target=self._deep_loop, daemon=True,
                                        args=(stop, counted, phase == "spaced"))
                if phase in ("with_deep", "spaced"):
                    deep.start()
                elif phase == "own_process":
                    other.resume()
                began = time.perf_counter()
                done[phase][0] += self._other_rm(began + seconds / 2)
                done[phase][1] += time.perf_counter() - began
                stop.set()
                if deep.is_alive():
                    deep.join()
                deep_runs[phase] += counted[0] + (other.pause() if phase == "own_process" else 0)
        rates = {k: n / max(t, 1e-9) for k, (n, t) in done.items()}
        rates["deep_per_s"] = {k: deep_runs[k] / max(done[k][1], 1e-9) for k in self.PHASES}
        return rates

    def _deep_loop(self, stop: threading.Event, counted: list[int], spaced: bool) -> None:
        """rmA back to back; ``spaced``: resting after each iteration as long as
        :class:`~grid_tasks.scheduling.spacing.CostlySpacing` says while others wait."""
        from grid_tasks.scheduling.spacing import CostlySpacing, LastIteration
        policy = CostlySpacing()
        while not stop.is_set():
            wall = self.iterate_deep()["wall"]
            counted[0] += 1
            if spaced:
                now = time.time()
                stop.wait(policy.rest(LastIteration(wall, now), others_waiting=True, now=now))

    def _other_rm(self, until: float) -> int:
        """Submit a job on rmB, run rmB's iteration to start it, mark it done; how many."""
        from grid_tasks import db
        from grid_tasks.gram.records import Outbox
        from grid_tasks.gram.submission import insert_job
        from grid_tasks.rsl import lower
        from grid_tasks.scheduling.iteration import run_iteration
        from grid_tasks.states import JobState, MauiJobState

        rsl = "&(executable=/bin/true)(count=1)"
        request, count = lower(rsl)[0], 0
        while time.perf_counter() < until:
            with db.session_scope(self.sessions) as s:  # what rmB's gatekeeper records
                job_id = insert_job(s, "rmB", rsl, request, {"user": "other"},
                                    datetime.now(timezone.utc), Outbox())[0]
            report = run_iteration(self.app, "rmB", sessions=self.sessions, redis=self.redis,
                                   registry=self.registry)
            if report.started != [job_id]:
                raise SystemExit(f"rmB started {report.started}, not job {job_id}")
            with db.session_scope(self.sessions) as session:
                row = db.repository.get_job(session, job_id)
                row.state, row.maui_state = JobState.DONE, MauiJobState.COMPLETED
                row.end_time = datetime.now(timezone.utc)
            count += 1
        return count


class DeepProcess:
    """rmA's iterations back to back in a process of their own, as an own-process
    scheduler (``grid-tasks worker --iterations rmA``) runs them: its caches warm after
    its first iteration, it iterates only between :meth:`resume` and :meth:`pause`."""

    def __init__(self, env: dict[str, str]) -> None:
        ctx = multiprocessing.get_context("spawn")  # no inherited connections
        self.go, self.ready, self.stop = ctx.Event(), ctx.Event(), ctx.Event()
        self.runs = ctx.Value("i", 0)
        self.process = ctx.Process(target=_deep_process, daemon=True, args=(
            env, self.go, self.ready, self.stop, self.runs))

    def __enter__(self) -> "DeepProcess":
        self.process.start()
        if not self.ready.wait(600):
            raise SystemExit("the own-process scheduler never finished its first iteration")
        return self

    def resume(self) -> None:
        self.go.set()

    def pause(self) -> int:
        """Stop iterating (after the running iteration); how many ran since the last."""
        self.go.clear()
        with self.runs.get_lock():
            runs, self.runs.value = self.runs.value, 0
        return runs

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.go.set()
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _deep_process(env: dict[str, str], go: Any, ready: Any, stop: Any, runs: Any) -> None:
    """The own-process scheduler's loop (a spawned child: its own app, Redis, engine)."""
    import redis

    from grid_tasks import db
    from grid_tasks.celery_app import create_app
    from grid_tasks.node.registry import NodeRegistry
    from grid_tasks.scheduling.iteration import run_iteration
    from grid_tasks.settings import Settings

    logging.disable(logging.WARNING)
    settings = Settings.from_env(env)
    app = create_app(settings)
    client = redis.Redis.from_url(settings.redis_url)
    registry = NodeRegistry(client, 3600)
    sessions = db.session_factory(db.get_engine(settings.database_url))
    try:
        run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry)
        ready.set()  # warm from here on, as a long-running worker is
        while not stop.is_set():
            go.wait()
            if stop.is_set():
                break
            run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry)
            with runs.get_lock():
                runs.value += 1
    finally:
        db.dispose_engines(settings.database_url)
        app.close()

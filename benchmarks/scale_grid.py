"""bench_scale, grid part: the shared services of a grid of 100, 300 and 1,000 nodes.

Each point is a whole embedded grid (``EmbeddedStack``) over 10 RMs whose nodes are
served by scale-harness processes (``--node-harness K``, stand-in jobs: the grid's
own costs, no process forked per job), on SQLite or on a private PostgreSQL database
(``bench_scale_<pid>`` on 127.0.0.1:5432, created and dropped here).  Per point:

* start: ``start()`` until every node has heartbeated (and the database part of it);
* Redis connections (``connected_clients``) once idle;
* idle CPU of the shared services (Redis, scheduler workers, gatekeepers, beats) and
  of the harnesses, over a window with no job;
* N-job throughput (``/bin/true``, 4 client processes, spread over the 10 RMs) and
  submit→ACTIVE p50/p95 from the jobs' recorded history.

Printed as a table and as ratios to the 100-node point of the same database (the peer
measured in the same run).  Target: at 1,000 nodes, throughput >= 80% of 100 nodes.

    python benchmarks/bench_scale.py --part grid [--quick] --grid "--nodes 100,1000 --db sqlite"

Duration: a point is start (15-35 s) + settling (20-45 s) + the idle window + the
jobs at the grid's throughput, which on this 2-core machine under other work was
10-16 jobs/s at 100 and at 1,000 nodes (2026-11-28): ~2.5 min per point at 1,000 jobs,
~12-17 min at 10,000, so the full six points at 10,000 jobs take 1-1.5 h there.
``--jobs 2500`` keeps the six points near 25 min.

Progress lines (phases, jobs ended every 15 s, minutes so far) go to stderr; a point
that fails (a child died, its load timed out: :func:`load_timeout`) is reported and
the next point still runs; every grid is stopped before the next starts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import psutil  # noqa: E402
import redis  # noqa: E402

from cpu_window import CpuMeter  # noqa: E402
from scale_grid_watch import _clients, _reporting, _say, _settled  # noqa: E402
from grid_tasks.embedded.stack import EmbeddedStack, StackOptions  # noqa: E402
from grid_tasks.errors import GridTasksError  # noqa: E402
from grid_tasks.faults.load import run_load  # noqa: E402
from grid_tasks.settings import Settings  # noqa: E402

RMS = 10
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
SHARED = ("redis", "scheduler workers", "gatekeepers", "beats")
TARGET_RATIO = 0.8


@dataclass
class Point:
    """The figures of one grid."""

    nodes: int
    db: str
    start_s: float = 0.0
    settle_s: float = 0.0          # after start: until every worker has connected
    db_prep_s: float = 0.0
    redis_clients: int = 0
    idle_shared_pct: float = 0.0   # % of one core
    idle_harness_pct: float = 0.0
    harness_rss_mb: float = 0.0
    jobs: int = 0
    throughput: float = 0.0        # jobs/s, first submission to all terminal
    p50_s: float = 0.0
    p95_s: float = 0.0
    #: CPU per job of the shared services and of the harnesses over the load window
    #: (CPU time, not wall: less sensitive than jobs/s to what else the machine runs)
    shared_ms_job: float = 0.0
    harness_ms_job: float = 0.0
    #: shared_ms_job less the idle rate over the load's duration: what the jobs
    #: themselves cost (a slower load otherwise looks dearer per job by its idle time)
    net_ms_job: float = 0.0
    ok: bool = False
    notes: list[str] = field(default_factory=list)


def write_topology(folder: Path, nodes: int, procs: int = 4) -> Path:
    """10 RMs sharing ``nodes`` nodes, each RM's as one range table."""
    per = nodes // RMS
    policy = REPO / "config" / "demo.cfg"
    text = "".join(f'[rm.r{r:02d}]\npolicy_file = "{policy}"\n'
                   f'[rm.r{r:02d}.node."r{r:02d}n[0001-{per:04d}]"]\nprocs = {procs}\n'
                   f"memory_mb = 4096\n\n" for r in range(RMS))
    path = folder / f"grid-{nodes}.toml"
    path.write_text(text)
    return path


@contextmanager
def postgres_database(prefix: str = "bench_scale") -> Iterator[str]:
    """A private database ``<prefix>_<pid>`` on the local server; dropped after."""
    import psycopg

    name = f"{prefix}_{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        from grid_tasks.db import dispose_engines

        dispose_engines()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _started(stack: EmbeddedStack, label: str) -> tuple[float, float]:
    """Start ``stack``; (seconds to all registered, seconds preparing the database)."""
    marks: dict[str, float] = {}
    began = time.monotonic()

    def progress(msg: str) -> None:
        marks.setdefault(msg, time.monotonic())
        _say(f"{label}: {msg}")

    stack.start(progress=progress)
    total = time.monotonic() - began
    prep = marks.get("starting beats", began) - marks.get("preparing the database", began)
    return total, prep


def _idle(stack: EmbeddedStack, window: float, point: Point) -> tuple[float, float]:
    """% of one core used by the shared services and by the harnesses, idle (and each
    shared kind's share in ``point``'s notes)."""
    meter = CpuMeter(stack)
    before = meter.sample()
    time.sleep(window)
    after = meter.sample()
    spent = {k: after[k] - before.get(k, 0.0) for k in after}
    shared = sum(spent.get(k, 0.0) for k in SHARED)
    point.notes.append("idle % of a core: " + ", ".join(
        f"{k} {100 * spent.get(k, 0.0) / window:.1f}" for k in SHARED))
    return 100 * shared / window, 100 * spent.get("node daemons", 0.0) / window


def _latencies(settings: Settings) -> list[float]:
    """submit→ACTIVE of every job that went ACTIVE (seconds, from SQL history)."""
    from sqlalchemy import select

    from grid_tasks import db
    from grid_tasks.db.models.jobs import Job, JobStateHistory
    from grid_tasks.states import JobState

    sessions = db.session_factory(db.get_engine(settings.database_url))
    with db.session_scope(sessions) as session:
        rows = session.execute(select(Job.submit_time, JobStateHistory.at).join(
            JobStateHistory, JobStateHistory.job_id == Job.id).where(
            JobStateHistory.to_state == JobState.ACTIVE)).all()
    return sorted((at - sub).total_seconds() for sub, at in rows if sub and at)


def _harness_rss(stack: EmbeddedStack) -> float:
    total = 0
    for child in stack.supervisor.children:
        if child.name.startswith("node-harness"):
            try:
                total += psutil.Process(child.pid).memory_info().rss
            except psutil.Error:
                pass
    return total / 2**20


def measure(nodes: int, db: str, *, jobs: int, harness: int, idle_s: float,
            database_url: str | None, work: Path) -> Point:
    """One point: start a grid of ``nodes`` nodes, measure, stop it."""
    point = Point(nodes, db, jobs=jobs)
    options = StackOptions(topology_file=write_topology(work, nodes),
                           state_dir=work / f"state-{db}-{nodes}", loglevel="WARNING",
                           start_timeout=900.0, announce=False, node_harness=harness,
                           harness_jobs="standin", database_url=database_url)
    # up --database-url's way: the stack prepares that database (a subclass that only
    # swapped the settings had the children run on an unmigrated PostgreSQL)
    stack = EmbeddedStack(options)
    label = f"{nodes} nodes, {db}"
    try:
        point.start_s, point.db_prep_s = _started(stack, label)
        client = redis.Redis.from_url(stack.redis.url(0))
        broker = redis.Redis.from_url(stack.redis.url(1))
        try:
            _say(f"{label}: waiting for the workers, then {idle_s:g} s idle")
            point.settle_s = _settled(client, broker, workers=2 + RMS, backlog=RMS)
            point.idle_shared_pct, point.idle_harness_pct = _idle(stack, idle_s, point)
            point.redis_clients = _clients(client)
        finally:
            client.close()
            broker.close()
        point.harness_rss_mb = _harness_rss(stack)
        clients, meter = 4, CpuMeter(stack)
        before = meter.sample()
        _say(f"{label}: {jobs} jobs from {clients} clients")
        with _reporting(stack.settings, label, jobs, period=15.0):
            result = run_load(stack.settings, clients, jobs // clients,
                              rms=[f"r{r:02d}" for r in range(RMS)],
                              timeout=load_timeout(jobs))
        after = meter.sample()
        spent = {k: after[k] - before.get(k, 0.0) for k in after}
        point.shared_ms_job = 1e3 * sum(spent.get(k, 0.0) for k in SHARED) / jobs
        point.harness_ms_job = 1e3 * spent.get("node daemons", 0.0) / jobs
        point.notes.append("CPU ms per job: " + ", ".join(
            f"{k} {1e3 * spent.get(k, 0.0) / jobs:.1f}" for k in SHARED))
        point.throughput, point.ok = result.throughput, result.ok
        idle_cpu_s = point.idle_shared_pct / 100 * result.complete_s
        point.net_ms_job = point.shared_ms_job - 1e3 * idle_cpu_s / jobs
        point.notes[-1] += f"; shared net of idle {point.net_ms_job:.1f}"
        lat = _latencies(stack.settings)
        if lat:
            point.p50_s = statistics.median(lat)
            point.p95_s = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
        if not result.ok:
            point.notes.append(f"unaccounted: {result.to_dict()}")
    except GridTasksError as exc:  # this point failed: the next ones still run
        point.ok = False
        point.notes.append(f"failed: {exc}")
        _say(f"{label}: FAILED: {exc}")
    finally:
        _say(f"{label}: stopping the grid")
        stack.stop()
    return point


def load_timeout(jobs: int) -> float:
    """Seconds the load of ``jobs`` jobs may take before the point counts as failed
    (2 jobs/s at worst, and never under 10 minutes): a stuck grid ends the point, not
    the run."""
    return max(600.0, jobs / 2.0)


HEADER = (f"{'nodes':>6} {'db':<9} {'start s':>8} {'settle':>7} {'db prep':>8} {'redis cl':>9} "
          f"{'idle shared':>12} {'idle harn.':>11} {'harn. MB':>9} {'jobs':>6} "
          f"{'jobs/s':>7} {'p50 s':>6} {'p95 s':>6} {'shared ms/job':>14} "
          f"{'harn. ms/job':>13}")


def row(p: Point) -> str:
    return (f"{p.nodes:>6} {p.db:<9} {p.start_s:>8.1f} {p.settle_s:>7.1f} {p.db_prep_s:>8.1f} "
            f"{p.redis_clients:>9} {p.idle_shared_pct:>11.1f}% {p.idle_harness_pct:>10.1f}% "
            f"{p.harness_rss_mb:>9.0f} {p.jobs:>6} {p.throughput:>7.1f} {p.p50_s:>6.2f} "
            f"{p.p95_s:>6.2f} {p.shared_ms_job:>14.1f} {p.harness_ms_job:>13.1f}"
            f"{'' if p.ok else '  NOT ALL ACCOUNTED'}")


def _median(points: list[Point]) -> Point:
    """A point whose every figure is the median over ``points`` (rounds of one size)."""
    out = Point(points[0].nodes, points[0].db, ok=all(p.ok for p in points))
    for name in ("start_s", "redis_clients", "idle_shared_pct", "throughput", "p50_s",
                 "p95_s", "shared_ms_job", "net_ms_job"):
        setattr(out, name, statistics.median(getattr(p, name) for p in points))
    return out


def ratios(points: list[Point]) -> list[str]:
    """Each size's figures (median over rounds) as ratios to the smallest grid of the
    same database."""
    out = []
    for db in dict.fromkeys(p.db for p in points):
        sizes = sorted({p.nodes for p in points if p.db == db})
        failed = [n for n in sizes if not any(p.ok for p in points
                                              if p.db == db and p.nodes == n)]
        out += [f"{db} {n} nodes: no point measured (failed, see above)" for n in failed]
        mine = [_median([p for p in points if p.db == db and p.nodes == n and p.ok])
                for n in sizes if n not in failed]
        if not mine:
            continue
        base = mine[0]
        for p in mine[1:]:
            def r(a: float, b: float) -> str:
                return f"{a / b:.2f}x" if b else "n/a"
            verdict = "meets" if base.throughput and \
                p.throughput / base.throughput >= TARGET_RATIO else "MISSES"
            out.append(f"{db} {p.nodes} vs {base.nodes} nodes: start "
                       f"{r(p.start_s, base.start_s)}, redis clients "
                       f"{r(p.redis_clients, base.redis_clients)}, idle shared CPU "
                       f"{r(p.idle_shared_pct, base.idle_shared_pct)}, throughput "
                       f"{r(p.throughput, base.throughput)} ({verdict} the >= "
                       f"{TARGET_RATIO:.0%} target), p50 {r(p.p50_s, base.p50_s)}, "
                       f"p95 {r(p.p95_s, base.p95_s)}, shared CPU per job "
                       f"{r(p.shared_ms_job, base.shared_ms_job)} (net of idle "
                       f"{r(p.net_ms_job, base.net_ms_job)})")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", default="100,300,1000",
                        help="grid sizes, comma-separated (10 RMs share them)")
    parser.add_argument("--db", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per point")
    parser.add_argument("--quick", action="store_true",
                        help="1,000 jobs per point and a 5 s idle window")
    parser.add_argument("--harness", type=int, default=2,
                        help="harness processes serving the nodes (same for every point)")
    parser.add_argument("--idle", type=float, default=15.0, help="idle window, seconds")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure the sizes in turn this many times (ratios of medians: "
                             "on a shared machine the load moves between points)")


def run(args: argparse.Namespace) -> list[Point]:
    """Every point of ``args``; prints as it goes, then the ratios."""
    sizes = [int(n) for n in args.nodes.split(",")]
    jobs = 1000 if args.quick else args.jobs
    idle = 5.0 if args.quick else args.idle
    print(f"bench_scale grid: {sizes} nodes over {RMS} RMs, {args.harness} harness "
          f"processes (stand-in jobs), {jobs} jobs per point; machine: "
          f"{psutil.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
          "(shared with other work: compare ratios, not absolutes)", flush=True)
    print(HEADER, flush=True)
    points: list[Point] = []
    plan = [(db, n) for db in args.db.split(",") for _ in range(args.rounds) for n in sizes]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for db in dict.fromkeys(db for db, _ in plan):
            with _database(db) as url:
                for n in [n for d, n in plan if d == db]:
                    p = measure(n, db, jobs=jobs, harness=args.harness, idle_s=idle,
                                database_url=url, work=Path(tmp))
                    points.append(p)
                    print(row(p) + f"   (load avg {os.getloadavg()[0]:.1f})", flush=True)
                    for note in p.notes:
                        print(f"      {note}", flush=True)
                    spent = (time.monotonic() - began) / 60
                    _say(f"point {len(points)} of {len(plan)} done after {spent:.1f} min; "
                         f"about {spent / len(points) * (len(plan) - len(points)):.0f} "
                         "min to go (larger grids take longer)")
                    if url is not None:
                        _empty_postgres(url)
    for line in ratios(points):
        print(line)
    return points


@contextmanager
def _database(db: str) -> Iterator[str | None]:
    if db == "sqlite":
        yield None  # the stack's own SQLite file
    elif db == "postgres":
        with postgres_database() as url:
            yield url
    else:
        raise SystemExit(f"--db: unknown database {db!r} (sqlite, postgres)")


def _empty_postgres(url: str) -> None:
    """Drop every table between points: the next grid starts on an empty database."""
    from sqlalchemy import text

    from grid_tasks.db import dispose_engines, get_engine

    with get_engine(url).begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    dispose_engines()


def main(argv: list[str] | None = None) -> list[Point]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    main()

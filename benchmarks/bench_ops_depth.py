"""Operator commands at depth (issue 25): ``showq``, ``showq --json``, ``showq --all`` and
``showstart JOB`` (cold: no kept plan; warm: right after) with 10,000 / 50,000 / 100,000
idle jobs in one RM, timed as a user runs them: the ``grid-tasks`` CLI in a new process.

Each backend gets a private database (a SQLite file in a temporary folder; PostgreSQL
database ``bench_ops_<pid>`` on 127.0.0.1:5432, created and dropped here) and a private
redis-server (the plan digest's store and the nodes' heartbeats: 16 nodes of 8
processors registered alive).  Jobs are bulk-inserted.  The peer is the code path before
issue 25 (the same CLI from ``--peer-tree``, a checkout of it, e.g. ``git worktree add
/tmp/peer bf1a628``; without it no peer runs) at the sizes in ``--peer-sizes`` (default
10,000 only: its showq takes minutes deeper),
measured in the same run on the same database; ratios new / peer are printed, and each
figure's growth relative to the smallest size.  Wall times are printed with the CPU
time of the command (user + system: less disturbed by a busy machine).  "warm" runs
right after "cold" and must reuse its kept plan (GRID_TASKS_OPS_PLAN_MAX_AGE is raised
to MAX_AGE so a slow machine does not age it out; a miss stops the run).

First, start-up alone: ``grid-tasks --help``, ``showq --help`` and ``showstart --help``
(no database), best of ``--startup-repeat`` runs, this tree against the peer.  Each
tree is byte-compiled first (:func:`compiled`), so every command runs from bytecode as
an installed CLI does: with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``,
each run compiled every module it imports again (~0.3 s a command here).

    .venv/bin/python benchmarks/bench_ops_depth.py [--sizes 10000,50000,100000]
        [--backends sqlite,postgresql] [--peer-tree DIR --peer-sizes 10000] [--repeat 1]
        [--startup-repeat 3]

:func:`measure_depth` returns the figures for ``benchmarks/bench_scale.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from sqlalchemy import create_engine, func, insert, select, text  # noqa: E402

from grid_tasks.db import Job, dispose_engines, get_engine, migrate, session_factory  # noqa: E402
from grid_tasks.db import sync_topology  # noqa: E402
from grid_tasks.embedded.redis_server import RedisServer  # noqa: E402
from grid_tasks.node.registry import NodeRegistry  # noqa: E402
from grid_tasks.ops.plan_digest import MAGIC, PlanDigest  # noqa: E402
from grid_tasks.states import JobState, MauiJobState  # noqa: E402
from grid_tasks.topology import load_topology  # noqa: E402

RM, NODES, PROCS = "big", 16, 8
PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
CLI = [sys.executable, "-c", "import sys; from grid_tasks.cli import main; "
       "sys.exit(main(prog_name='grid-tasks'))"]
PLAN_KEYS = "grid_tasks:ops:plan:*"
#: The kept plan's freshness bound in these runs: long enough that a warm run on a
#: busy machine still finds the cold run's plan (checked: a miss is an error).
MAX_AGE = 900


def topology_text() -> str:
    return f"[rm.{RM}]\n" + "".join(f"[rm.{RM}.node.n{i:03d}]\nprocs = {PROCS}\n"
                                     for i in range(NODES))


def insert_jobs(url: str, first: int, count: int, rng: random.Random) -> None:
    """``count`` idle jobs of 1-8 processors, submitted over the last day, in bulk."""
    now = datetime.now(timezone.utc)
    engine = get_engine(url)
    rows = []
    for i in range(first, first + count):
        procs = rng.choice((1, 2, 4, 8))
        rows.append({"rm": RM, "user_name": f"u{i % 13}", "state": JobState.PENDING,
                     "maui_state": MauiJobState.IDLE, "tasks": procs, "procs": procs,
                     "walltime": rng.randint(60, 7200), "version": 1, "request": {},
                     "holds": [], "dependencies": [], "nodes_allocated": {},
                     "submit_time": now - timedelta(seconds=rng.randint(0, 86400))})
    with engine.begin() as conn:
        for start in range(0, len(rows), 5000):
            conn.execute(insert(Job.__table__), rows[start:start + 5000])


@contextmanager
def database(backend: str, folder: Path) -> Iterator[str]:
    """A private database: a SQLite file in ``folder`` or PostgreSQL ``bench_ops_<pid>``."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'grid_tasks.sqlite3'}"
        return
    name = f"bench_ops_{os.getpid()}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        dispose_engines(url)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def head_revision(tree: Path) -> str:
    """The newest schema revision of a checkout: the one no other names as its parent."""
    found: dict[str, str | None] = {}
    for path in (tree / "grid_tasks" / "db" / "alembic" / "versions").glob("*.py"):
        src = path.read_text()
        rev = re.search(r"^revision[^=]*=\s*['\"]([^'\"]+)", src, re.M)
        down = re.search(r"^down_revision[^=]*=\s*['\"]([^'\"]+)", src, re.M)
        if rev:
            found[rev.group(1)] = down.group(1) if down else None
    parents = set(found.values())
    (head,) = [rev for rev in found if rev not in parents]
    return head


@contextmanager
def peer_schema(url: str, tree: Path) -> Iterator[None]:
    """While the peer runs, the version row names the peer's own head: the older CLI
    migrates on every command and refuses a revision it does not know.  The newer
    tables and triggers stay (the older code never reads them); restored after."""
    engine = get_engine(url)
    with engine.begin() as conn:
        ours = conn.scalar(text("SELECT version_num FROM alembic_version"))
        conn.execute(text("UPDATE alembic_version SET version_num = :v"),
                     {"v": head_revision(tree)})
    try:
        yield
    finally:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": ours})


def run_cli(tree: Path, env: dict[str, str], *args: str) -> tuple[float, float]:
    """Wall and CPU seconds of one ``grid-tasks`` command run from ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(CLI + list(args), env={**env, "PYTHONPATH": str(tree)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False, cwd=tree)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"grid-tasks {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def compiled(tree: Path) -> None:
    """Byte-compile ``tree``'s package (py_compile writes whatever
    PYTHONDONTWRITEBYTECODE says), so its commands do not compile it per run."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "grid_tasks")],
                   check=True, stdout=subprocess.DEVNULL)


def forget_plans(client: redis.Redis) -> None:
    for key in client.scan_iter(PLAN_KEYS):
        client.delete(key)


def plan_made(client: redis.Redis) -> list[float]:
    """When the kept plans were made (a warm run that reused one leaves it unchanged);
    packed digests (this tree) or JSON ones (a peer from before they were packed)."""
    raws = [client.get(k) for k in client.scan_iter(PLAN_KEYS)]
    return sorted(PlanDigest.from_bytes(r).made if r.startswith(MAGIC) else json.loads(r)["made"]
                  for r in raws if r is not None)


def commands(tree: Path, env: dict[str, str], client: redis.Redis, job: int,
             peer: bool) -> dict[str, tuple[float, float]]:
    """The timed commands; the peer (old code) has no --all and keeps no plan."""
    out: dict[str, tuple[float, float]] = {}
    forget_plans(client)
    out["showstart (cold)"] = run_cli(tree, env, "showstart", str(job))
    made = plan_made(client)
    out["showstart (warm)"] = run_cli(tree, env, "showstart", str(job))
    if not peer and (not made or plan_made(client) != made):
        raise RuntimeError("the warm showstart did not reuse the kept plan")
    out["showq"] = run_cli(tree, env, "showq", "-r", RM)
    out["showq --json"] = run_cli(tree, env, "showq", "-r", RM, "--json")
    if not peer:
        out["showq --all"] = run_cli(tree, env, "showq", "-r", RM, "--all")
        forget_plans(client)
        out["showq (cold)"] = run_cli(tree, env, "showq", "-r", RM)
    return out


def _env(url: str, redis_url: str, topology: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(GRID_TASKS_DATABASE_URL=url, GRID_TASKS_REDIS_URL=redis_url,
               GRID_TASKS_BROKER_URL=redis_url, GRID_TASKS_TOPOLOGY=str(topology),
               GRID_TASKS_HEARTBEAT_TTL="3600", GRID_TASKS_OPS_PLAN_MAX_AGE=str(MAX_AGE))
    return env


def measure_depth(sizes: list[int], backends: list[str], peer_sizes: list[int],
                  peer_tree: Path | None = None, repeat: int = 1,
                  log: Any = print) -> list[dict[str, Any]]:
    """One row per (backend, size, command, code): wall and CPU seconds (best of
    ``repeat``).  ``code`` is ``new`` (this tree) or ``peer`` (``peer_tree``)."""
    rows: list[dict[str, Any]] = []
    rng = random.Random(25)
    for backend in backends:
        folder = Path(tempfile.mkdtemp(prefix="bench_ops_depth_"))
        server = RedisServer(folder / "redis").start()
        try:
            with database(backend, folder) as url:
                rows += _one_backend(backend, url, server, folder, sizes, peer_sizes,
                                     peer_tree, repeat, rng, log)
        finally:
            server.stop()
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def _one_backend(backend: str, url: str, server: RedisServer, folder: Path, sizes: list[int],
                 peer_sizes: list[int], peer_tree: Path | None, repeat: int, rng: random.Random,
                 log: Any) -> list[dict[str, Any]]:
    topology = folder / "grid.toml"
    topology.write_text(topology_text())
    migrate(url)
    with session_factory(get_engine(url))() as s:
        sync_topology(s, load_topology(topology))
        s.commit()
    client = redis.Redis.from_url(server.url(3))
    registry = NodeRegistry(client, ttl=3600)
    for i in range(NODES):
        registry.register(RM, f"n{i:03d}", {"procs": PROCS}, {}, "bench", time.time())
    env = _env(url, server.url(3), topology)
    rows: list[dict[str, Any]] = []
    have = 0
    for size in sorted(sizes):
        t0 = time.perf_counter()
        insert_jobs(url, have, size - have, rng)
        have = size
        with session_factory(get_engine(url))() as s:
            job = s.scalar(select(func.min(Job.id)).where(Job.rm == RM)) + size // 2
        log(f"[{backend}] {size} idle jobs inserted in {time.perf_counter() - t0:.1f} s")
        peer = peer_tree is not None and size in peer_sizes
        codes = [("new", ROOT)] + ([("peer", peer_tree)] if peer else [])
        for code, tree in codes:
            best: dict[str, tuple[float, float]] = {}
            with peer_schema(url, tree) if code == "peer" else nullcontext():
                for _ in range(repeat):
                    for name, (wall, cpu) in commands(tree, env, client, job,
                                                      code == "peer").items():
                        if name not in best or wall < best[name][0]:
                            best[name] = (wall, cpu)
            for name, (wall, cpu) in best.items():
                rows.append({"backend": backend, "size": size, "command": name, "code": code,
                             "wall": wall, "cpu": cpu})
                log(f"[{backend}] {size:>7} {code:4s} {name:18s} {wall:7.2f} s wall "
                    f"{cpu:7.2f} s cpu")
    client.close()
    return rows


STARTUP = (("--help",), ("showq", "--help"), ("showstart", "--help"))


def measure_startup(peer_tree: Path | None, repeat: int) -> list[tuple[str, tuple, tuple]]:
    """(command, (wall, cpu) new, (wall, cpu) peer or ()) of each STARTUP command, the
    best of ``repeat`` runs each, new and peer alternating."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    out = []
    for args in STARTUP:
        best: dict[str, tuple[float, float]] = {}
        for _ in range(repeat):
            for code, tree in [("new", ROOT)] + ([("peer", peer_tree)] if peer_tree else []):
                got = run_cli(tree, env, *args)
                if code not in best or got[1] < best[code][1]:
                    best[code] = got
        out.append((" ".join(args), best["new"], best.get("peer", ())))
    return out


def report_startup(rows: list[tuple[str, tuple, tuple]]) -> None:
    print("start-up (no database)  new wall (cpu)    peer wall (cpu)    new/peer cpu")
    for name, new, peer in rows:
        peer_txt = f"{peer[0]:6.2f} ({peer[1]:5.2f})" if peer else " " * 14
        ratio = f"x{new[1] / peer[1]:.3f}" if peer else ""
        print(f"  {name:20s} {new[0]:6.2f} ({new[1]:5.2f})    {peer_txt}    {ratio}")


def report(rows: list[dict[str, Any]]) -> None:
    """The table: per backend, command and size, new vs peer and growth."""
    print("\nbackend     size     command             new wall (cpu)      peer wall (cpu)"
          "     new/peer wall (cpu)   growth vs smallest")
    index = {(r["backend"], r["size"], r["command"], r["code"]): r for r in rows}
    for backend in sorted({r["backend"] for r in rows}):
        sizes = sorted({r["size"] for r in rows if r["backend"] == backend})
        names = list(dict.fromkeys(r["command"] for r in rows if r["backend"] == backend))
        for name in names:
            base = index.get((backend, sizes[0], name, "new"))
            for size in sizes:
                new = index.get((backend, size, name, "new"))
                peer = index.get((backend, size, name, "peer"))
                if new is None:
                    continue
                peer_txt = f"{peer['wall']:7.2f} ({peer['cpu']:6.2f})" if peer else " " * 16
                ratio = (f"x{new['wall'] / peer['wall']:.3f} (x{new['cpu'] / peer['cpu']:.3f})"
                         if peer else "")
                growth = f"x{new['wall'] / base['wall']:.2f}" if base else ""
                target = "  < 2 s" if new["wall"] < 2.0 else ""
                print(f"{backend:10s} {size:>7}  {name:18s} {new['wall']:7.2f} ({new['cpu']:6.2f})"
                      f"   {peer_txt}   {ratio:>18}   {growth}{target}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,50000,100000")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--peer-sizes", default="10000")
    parser.add_argument("--peer-tree", type=Path, default=None,
                        help="a checkout of the code before issue 25 (no peer without it)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--startup-repeat", type=int, default=3,
                        help="runs of each --help start-up command (0: skip them)")
    args = parser.parse_args(argv)
    for tree in [ROOT] + ([args.peer_tree] if args.peer_tree else []):
        compiled(tree)
    if args.startup_repeat > 0:
        report_startup(measure_startup(args.peer_tree, args.startup_repeat))
    ints = lambda text: [int(x) for x in text.split(",") if x.strip()]  # noqa: E731
    rows = measure_depth(ints(args.sizes), args.backends.split(","), ints(args.peer_sizes),
                         args.peer_tree, args.repeat)
    report(rows)


if __name__ == "__main__":
    main()

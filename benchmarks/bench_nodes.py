"""Per-job CPU of a live iteration as an RM's node count grows (issue 25, grid part).

One RM of 10, 100 and 1,000 nodes (4 processors, 4 GB each, the scale grid's
``demo.cfg`` policy: what :mod:`scale_grid` gives each of its 10 RMs), SQLite and
PostgreSQL (a private database on 127.0.0.1:5432, created and dropped here).  Per
point, as :mod:`bench_iteration` does: a job recorded as the gatekeeper records it,
then the quick pass (the gatekeeper's, in place) or the full iteration (the scheduler
worker's) that starts it, alternating; CPU of this thread per iteration (p50, min),
and the ratio to the 10-node p50 of the same database measured in the same run; and
the Redis server's CPU per iteration (mean over both kinds, in the kernel's 10 ms ticks).

    .venv/bin/python benchmarks/bench_nodes.py [--nodes 10,100,1000] [--db sqlite,postgres]
        [--iterations 100] [--profile FILE]

``--profile FILE`` writes a cProfile of every measured iteration of the largest
point (``FILE.<db>.<kind>.prof``).  CPU, not wall: another engineer's benchmark may
share this 2-core machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's grid_tasks, not another installed one
sys.path.insert(0, str(ROOT / "benchmarks"))

import psutil  # noqa: E402
from bench_iteration import measure  # noqa: E402
from scale_grid import postgres_database  # noqa: E402

WARMUP = 20
KINDS = ((False, "full"), (True, "quick"))


def write_topology(folder: Path, nodes: int) -> Path:
    """One RM ``rmA`` of ``nodes`` nodes, as scale_grid writes each of its RMs."""
    policy = ROOT / "config" / "demo.cfg"
    path = folder / f"rm-{nodes}.toml"
    path.write_text(f'[rm.rmA]\npolicy_file = "{policy}"\n'
                    f'[rm.rmA.node."n[0001-{nodes:04d}]"]\nprocs = 4\nmemory_mb = 4096\n')
    return path


def _empty_postgres(url: str) -> None:
    from sqlalchemy import text

    from grid_tasks.db import dispose_engines, get_engine

    with get_engine(url).begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    dispose_engines()


def point(nodes: int, database_url: str | None, tmp: Path, n: int,
          profile: str | None) -> dict[str, list[float]]:
    """CPU ms per iteration of each kind on one RM of ``nodes`` nodes."""
    from grid_tasks.embedded.redis_server import RedisServer
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.security.keys import init_keys
    from grid_tasks.settings import Settings
    from grid_tasks.topology import load_topology

    work = Path(tempfile.mkdtemp(dir=tmp))
    server = RedisServer(work / "redis")
    server.start()
    try:
        env = {"GRID_TASKS_REDIS_URL": server.url(3), "GRID_TASKS_BROKER_URL": server.url(1),
               "GRID_TASKS_RESULT_BACKEND": server.url(2), "GRID_TASKS_STATE_DIR": str(work),
               "GRID_TASKS_TOPOLOGY": str(write_topology(work, nodes))}
        if database_url:
            env["GRID_TASKS_DATABASE_URL"] = database_url
        settings = Settings.from_env(env)
        topology = load_topology(settings.topology_file)
        prepare_database(settings, topology)
        init_keys(work / "keys", "bench", now=datetime.now(timezone.utc))
        redis_cpu = psutil.Process(server.pid).cpu_times
        before = [0.0]

        def ready() -> None:  # the nodes registered: the iterations' own Redis CPU from here
            before[0] = sum(redis_cpu()[:2])

        got = measure(settings, topology, n + WARMUP, profile=profile, skip=WARMUP,
                      ready=ready)
        spent = (sum(redis_cpu()[:2]) - before[0]) * 1e3 / (2 * (n + WARMUP))
    finally:
        server.stop()
    out = {name: got[quick][1][WARMUP:] for quick, name in KINDS}
    out["redis"] = [spent]  # the server's CPU per iteration, both kinds (10 ms ticks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="10,100,1000")
    parser.add_argument("--db", default="sqlite,postgres")
    parser.add_argument("--iterations", type=int, default=100, help="of each kind, per point")
    parser.add_argument("--profile", help="cProfile the largest point into FILE.<db>.<kind>")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    sizes = [int(s) for s in args.nodes.split(",")]
    print(f"live iteration starting one job, one RM, CPU ms per iteration ({args.iterations} "
          f"of each kind), load average {os.getloadavg()[0]:.1f}:")
    with tempfile.TemporaryDirectory(prefix="bench-nodes-") as tmp:
        for db in args.db.split(","):
            with (postgres_database("bench_nodes") if db == "postgres" else _no_url()) as url:
                base: dict[str, float] = {}
                for nodes in sizes:
                    prof = f"{args.profile}.{db}" if args.profile and nodes == max(sizes) \
                        else None
                    got = point(nodes, url, Path(tmp), args.iterations, prof)
                    if url:
                        _empty_postgres(url)
                    print(_line(db, nodes, got, base), flush=True)


@contextmanager
def _no_url() -> Iterator[None]:
    yield None


def _line(db: str, nodes: int, got: dict[str, list[float]], base: dict[str, float]) -> str:
    parts = [f"  {db:<8} {nodes:>5} nodes:"]
    for name, cpus in got.items():
        p50 = statistics.median(cpus)
        base.setdefault(name, p50)
        if name == "redis":
            parts.append(f"redis {p50:5.2f}")
            continue
        parts.append(f"{name} p50 {p50:6.2f} min {min(cpus):6.2f} "
                     f"({p50 / base[name]:.2f}x)")
    return "  ".join(parts)


if __name__ == "__main__":
    sys.exit(main())

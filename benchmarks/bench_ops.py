"""Operator commands on a busy RM: how long showq, checkjob, showstart, showbf,
diagnose -p/-j and showstats take, measured on the ops functions (no CLI start-up).

A temporary SQLite database holds one RM of ``--nodes`` 8-processor nodes, running
jobs filling about three quarters of it, ``--idle`` waiting jobs and ``--finished``
accounting records.  Each command runs ``--repeat`` times; the median is printed,
and for the planning commands the share spent loading the Maui core from SQL
(``load_scheduler``, measured in the same run) as the ratio command / load.

    .venv/bin/python benchmarks/bench_ops.py [--nodes 64] [--idle 500] [--finished 5000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grid_tasks.db import Job, get_engine, repository, session_factory, sync_topology  # noqa: E402
from grid_tasks.db.testing import temporary_database  # noqa: E402
from grid_tasks.ops import (  # noqa: E402
    build_queue, check_job, diagnose_jobs, diagnose_priority, show_backfill, show_start,
    show_stats,
)
from grid_tasks.ops.plan import load_scheduler  # noqa: E402
from grid_tasks.states import JobState, MauiJobState  # noqa: E402
from grid_tasks.topology import parse_topology  # noqa: E402

NOW = datetime(2026, 3, 4, 12, tzinfo=timezone.utc)


def populate(session, nodes: int, idle: int, finished: int, rng: random.Random) -> int:
    toml = "[rm.big]\n" + "".join(f"[rm.big.node.n{i:03d}]\nprocs = 8\n" for i in range(nodes))
    sync_topology(session, parse_topology(toml, "bench.toml"))
    names = [f"n{i:03d}" for i in range(nodes)]
    for i, name in enumerate(names[: nodes * 3 // 4]):
        session.add(Job(rm="big", user=f"u{i % 13}", state=JobState.ACTIVE,
                        maui_state=MauiJobState.RUNNING, tasks=8, procs=8,
                        walltime=rng.randint(600, 7200), nodes_allocated={name: 8},
                        submit_time=NOW - timedelta(hours=1),
                        start_time=NOW - timedelta(seconds=rng.randint(0, 500))))
    for i in range(idle):
        tasks = rng.choice((1, 2, 4, 8, 16, 32))
        session.add(Job(rm="big", user=f"u{i % 13}", state=JobState.PENDING, tasks=tasks,
                        procs=tasks, walltime=rng.randint(60, 7200),
                        submit_time=NOW - timedelta(seconds=rng.randint(0, 7200))))
    for i in range(finished):
        end = NOW - timedelta(seconds=rng.randint(0, 86400))
        job = Job(rm="big", user=f"u{i % 13}", state=JobState.DONE, tasks=4, procs=4,
                  walltime=3600, submit_time=end - timedelta(hours=2),
                  start_time=end - timedelta(hours=1), end_time=end, exit_code=0)
        session.add(job)
        session.flush()
        repository.record_accounting(session, job)
    session.commit()
    return session.query(Job.id).filter(Job.state == JobState.PENDING).order_by(Job.id).first()[0]


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--finished", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with temporary_database(prefix="bench_ops") as url:
        factory = session_factory(get_engine(url))
        with factory() as s:
            idle_id = populate(s, args.nodes, args.idle, args.finished, random.Random(7))
        with factory() as s:
            load = median_ms(lambda: load_scheduler(s, "big", NOW), args.repeat)
            cases = {
                "showq": lambda: build_queue(s, "big", NOW),
                "checkjob (SQL only)": lambda: check_job(s, str(idle_id), NOW),
                "showstart 16@1h": lambda: show_start(s, "16@1:00:00", NOW, rm="big"),
                "showbf": lambda: show_backfill(s, "big", NOW),
                "diagnose -p": lambda: diagnose_priority(s, "big", NOW),
                "diagnose -j (all)": lambda: diagnose_jobs(s, NOW, rm="big"),
                "showstats -u": lambda: show_stats(s, by="user"),
            }
            print(f"RM of {args.nodes} x 8 procs, {args.nodes * 3 // 4} running, {args.idle} idle, "
                  f"{args.finished} accounting records; median of {args.repeat}")
            print(f"  {'load_scheduler (peer)':24s} {load:9.1f} ms")
            for name, fn in cases.items():
                ms = median_ms(fn, args.repeat)
                print(f"  {name:24s} {ms:9.1f} ms   x{ms / load:5.2f} of a load")


if __name__ == "__main__":
    main()

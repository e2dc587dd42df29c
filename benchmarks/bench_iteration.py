"""One live Maui iteration that starts one job: wall and CPU per iteration.

Both kinds, alternating: the full iteration the scheduler runs for every trigger
(recovery, the SQL state loaded into the pure core, the decision, the Starting rows
committed, the launch token and message published) and the quick pass a gatekeeper
runs in place for every coallocated subjob (the same without the time-driven
recovery and deferral release).
It runs here in this process against a private Redis server and a SQLite file on
the demo topology, with no other load, so its own cost is what is measured (the
launch messages are published and left unconsumed: no worker runs).  Each job is
recorded as the gatekeeper records a submission (:func:`~grid_tasks.gram.submission.insert_job`),
in this process: a ``Grid.submit`` would wait for a gatekeeper's signed reply, and no
gatekeeper runs here (it waited its 30 s timeout and failed).

    .venv/bin/python benchmarks/bench_iteration.py [--iterations 200]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's grid_tasks, not another installed one


def measure(settings, topology, n: int, *, profile: str | None = None,
            skip: int = 0, ready: Any = None) -> dict[bool, tuple[list[float], list[float]]]:
    """Per kind (quick or not): (wall ms, CPU ms) of ``n`` iterations of it, each starting
    the one job just submitted; the kinds alternate, so machine drift weighs on both.
    ``profile``: cProfile every iteration but the first ``skip`` of each kind into
    ``<profile>.quick.prof`` and ``<profile>.full.prof``.  ``ready()`` is called once
    the nodes are registered, before the first iteration."""
    import cProfile

    import redis

    from grid_tasks import db
    from grid_tasks.celery_app import create_app
    from grid_tasks.gram.records import Outbox
    from grid_tasks.gram.submission import insert_job
    from grid_tasks.node.registry import NodeRegistry
    from grid_tasks.rsl import lower
    from grid_tasks.scheduling.iteration import run_iteration
    from grid_tasks.states import JobState, MauiJobState

    client = redis.Redis.from_url(settings.redis_url)
    registry = NodeRegistry(client, 3600)
    for node in topology.iter_nodes():  # every node alive (no daemon runs here)
        registry.register(node.rm, node.name, {}, {}, "bench", time.time())
    app = create_app(settings)
    sessions = db.session_factory(db.get_engine(settings.database_url))
    rsl = "&(executable=/bin/true)(count=1)"
    sub = lower(rsl)[0]
    if ready is not None:
        ready()
    got: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    profiles = {False: cProfile.Profile(), True: cProfile.Profile()} if profile else None
    try:
        for i in range(2 * n):
            quick = bool(i % 2)
            with db.session_scope(sessions) as session:  # as the gatekeeper stores it
                job_id, _ = insert_job(session, "rmA", rsl, sub, {"user": "bench"},
                                       datetime.now(timezone.utc), Outbox())
            prof = profiles[quick] if profiles and i // 2 >= skip else None
            if prof:
                prof.enable()
            t0, c0 = time.perf_counter(), time.thread_time()
            report = run_iteration(app, "rmA", sessions=sessions, redis=client, quick=quick,
                                   registry=registry)
            got[quick][0].append((time.perf_counter() - t0) * 1e3)
            got[quick][1].append((time.thread_time() - c0) * 1e3)
            if prof:
                prof.disable()
            if report.started != [job_id]:
                raise SystemExit(f"the iteration started {report.started}, not job {job_id}")
            with db.session_scope(sessions) as session:  # done: its processor is free again
                row = db.repository.get_job(session, job_id)
                row.state, row.maui_state = JobState.DONE, MauiJobState.COMPLETED
                row.end_time, row.version = datetime.now(timezone.utc), row.version + 1
    finally:
        app.close()
        client.close()
    for quick, prof in (profiles or {}).items():
        prof.dump_stats(f"{profile}.{'quick' if quick else 'full'}.prof")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # "token store restored" and the like

    from grid_tasks.embedded.redis_server import RedisServer
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.security.keys import init_keys
    from grid_tasks.settings import Settings
    from grid_tasks.topology import load_topology

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis")
        server.start()
        try:
            settings = Settings.from_env({
                "GRID_TASKS_REDIS_URL": server.url(3), "GRID_TASKS_BROKER_URL": server.url(1),
                "GRID_TASKS_RESULT_BACKEND": server.url(2), "GRID_TASKS_STATE_DIR": tmp,
                "GRID_TASKS_TOPOLOGY": str(ROOT / "config" / "demo-grid.toml")})
            topology = load_topology(settings.topology_file)
            prepare_database(settings, topology)
            init_keys(Path(tmp) / "keys", "bench", now=datetime.now(timezone.utc))  # signing
            got = measure(settings, topology, args.iterations + 20)
        finally:
            server.stop()
    print(f"live iteration starting one job ({args.iterations} of each kind, alternating, "
          "demo topology, SQLite):")
    cpu_p50 = {}
    for quick, name in ((False, "full (scheduler)"), (True, "quick (gatekeeper, in place)")):
        walls, cpus = (v[20:] for v in got[quick])  # the first ones warm caches
        cpu_p50[quick] = statistics.median(cpus)
        # min as well as p50: on a shared VM the noise only ever adds, and the p50 of
        # the same code drifts by tens of percent from one minute to the next
        print(f"  {name:<29} wall p50 {statistics.median(walls):.2f} ms, min "
              f"{min(walls):.2f} ms; CPU p50 {cpu_p50[quick]:.2f} ms, min "
              f"{min(cpus):.2f} ms")
    print(f"  quick / full CPU p50: {cpu_p50[True] / cpu_p50[False]:.2f}")


if __name__ == "__main__":
    sys.exit(main())

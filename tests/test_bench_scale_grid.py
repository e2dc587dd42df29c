"""The verdicts and the settling of ``scale_grid.py`` (bench_scale --part grid): the
ratios against the 100-node point, a failed point left out of them, and the count of
queued broker messages that decides when the idle window may begin (a real Redis)."""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import redis

from grid_tasks import db
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.rsl import lower
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from scale_grid import Point, load_timeout, ratios  # noqa: E402
from scale_grid_watch import _queued, _reporting  # noqa: E402


def _point(nodes: int, throughput: float, ok: bool = True) -> Point:
    return Point(nodes, "sqlite", start_s=10.0, redis_clients=150, idle_shared_pct=10.0,
                 jobs=400, throughput=throughput, p50_s=0.1, p95_s=0.2, shared_ms_job=50.0,
                 net_ms_job=40.0 * nodes / 100, ok=ok)


def test_the_verdict_compares_each_size_with_the_smallest() -> None:
    (line,) = ratios([_point(100, 10.0), _point(1000, 7.9)])
    assert "1000 vs 100 nodes" in line and "throughput 0.79x (MISSES" in line
    assert "shared CPU per job 1.00x (net of idle 10.00x)" in line
    (line,) = ratios([_point(100, 10.0), _point(1000, 8.0)])
    assert "throughput 0.80x (meets" in line


def test_a_failed_point_is_named_and_left_out_of_the_ratios() -> None:
    lines = ratios([_point(100, 10.0), _point(300, 0.0, ok=False), _point(1000, 9.0)])
    assert lines[0] == "sqlite 300 nodes: no point measured (failed, see above)"
    assert len(lines) == 2 and "1000 vs 100 nodes" in lines[1] and "0.90x" in lines[1]


def test_the_load_timeout_grows_with_the_jobs() -> None:
    assert load_timeout(400) == 600.0 and load_timeout(10_000) == 5000.0


def test_queued_counts_every_bound_queue(redis_server) -> None:
    broker = redis.Redis.from_url(redis_server.url(5))
    broker.flushdb()
    try:
        broker.sadd("_kombu.binding.gram.rA", b"gram.rA\x06\x16\x06\x16gram.rA")
        broker.sadd("_kombu.binding.celery.pidbox", b"\x06\x16\x06\x16w1@h.celery.pidbox")
        broker.rpush("gram.rA", "m1", "m2", "m3")
        broker.rpush("unbound", "x")  # not a queue any worker reads
        assert _queued(broker) == 3
        broker.hset("unacked", "tag1", "m0")  # prefetched by a worker, still to run
        assert _queued(broker) == 4
    finally:
        broker.flushdb()
        broker.close()


def test_progress_counts_submitted_and_ended_jobs(settings, capsys) -> None:
    prepare_database(settings, load_topology(settings.topology_file))
    sessions = db.session_factory(db.get_engine(settings.database_url))
    rsl = "&(executable=/bin/true)"
    try:
        with db.session_scope(sessions) as s:
            rows = [build_job(s, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                              datetime.now(timezone.utc), Outbox()) for _ in range(3)]
            rows[0].state = JobState.DONE
        with _reporting(settings, "tiny", 5, period=0.05):
            time.sleep(0.3)
    finally:
        db.dispose_engines(settings.database_url)
    assert "tiny: 3/5 jobs submitted, 1 ended" in capsys.readouterr().err

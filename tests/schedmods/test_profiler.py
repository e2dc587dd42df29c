"""The system profiler: real disks, a real private Redis, a dead port, a hung server."""

from __future__ import annotations

import logging
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from grid_tasks.db import get_engine, session_factory
from grid_tasks.maui import Node, Observers, Scheduler
from grid_tasks.maui.cfg import parse_maui_config
from grid_tasks.schedmods import (
    DatabaseCheck,
    DiskCheck,
    ModuleContext,
    ProfilerThresholds,
    RedisCheck,
    Severity,
    SystemProfiler,
    load_modules,
)

QUIET = ProfilerThresholds(warn_free_percent=0, warn_free_mb=0, critical_free_percent=0,
                           critical_free_mb=0, broker_slow_ms=10_000, database_slow_ms=10_000,
                           timeout_s=5.0)


def dead_client(port: int) -> redis.Redis:
    """A client of a closed port that fails at once (no retries with back-off)."""
    return redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1,
                       retry=Retry(NoBackoff(), 0))


def free_mb(path: Path) -> float:
    return shutil.disk_usage(path).free / 2**20


def test_disk_warns_before_trouble_and_turns_critical(tmp_path: Path) -> None:
    check = DiskCheck("logs", tmp_path / "not" / "made" / "yet")  # measured on its parent
    [ok] = check.run(QUIET)
    assert ok.severity is Severity.OK and ok.value == pytest.approx(free_mb(tmp_path), rel=0.05)
    above_free = free_mb(tmp_path) * 2
    warn = ProfilerThresholds(warn_free_mb=above_free, critical_free_mb=0, critical_free_percent=0)
    [w] = check.run(warn)
    assert w.severity is Severity.WARNING and "MB free" in w.message
    [c] = check.run(ProfilerThresholds(critical_free_percent=100.0))
    assert c.severity is Severity.CRITICAL


def test_redis_ping_ok_slow_and_dead(redis_server, dead_port: int) -> None:
    client = redis.Redis.from_url(redis_server.url(5))
    try:
        [ok] = RedisCheck("redis", client).run(QUIET)
        assert ok.severity is Severity.OK and ok.value is not None and ok.value > 0
        slow = ProfilerThresholds(broker_slow_ms=0.0)
        [w] = RedisCheck("redis", client).run(slow)
        assert w.severity is Severity.WARNING and "slower than 0 ms" in w.message
    finally:
        client.close()
    dead = dead_client(dead_port)
    [c] = RedisCheck("redis", dead).run(QUIET)
    assert c.severity is Severity.CRITICAL and "unreachable" in c.message
    assert "ConnectionError" in c.message


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_a_hung_service_is_abandoned_after_the_timeout(silent_server: int) -> None:
    # No retries (their back-off draws from ``random`` in a thread that outlives the
    # test); closing the server at teardown resets the connection the ping waits on.
    hung = redis.Redis(host="127.0.0.1", port=silent_server, socket_timeout=10,
                       retry=Retry(NoBackoff(), 0))
    started = time.monotonic()
    [c] = RedisCheck("broker", hung).run(ProfilerThresholds(timeout_s=0.3))
    assert time.monotonic() - started < 2.0
    assert c.severity is Severity.CRITICAL and "no answer within 0.3 s" in c.message


def test_database_ping(sessions, dead_port: int) -> None:
    [ok] = DatabaseCheck("database", sessions).run(QUIET)
    assert ok.severity is Severity.OK and ok.value is not None
    gone = session_factory(get_engine(f"postgresql+psycopg://u@127.0.0.1:{dead_port}/x"))
    [c] = DatabaseCheck("database", gone).run(QUIET)
    assert c.severity is Severity.CRITICAL and "cannot reach database" in c.message


def test_profiler_module_logs_findings_and_throttles(tmp_path: Path, redis_server, sessions,
                                                     dead_port: int, caplog) -> None:
    cfg = parse_maui_config(f"MODULES profiler\nLOGDIR {tmp_path / 'logs'}\n")
    dead = dead_client(dead_port)
    limits = ProfilerThresholds(warn_free_mb=free_mb(tmp_path) * 2, critical_free_mb=0,
                                critical_free_percent=0, every_s=60.0)
    ctx = ModuleContext(state_dir=tmp_path / "state", rm="rmP", sessions=sessions, redis=dead,
                        thresholds=limits, clock=lambda: 1000.0)
    [prof] = load_modules(cfg, ctx)
    assert isinstance(prof, SystemProfiler)
    with caplog.at_level(logging.WARNING, logger="grid_tasks.schedmods.profiler"):
        sched, observers = Scheduler([Node("n1", 1)]), Observers([prof])
        observers.started(sched)
    first = prof.last
    assert first is not None and first.at == 1000.0 and first.worst is Severity.CRITICAL
    by_target = {f.target: f.severity for f in first.findings}
    assert by_target == {"logs": Severity.WARNING, "state": Severity.WARNING,
                         "redis": Severity.CRITICAL, "database": Severity.OK}
    assert {r.levelno for r in caplog.records} == {logging.WARNING, logging.ERROR}
    observers.iterate(sched, 1030.0)
    assert prof.last is first  # within every_s
    observers.iterate(sched, 1060.0)
    assert prof.last is not first and prof.last.at == 1060.0
    assert prof.last.to_dict()["worst"] == "critical"

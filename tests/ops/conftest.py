"""Fixtures of the operator-command tests: a migrated database per backend with a small
grid stored, and a helper inserting jobs through grid_tasks.db.

rmA (a1, a2: 4 processors each) runs a real maui.cfg (user priorities, a throttle);
rmB (b1: 2 processors) runs Maui's defaults.  ``NOW`` is the fixed present of every test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from grid_tasks.db import Job, get_engine, session_factory, sync_topology
from grid_tasks.db.testing import clear_tables, postgres_test_url, temporary_database
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.topology import parse_topology

NOW = datetime(2026, 3, 4, 12, 0, 0, tzinfo=timezone.utc)

MAUI_CFG = """\
RESERVATIONPOLICY  HIGHEST
RESERVATIONDEPTH   4
BACKFILLPOLICY     FIRSTFIT
CREDWEIGHT         1
USERWEIGHT         1
SERVICEWEIGHT      1
QUEUETIMEWEIGHT    1
USERCFG[alice]     PRIORITY=500
USERCFG[carol]     MAXJOB=1
"""

GRID_TOML = """
[rm.rmA]
policy_file = "maui.cfg"

[rm.rmA.node.a1]
procs = 4
memory_mb = 4096

[rm.rmA.node.a2]
procs = 4
memory_mb = 4096

[rm.rmB.node.b1]
procs = 2
memory_mb = 2048
"""

_ACTIVE_MAUI = {JobState.ACTIVE: MauiJobState.RUNNING, JobState.DONE: MauiJobState.COMPLETED,
                JobState.FAILED: MauiJobState.REMOVED}


def _backend_url(name: str) -> str | None:
    if name == "sqlite":
        return None
    url = postgres_test_url()
    if url is None:
        pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    return url


@pytest.fixture(scope="session", params=["sqlite", pytest.param("postgresql",
                                                                 marks=pytest.mark.postgres)])
def ops_db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    with temporary_database(_backend_url(request.param), prefix="gt_ops") as url:
        yield url


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("policy")
    (folder / "maui.cfg").write_text(MAUI_CFG)
    return folder


@pytest.fixture
def session(ops_db_url: str, policy_dir: Path) -> Iterator[Session]:
    """A session on a database holding the test grid (rows cleared afterwards)."""
    engine = get_engine(ops_db_url)
    factory = session_factory(engine)
    with factory() as s:
        sync_topology(s, parse_topology(GRID_TOML, "grid.toml", policy_dir))
        s.commit()
        yield s
        s.rollback()
    clear_tables(engine)


@pytest.fixture
def factory(ops_db_url: str, session: Session) -> Any:
    """A session factory on the same database (for code that opens its own sessions)."""
    return session_factory(get_engine(ops_db_url))


@pytest.fixture
def add_job(session: Session) -> Callable[..., Job]:
    """Insert a job: ``add_job("rmA", user="u", state=JobState.ACTIVE, tasks=2,
    nodes={"a1": 2}, walltime=3600, submitted=-600, started=-300)`` (offsets from NOW)."""

    def add(rm: str, *, user: str = "u1", state: JobState = JobState.PENDING, tasks: int = 1,
            walltime: int = 3600, submitted: float = -600, started: float | None = None,
            ended: float | None = None, nodes: dict[str, int] | None = None,
            maui: MauiJobState | None = None, **extra: Any) -> Job:
        at = lambda off: None if off is None else NOW + timedelta(seconds=off)  # noqa: E731
        job = Job(rm=rm, user=user, state=state,
                  maui_state=maui or _ACTIVE_MAUI.get(state, MauiJobState.IDLE),
                  tasks=tasks, procs=tasks, walltime=walltime, submit_time=at(submitted),
                  start_time=at(started), end_time=at(ended), nodes_allocated=nodes or {},
                  **extra)
        session.add(job)
        session.commit()
        return job

    return add


@pytest.fixture
def bulk_jobs(session: Session) -> Callable[..., list[int]]:
    """Insert ``n`` idle jobs of ``rm`` in one Core statement (fast at thousands):
    ``bulk_jobs("rmA", 2000, holds=["user"])``; submitted one second apart before NOW,
    sizes 1-4 processors, users u0..u6.  Returns their ids, oldest first."""

    def add(rm: str, n: int, **fields: Any) -> list[int]:
        rows = [{"rm": rm, "user_name": f"u{i % 7}", "state": JobState.PENDING,
                 "maui_state": MauiJobState.IDLE, "tasks": 1 + i % 4, "procs": 1 + i % 4,
                 "walltime": 600 + 60 * (i % 50), "version": 1, "request": {}, "holds": [],
                 "dependencies": [], "nodes_allocated": {},
                 "submit_time": NOW - timedelta(seconds=n - i), **fields} for i in range(n)]
        first = session.scalar(select(func.max(Job.id))) or 0
        session.execute(insert(Job.__table__), rows)
        session.commit()
        return list(session.scalars(select(Job.id).where(Job.id > first).order_by(Job.id)))

    return add

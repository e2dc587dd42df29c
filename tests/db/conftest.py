"""Fixtures for the SQL layer: one migrated database per backend per test session.

SQLite always runs; PostgreSQL runs when ``GRID_TASKS_TEST_POSTGRES_URL`` is set,
in a private schema dropped at the end (no other table is ever touched).
Each test gets a clean slate: rows are deleted after it, the schema stays.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from sqlalchemy import Engine, insert
from sqlalchemy.orm import Session, sessionmaker

from grid_tasks.db import get_engine, session_factory, sync_topology
from grid_tasks.db.models import ResourceManager
from grid_tasks.db.testing import clear_tables, postgres_test_url, temporary_database
from grid_tasks.topology import parse_topology

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]

GRID_TOML = """
[rm.rmA]
policy_file = "maui.cfg"
site = "north"

[rm.rmA.node.a1]
procs = 4
memory_mb = 4096
disk_mb = 20000
swap_mb = 1024
features = ["fast", "ib"]
arch = "x86_64"

[rm.rmA.node.a2]
procs = 2
memory_mb = 2048

[rm.rmB.node.b1]
procs = 8
memory_mb = 16384
features = ["bigmem"]
"""

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def backend_url(backend: str) -> str | None:
    """The server URL for a backend name; skips the test when PostgreSQL is not configured."""
    if backend == "sqlite":
        return None
    url = postgres_test_url()
    if url is None:
        pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    return url


def two_rm_engine(backend: str, prefix: str) -> Iterator[Engine]:
    """A fresh migrated database of its own holding RMs rmA and rmB only (for the
    tests of the change counters' triggers, which count from an empty table)."""
    with temporary_database(backend_url(backend), prefix=prefix) as url:
        engine = get_engine(url)
        with engine.begin() as conn:
            conn.execute(insert(ResourceManager.__table__),
                         [{"name": rm, "attributes": {}} for rm in ("rmA", "rmB")])
        yield engine


@pytest.fixture(scope="session", params=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated database URL shared by the session's tests of one backend."""
    with temporary_database(backend_url(request.param)) as url:
        yield url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = get_engine(db_url)
    yield engine
    clear_tables(engine)


@pytest.fixture
def factory(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


@pytest.fixture
def session(factory: sessionmaker[Session]) -> Iterator[Session]:
    with factory() as session:
        yield session
        session.rollback()


@pytest.fixture
def topology():
    return parse_topology(GRID_TOML, "grid.toml")


@pytest.fixture
def grid(session: Session, topology) -> Session:
    """The session with the test topology's RMs and nodes stored and committed."""
    sync_topology(session, topology)
    session.commit()
    return session

"""Fixtures for the scheduler modules: a migrated database per backend, closed ports."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from grid_tasks.db import ResourceManager, get_engine, session_factory
from grid_tasks.db.testing import clear_tables, postgres_test_url, temporary_database

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session", params=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated database (SQLite always; PostgreSQL when its URL is set)."""
    server = None
    if request.param == "postgresql":
        server = postgres_test_url()
        if server is None:
            pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    with temporary_database(server, prefix="gt_schedmods") as url:
        yield url


@pytest.fixture
def sessions(db_url: str) -> Iterator[sessionmaker[Session]]:
    """A session factory on a clean database holding resource managers rmA and rmB."""
    engine = get_engine(db_url)
    factory = session_factory(engine)
    with factory.begin() as session:
        session.add_all([ResourceManager(name="rmA"), ResourceManager(name="rmB")])
    yield factory
    clear_tables(engine)


@pytest.fixture
def dead_port() -> int:
    """A loopback port nothing listens on (bound then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

"""Engines: SQLite pragmas, per-process caching, sessions, unreachable databases."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import text

from grid_tasks.db import (
    DatabaseError,
    Job,
    ResourceManager,
    get_engine,
    make_engine,
    mask_url,
    migrate,
    session_factory,
    session_scope,
)
from grid_tasks.db.engine import dispose_engines
from grid_tasks.errors import ConnectivityError, GridTasksError


def test_sqlite_connections_get_wal_foreign_keys_and_busy_timeout(tmp_path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'sub' / 'dir' / 'x.db'}")  # dirs are made
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() >= 1000
    engine.dispose()


def test_get_engine_caches_per_url_and_is_rebuilt_after_fork(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    engine = get_engine(url)
    assert get_engine(url) is engine
    assert get_engine(f"sqlite:///{tmp_path / 'y.db'}") is not engine
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must not reuse the parent's pool
        try:
            fresh = get_engine(url) is not engine and get_engine(url) is get_engine(url)
            os.write(write, b"1" if fresh else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(read)
    dispose_engines(url)
    assert get_engine(url) is not engine


def test_session_scope_commits_or_rolls_back(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    migrate(url)
    factory = session_factory(get_engine(url))
    with session_scope(factory) as session:
        session.add(ResourceManager(name="rmA"))
    with pytest.raises(RuntimeError):
        with session_scope(factory) as session:
            session.add(Job(rm="rmA"))
            session.flush()
            raise RuntimeError("abort")
    with session_scope(factory) as session:
        assert session.get(ResourceManager, "rmA") is not None
        assert session.execute(text("SELECT count(*) FROM jobs")).scalar() == 0
    dispose_engines(url)


def test_password_is_masked() -> None:
    assert mask_url("postgresql+psycopg://u:s3cret@h/db") == "postgresql+psycopg://u:***@h/db"


def test_unreachable_postgres_is_a_connectivity_error_without_the_password() -> None:
    engine = make_engine("postgresql+psycopg://grid:s3cret@127.0.0.1:1/grid?connect_timeout=2")
    with pytest.raises(ConnectivityError) as err:
        with engine.connect():
            pass
    message = str(err.value)
    assert "cannot reach database postgresql+psycopg://grid:***@127.0.0.1:1/grid" in message
    assert "s3cret" not in message
    assert isinstance(err.value, GridTasksError)


def test_unreachable_sqlite_is_a_connectivity_error(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConnectivityError, match="cannot reach database sqlite:///.*a-file"):
        make_engine(f"sqlite:///{blocker / 'db.sqlite3'}")


def test_migrate_on_an_unreachable_database_is_a_connectivity_error() -> None:
    with pytest.raises(ConnectivityError, match="127.0.0.1:1"):
        migrate("postgresql+psycopg://grid@127.0.0.1:1/grid?connect_timeout=2")


@pytest.mark.parametrize("url", ["not a url", "nosuchdb://x/y"])
def test_bad_urls_are_typed_errors(url: str) -> None:
    with pytest.raises(DatabaseError):
        make_engine(url)


@pytest.mark.postgres
def test_a_bare_postgresql_url_uses_psycopg_3() -> None:
    from grid_tasks.db.testing import postgres_test_url

    server = postgres_test_url()
    if server is None:
        pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    bare = server.replace("postgresql+psycopg://", "postgres://", 1)
    engine = make_engine(bare)
    assert engine.dialect.driver == "psycopg"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1
    engine.dispose()

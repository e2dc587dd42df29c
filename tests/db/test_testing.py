"""The throwaway-database helper other issues' tests rely on."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from grid_tasks.db import get_engine, head_revision, make_engine, migrate
from grid_tasks.db.testing import schema_url, temporary_database


def test_sqlite_database_is_removed_afterwards() -> None:
    with temporary_database() as url:
        path = Path(url.removeprefix("sqlite:///"))
        assert path.exists()
        assert "jobs" in inspect(get_engine(url)).get_table_names()
    assert not path.parent.exists()


def test_unmigrated_on_request() -> None:
    with temporary_database(migrated=False) as url:
        assert inspect(get_engine(url)).get_table_names() == []


def test_schema_url_keeps_existing_options() -> None:
    url = schema_url("postgresql+psycopg://u:pw@h/db?options=-cstatement_timeout%3D5000", "s1")
    assert "pw@" in url  # the real password: this URL is handed to other processes
    assert "statement_timeout" in url and "search_path" in url and "s1" in url


@pytest.mark.postgres
def test_postgres_schema_is_private_and_dropped() -> None:
    from grid_tasks.db.testing import postgres_test_url

    server = postgres_test_url()
    if server is None:
        pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    with temporary_database(server) as first, temporary_database(server) as second:
        with get_engine(first).begin() as conn:
            schema = conn.execute(text("SELECT current_schema()")).scalar()
            conn.execute(text("INSERT INTO resource_managers (name, attributes, created_at, "
                              "updated_at) VALUES ('only-here', '{}', now(), now())"))
        assert schema.startswith("gt_test_")
        with get_engine(second).connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM resource_managers")).scalar() == 0
        assert migrate(first) == head_revision()
    admin = make_engine(server)
    with admin.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM pg_namespace WHERE nspname = :s"),
                            {"s": schema}).scalar()
    admin.dispose()
    assert left == 0

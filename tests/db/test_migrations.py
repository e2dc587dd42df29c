"""Alembic: idempotent migrate, downgrade/upgrade, and no drift between models and migrations."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from grid_tasks.db import (
    Base,
    MigrationError,
    current_revision,
    downgrade,
    get_engine,
    head_revision,
    migrate,
    schema_drift,
)
from grid_tasks.db.migrations import ALEMBIC_INI
from grid_tasks.db.testing import temporary_database

from .conftest import BACKENDS, backend_url


@pytest.fixture(params=BACKENDS)
def blank_url(request: pytest.FixtureRequest):
    """A fresh, never-migrated database of each backend."""
    with temporary_database(backend_url(request.param), migrated=False) as url:
        yield url


def test_migrations_ship_inside_the_package() -> None:
    assert ALEMBIC_INI.is_file()
    assert (ALEMBIC_INI.parent / "alembic" / "versions").is_dir()
    assert head_revision() == "0006_node_changes"


def test_migrate_is_idempotent(blank_url: str) -> None:
    assert current_revision(blank_url) is None
    assert migrate(blank_url) == head_revision()
    assert migrate(blank_url) == head_revision()
    tables = set(inspect(get_engine(blank_url)).get_table_names())
    assert set(Base.metadata.tables) <= tables


def test_no_drift_between_models_and_migrations(db_url: str) -> None:
    """`alembic check` on each backend: the migrations create exactly the models."""
    assert schema_drift(db_url) == []


def test_drift_is_detected(blank_url: str) -> None:
    migrate(blank_url)
    with get_engine(blank_url).begin() as conn:
        conn.execute(text("DROP INDEX ix_jobs_rm_state"))
    assert schema_drift(blank_url) == ["add_index: ix_jobs_rm_state"]


def test_downgrade_to_base_and_back(blank_url: str) -> None:
    migrate(blank_url)
    assert downgrade(blank_url, "base") is None
    remaining = set(inspect(get_engine(blank_url)).get_table_names()) & set(Base.metadata.tables)
    assert remaining == set()
    assert migrate(blank_url) == head_revision()
    assert schema_drift(blank_url) == []


def test_unknown_revision_is_a_typed_error(blank_url: str) -> None:
    with pytest.raises(MigrationError, match="upgrade of .* failed: .*nope"):
        migrate(blank_url, "nope")


def _migrate_in_child(url: str) -> str | None:
    return migrate(url)


def test_processes_migrating_together_all_succeed(blank_url: str) -> None:
    """Daemons of a fresh grid start at once and each calls migrate()."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(3) as pool:
        revisions = pool.map(_migrate_in_child, [blank_url] * 3)
    assert revisions == [head_revision()] * 3
    assert schema_drift(blank_url) == []

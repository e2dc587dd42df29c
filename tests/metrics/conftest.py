"""A migrated SQLite database with the demo topology, on the private Redis settings."""

from __future__ import annotations

import pytest

from grid_tasks import db
from grid_tasks.settings import Settings
from grid_tasks.topology import load_topology


@pytest.fixture
def grid_settings(settings: Settings) -> Settings:
    """``settings`` whose database is migrated and holds the demo grid's RMs and nodes."""
    db.migrate(settings.database_url)
    factory = db.session_factory(db.get_engine(settings.database_url))
    with db.session_scope(factory) as session:
        db.sync_topology(session, load_topology(settings.topology_file))
    yield settings
    db.dispose_engines(settings.database_url)


@pytest.fixture
def sessions(grid_settings: Settings):
    return db.session_factory(db.get_engine(grid_settings.database_url))

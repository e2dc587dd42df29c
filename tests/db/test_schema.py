"""The head revision the read-only commands check, kept in step with the migrations;
one query tells a current schema from one that is behind, never migrated or newer."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text

from grid_tasks.db import get_engine, migrate
from grid_tasks.db.errors import SchemaAheadError, SchemaBehindError
from grid_tasks.db.migrations import alembic_config
from grid_tasks.db.schema import HEAD_REVISION, REVISIONS, require_head, stored_revision


def shipped_chain() -> tuple[str, ...]:
    """The shipped migrations' revisions, oldest first (read by Alembic)."""
    scripts = ScriptDirectory.from_config(alembic_config())
    return tuple(reversed([s.revision for s in scripts.walk_revisions()]))


def test_the_revisions_spelled_out_are_the_shipped_chain():
    # A new migration without its line in grid_tasks/db/schema.py fails here.
    assert REVISIONS == shipped_chain()
    assert HEAD_REVISION == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_the_chain_check_sees_a_missing_revision():
    assert REVISIONS[:-1] != shipped_chain()


def test_a_database_at_head_passes_with_one_query(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'g.sqlite3'}"
    migrate(url)
    assert require_head(get_engine(url)) == HEAD_REVISION


def test_a_database_behind_or_never_migrated_is_refused_and_left_as_it_is(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'g.sqlite3'}"
    engine = get_engine(url)
    with pytest.raises(SchemaBehindError, match="no grid_tasks schema yet.*db upgrade"):
        require_head(engine)
    assert stored_revision(engine) is None  # not migrated by the check
    migrate(url, REVISIONS[-2])
    with pytest.raises(SchemaBehindError, match=f"at schema revision {REVISIONS[-2]}, "
                       f"behind {HEAD_REVISION}.*grid-tasks db upgrade"):
        require_head(engine)
    assert stored_revision(engine) == REVISIONS[-2]


def test_a_revision_this_version_does_not_know_is_refused(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'g.sqlite3'}"
    migrate(url)
    engine = get_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_future'"))
    with pytest.raises(SchemaAheadError, match="0099_future.*newer grid_tasks"):
        require_head(engine)

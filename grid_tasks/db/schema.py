"""The schema revision this grid_tasks needs, known without importing Alembic.

Importing Alembic and running ``migrate()`` cost an operator command about half of its
start-up, for nothing when the schema is already current.  So commands that only read
check the database's revision with one query (:func:`require_head`) against
:data:`REVISIONS`, the migration chain spelled out here, and refuse with a typed error
when it is behind; commands that write keep migrating (:mod:`grid_tasks.db.migrations`).
``tests/db/test_schema.py`` fails when this chain and the shipped migrations differ.
"""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from .engine import mask_url, unavailable
from .errors import SchemaAheadError, SchemaBehindError

#: Every revision of ``grid_tasks/db/alembic/versions``, oldest first (keep in step).
REVISIONS: tuple[str, ...] = ("0001", "0002_fence", "0003_jobs_queue_index",
                              "0004_idle_queue_changes", "0005_idle_queue_log",
                              "0006_node_changes")
#: The newest revision: the one a database must be at for the operator commands.
HEAD_REVISION = REVISIONS[-1]
#: Alembic's bookkeeping table (its default name; ``alembic/env.py`` keeps it).
VERSION_TABLE = "alembic_version"
UPGRADE_HINT = "run `grid-tasks db upgrade` (or any command that writes), then ask again"


def stored_revision(engine: Engine) -> str | None:
    """The revision recorded in the database, or None when it was never migrated
    (no version table, or an empty one).  Its own connection: a failed query leaves
    no aborted transaction behind (PostgreSQL)."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
    except SQLAlchemyError as err:
        away = unavailable(err, engine)
        if away is not None:
            raise away from err
        return None  # no version table: a database no grid_tasks has prepared
    return str(rows[0][0]) if rows else None


def require_head(engine: Engine) -> str:
    """Check in one query that the database is at :data:`HEAD_REVISION`; returns it.

    Raises :class:`SchemaBehindError` (never migrated, or an older revision: upgrade)
    or :class:`SchemaAheadError` (a revision this version does not ship)."""
    found = stored_revision(engine)
    where = mask_url(engine.url)
    if found == HEAD_REVISION:
        return found
    if found is None:
        raise SchemaBehindError(f"database {where} has no grid_tasks schema yet: "
                                f"{UPGRADE_HINT}")
    if found in REVISIONS:
        raise SchemaBehindError(f"database {where} is at schema revision {found}, behind "
                                f"{HEAD_REVISION}: {UPGRADE_HINT}")
    raise SchemaAheadError(f"database {where} is at schema revision {found}, which this "
                           f"grid_tasks does not know (its newest is {HEAD_REVISION}): a "
                           "newer grid_tasks migrated it; use that version")

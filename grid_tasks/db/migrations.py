"""Programmatic Alembic: upgrade, downgrade, current revision and drift check.

The migration scripts ship inside the package (``grid_tasks/db/alembic``) with
their own ``alembic.ini``, so nothing here depends on the working directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL

from .engine import make_engine, mask_url
from .errors import MigrationError
from .models import Base

ALEMBIC_INI = Path(__file__).with_name("alembic.ini")
# Serialises concurrent migrate() calls on one PostgreSQL database (any 64-bit key).
_PG_LOCK_KEY = 0x6772696474736B31


def alembic_config(connection: Connection | None = None) -> Config:
    """The packaged Alembic configuration, optionally bound to an open connection."""
    config = Config(str(ALEMBIC_INI))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@contextmanager
def _connection(target: str | URL | Engine, *, lock: bool = False) -> Iterator[Connection]:
    """A connection in one transaction, from a URL (temporary engine) or an engine."""
    engine = target if isinstance(target, Engine) else make_engine(target)
    try:
        with engine.begin() as conn:
            if lock:
                _lock_for_migration(conn)
            yield conn
    finally:
        if engine is not target:
            engine.dispose()


def _lock_for_migration(conn: Connection) -> None:
    """Serialise migrations, so daemons starting together all find the schema made once."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
    elif conn.dialect.name == "sqlite":
        # Take SQLite's write lock before alembic reads the version table; the
        # busy timeout makes the others wait for it instead of failing.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _run(target: str | URL | Engine, action: str, *args: Any) -> None:
    with _connection(target, lock=True) as conn:
        try:
            getattr(command, action)(alembic_config(conn), *args)
        except CommandError as err:
            where = mask_url(conn.engine.url)
            raise MigrationError(f"{action} of {where} failed: {err}") from None


def migrate(url: str | URL | Engine, revision: str = "head") -> str | None:
    """Upgrade the database at ``url`` to ``revision`` (default: the newest); idempotent.

    Returns the revision the database is at afterwards.
    """
    _run(url, "upgrade", revision)
    return current_revision(url)


def downgrade(url: str | URL | Engine, revision: str) -> str | None:
    """Downgrade to ``revision`` (``-1``, ``base`` or an id); returns the new revision."""
    _run(url, "downgrade", revision)
    return current_revision(url)


def current_revision(url: str | URL | Engine) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    with _connection(url) as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    """The newest revision shipped with this version of grid_tasks."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise MigrationError("no migrations shipped with grid_tasks")
    return head


def schema_drift(url: str | URL | Engine) -> list[str]:
    """Differences between the models and the database's actual schema (empty: none).

    This is what ``alembic check`` reports: a non-empty list after ``migrate``
    means a model changed without a migration.
    """
    with _connection(url) as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "target_metadata": Base.metadata}
        )
        diffs = compare_metadata(context, Base.metadata)
    return [_describe(diff) for diff in diffs]


def _describe(diff: Any) -> str:
    """A readable line for one autogenerate diff (a tuple, or a list of column changes)."""
    if isinstance(diff, list):
        return "; ".join(_describe(d) for d in diff)
    op, *rest = diff
    names = []
    for item in rest:
        name = getattr(item, "name", None)
        names.append(str(name) if name is not None else repr(item))
    return f"{op}: {', '.join(names)}"

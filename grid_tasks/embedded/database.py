"""The embedded stack's database: which URLs it runs on, and preparing one once.

``grid-tasks up`` runs on a SQLite file in its state dir, or on the PostgreSQL database
an operator names (``--database-url`` / ``GRID_TASKS_DATABASE_URL``).  Either way it
is migrated and the topology synced into it once, by the ``up`` process, before any
daemon starts; the daemons only read and write rows.
"""

from __future__ import annotations

from grid_tasks.errors import ConfigError
from grid_tasks.private_files import private_dir
from grid_tasks.settings import Settings
from grid_tasks.topology import GridTopology

#: Database URL schemes the stack runs on (``postgres://`` is PostgreSQL's own alias).
DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres")


def check_database_url(url: str) -> str:
    """``url`` if the stack can run on it; ConfigError naming the option otherwise
    (the message never repeats the URL: it may hold a password)."""
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme not in DATABASE_SCHEMES:
        raise ConfigError(f"not a SQLite or PostgreSQL URL (scheme {scheme or 'missing'!r}; "
                          "e.g. postgresql+psycopg://user@host/db)",
                          source="grid-tasks up --database-url", key="GRID_TASKS_DATABASE_URL")
    return url


def prepare_database(settings: Settings, topology: GridTopology) -> bool:
    """Migrate the database and sync the topology into it, if the db package is there."""
    try:
        from grid_tasks import db  # optional here: a build may leave the db package out
    except ImportError:
        return False
    private_dir(settings.state_dir)
    db.migrate(settings.database_url)
    factory = db.session_factory(db.get_engine(settings.database_url))
    with db.session_scope(factory) as session:
        db.sync_topology(session, topology)
    db.dispose_engines(settings.database_url)
    return True

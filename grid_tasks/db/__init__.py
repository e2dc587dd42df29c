"""Durable state of grid_tasks in SQL (SQLite by default, PostgreSQL in production).

Models are SQLAlchemy 2 typed declarative classes; the schema is managed by the
Alembic migrations shipped in this package (:func:`migrate`).  Engines are made
lazily per process (:func:`get_engine`), so forked Celery workers never share a
connection pool.  Typical use::

    from grid_tasks.db import get_engine, migrate, session_factory, session_scope
    migrate(url)
    factory = session_factory(get_engine(url))
    with session_scope(factory) as session:
        record_transition(session, job_id, JobState.ACTIVE, "started", at=now)

Concurrency: jobs and coallocated jobs carry an optimistic version counter, so
two sessions that read the same row and both write it cannot both win; the
loser gets :class:`ConcurrentUpdateError` and should reload and decide again.
``repository.get_job(..., for_update=True)`` adds a row lock on PostgreSQL for
callers that prefer to wait.  Domain times (``at``, ``when``) are always
arguments; the SQL layer reads the clock only for created/updated bookkeeping.

The migration functions (:mod:`grid_tasks.db.migrations`: ``migrate``,
``current_revision``, ...) are loaded on first use (PEP 562): Alembic costs an operator
command a fifth of a second to import, and commands that only read never migrate (they
check the revision with :func:`grid_tasks.db.schema.require_head`).
"""

from typing import Any

from . import repository
from .engine import default_url, dispose_engines, get_engine, make_engine, mask_url
from .engine import session_factory, session_scope
from .errors import (
    ConcurrentUpdateError,
    DatabaseError,
    InvalidTransitionError,
    MigrationError,
    RecordError,
)
from .models import (
    ACL_KEYS,
    AccountingRecord,
    BarrierState,
    Base,
    CoallocatedJob,
    Job,
    JobStateHistory,
    Node,
    Reservation,
    ReservationKind,
    ResourceManager,
    Subjob,
)
from .nodes import RESOURCE_KEYS, SyncReport, get_node, record_node_seen, sync_topology
from .schema import HEAD_REVISION, require_head
from .transitions import check_transition, record_transition

#: Names of :mod:`grid_tasks.db.migrations` this package hands out on first use.
_MIGRATIONS = ("current_revision", "downgrade", "head_revision", "migrate", "schema_drift")


def __getattr__(name: str) -> Any:
    """``migrate`` and its siblings, importing Alembic only when one is asked for."""
    if name in _MIGRATIONS:
        from . import migrations  # Alembic: only in processes that migrate

        return getattr(migrations, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ACL_KEYS",
    "AccountingRecord",
    "BarrierState",
    "Base",
    "CoallocatedJob",
    "ConcurrentUpdateError",
    "DatabaseError",
    "HEAD_REVISION",
    "InvalidTransitionError",
    "Job",
    "JobStateHistory",
    "MigrationError",
    "Node",
    "RESOURCE_KEYS",
    "RecordError",
    "Reservation",
    "ReservationKind",
    "ResourceManager",
    "Subjob",
    "SyncReport",
    "check_transition",
    "current_revision",
    "default_url",
    "dispose_engines",
    "downgrade",
    "get_engine",
    "get_node",
    "head_revision",
    "make_engine",
    "mask_url",
    "migrate",
    "record_node_seen",
    "record_transition",
    "repository",
    "require_head",
    "schema_drift",
    "session_factory",
    "session_scope",
]

"""The outside world of the operator commands: settings, SQL sessions, the heartbeat
registry and the Grid API, opened lazily and only when needed.

The operator commands only read SQL: every change they ask for (canceljob, setres,
releaseres) is sent to a gatekeeper, which writes it.  So they never migrate: they
check the schema revision with one query (:func:`~grid_tasks.db.schema.require_head`)
and refuse with :class:`~grid_tasks.db.errors.SchemaBehindError` when it is behind;
the processes that write (``grid-tasks up``, ``grid-tasks db upgrade``) migrate.  Each
command is a new process, so what it imports is part of its answer time: Alembic is
never imported here, and the Grid API (Celery, the broker) is loaded through the
package's lazy ``grid_tasks.Grid`` only by the commands that send.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

import grid_tasks
from grid_tasks.db import get_engine, require_head, session_factory, session_scope
from grid_tasks.db.errors import DatabaseError
from grid_tasks.errors import GridTasksError
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.ops.plan_cache import MAX_AGE, MAX_AGE_ENV, PlanCache, Plans
from grid_tasks.settings import Settings

#: Database URLs this process already found at the head revision.
_ready: set[str] = set()


def _max_age() -> float:
    """The plan digest's freshness bound: ``GRID_TASKS_OPS_PLAN_MAX_AGE`` or MAX_AGE."""
    text = os.environ.get(MAX_AGE_ENV, "").strip()
    try:
        return float(text) if text else MAX_AGE
    except ValueError:
        raise GridTasksError(f"{MAX_AGE_ENV}={text!r} is not a number of seconds") from None


class OpsShell:
    """One operator command's connections to a grid described by ``settings``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._grid: Any = None

    @staticmethod
    def now() -> datetime:
        """The present (the only clock read of the operator commands)."""
        return datetime.now(timezone.utc)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction on the grid's database (its schema revision checked first:
        SchemaBehindError when it is not the head)."""
        url = self.settings.database_url
        engine = get_engine(url)
        if url not in _ready:
            require_head(engine)  # one query; Alembic stays unloaded
            _ready.add(url)
        try:
            with session_scope(session_factory(engine)) as session:
                yield session
        except sa_exc.SQLAlchemyError as err:
            # Keep the promise of one typed line: a database fault is not a traceback.
            raise DatabaseError(f"database error: {' '.join(str(err).split())[:300]}") from None

    def registry(self) -> Any | None:
        """The node heartbeat registry, or None when Redis cannot be reached."""
        try:
            registry = NodeRegistry.from_settings(self.settings)  # TLS options too
            registry.client.ping()
        except (GridTasksError, RedisError, OSError):
            return None
        return registry

    def plans(self) -> Plans:
        """Where this command's RM plans come from: a fresh digest kept in the grid's
        Redis when there is one (:mod:`grid_tasks.ops.plan_cache`), else made anew.
        Node liveness comes from the same registry."""
        registry = self.registry()
        max_age = _max_age()
        if registry is None or max_age <= 0:
            return Plans(registry=registry)
        return Plans(PlanCache(registry.client, self.settings.database_url, max_age=max_age),
                     registry)

    def grid(self) -> Any:
        """The Python API (``grid_tasks.client.Grid``) on the same settings."""
        if self._grid is None:
            # The package's lazy public API: Celery and the broker load only here.
            self._grid = grid_tasks.Grid(self.settings)
        return self._grid

    def close(self) -> None:
        if self._grid is not None:
            self._grid.close()

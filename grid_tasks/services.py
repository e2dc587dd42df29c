"""The composition root: what one process builds once and hands down.

A :class:`Services` holds a process's settings, its database sessions, its Redis
client, its Celery app and its clock.  Workers make theirs at process start
(:func:`services_for`, from the worker's app, as arq builds ``ctx`` once per worker);
an application's :class:`~grid_tasks.client.Grid` makes one for itself.  Everything
below takes the pieces it needs as arguments (rq's explicit ``connection``), so no
layer builds a connection per call or imports a layer above it to get one.

Node daemons do not use this: they hold no database credentials, and their
composition root is :class:`~grid_tasks.gram.report.NodeContext`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

from celery import Celery, current_app
from celery.signals import worker_init, worker_process_init

from grid_tasks.celery_app import create_app
from grid_tasks.malloc import return_big_blocks
from grid_tasks.results import release_results
from grid_tasks.security.connections import redis_client
from grid_tasks.settings import Settings

T = TypeVar("T")


class Clock:
    """The wall clock, in one place: the pure core takes ``now`` as an argument, and
    what feeds it reads it here (a test may hand in another clock)."""

    def now(self) -> datetime:
        """The current time, aware UTC."""
        return datetime.now(timezone.utc)

    def time(self) -> float:
        """The current POSIX time in seconds."""
        return time.time()


class Services:
    """One process's settings, sessions, Redis, Celery app and clock, each made once on
    first use (constructing it never blocks or connects)."""

    def __init__(self, settings: Settings, *, app: Celery | None = None,
                 clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or Clock()
        self._app = app
        self._owns_app = app is None
        self._sessions: Any = None
        self._redis: Any = None
        self._lock = threading.Lock()

    @property
    def sessions(self) -> Any:
        """The sessionmaker of the grid's database (its engine made on first use)."""
        if self._sessions is None:
            with self._lock:
                if self._sessions is None:
                    # SQLAlchemy is loaded only by processes that use the database: an
                    # application that submits and follows jobs never needs it.
                    from grid_tasks.db import get_engine, session_factory

                    self._sessions = session_factory(get_engine(self.settings.database_url))
        return self._sessions

    @property
    def redis(self) -> Any:
        """The Redis client of the grid's coordination store (rediss:// gets TLS)."""
        if self._redis is None:
            with self._lock:
                if self._redis is None:
                    self._redis = redis_client(self.settings)
        return self._redis

    @property
    def app(self) -> Celery:
        """The Celery app: the worker's own, or one made for these settings."""
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = create_app(self.settings)
        return self._app

    def close(self) -> None:
        """Release the Redis connections and the Celery app made here (a worker's own
        app is the worker's to close)."""
        if self._app is not None and self._owns_app:
            release_results(self._app)  # before the Redis may stop (no noise from __del__)
        if self._redis is not None:
            self._redis.close()
        if self._app is not None and self._owns_app:
            self._app.close()


_made: dict[tuple[int, int, str], Any] = {}
_made_lock = threading.RLock()  # re-entrant: one thing's factory may ask for another


def per_process(app: Any, kind: str, make: Callable[[], T]) -> T:
    """The ``kind`` object of this process and ``app``, made by ``make`` on first use
    (a forked child makes its own: connections never cross a fork)."""
    key = (os.getpid(), id(app), kind)
    with _made_lock:
        if key not in _made:
            _made[key] = make()
        return _made[key]  # type: ignore[no-any-return]


def services_for(app: Celery) -> Services:
    """This process's Services on the worker's ``app`` and its settings."""
    def make() -> Services:
        settings = getattr(app, "grid_settings", None) or Settings.from_env()
        return Services(settings, app=app)

    return per_process(app, "services", make)


def _at_worker_start(sender: Any = None, **_: Any) -> None:
    """Make the worker's Services as it starts (the main process of a solo or threads
    pool, each child of a prefork one), not inside its first task; big blocks freed go
    back to the system (:func:`~grid_tasks.malloc.return_big_blocks`)."""
    return_big_blocks()
    app = getattr(sender, "app", None)
    if app is None:  # worker_process_init has no sender: the child's current app
        app = current_app._get_current_object()
    if getattr(app, "grid_settings", None) is not None:
        services_for(app)


worker_init.connect(_at_worker_start, weak=False, dispatch_uid="grid_tasks.services")
worker_process_init.connect(_at_worker_start, weak=False,
                            dispatch_uid="grid_tasks.services.child")

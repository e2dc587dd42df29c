"""What the concrete scheduler modules need from the outside world, passed in explicitly.

The pure core builds modules listed by name in ``maui.cfg`` with no arguments
(:func:`grid_tasks.maui.modules.build_modules` calls ``cls()``).  Those instances take
the *current* context: the one set by :func:`use_context` (a ``with`` block, per
thread/task), else the one set by :func:`set_default_context`, else one built lazily
from the environment (:meth:`ModuleContext.from_settings` on ``Settings.from_env()``).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.backoff import NoBackoff
from redis.retry import Retry

from grid_tasks.db import get_engine, session_factory
from grid_tasks.maui.cfg import parse_maui_config
from grid_tasks.security.connections import redis_client
from grid_tasks.settings import Settings

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.cfg import MauiConfig


@dataclass(frozen=True)
class ProfilerThresholds:
    """When the system profiler warns (before trouble) and when it calls it critical.

    A disk is reported when its free space falls below either the percentage or the
    megabytes; a service when its ping is slower than the given milliseconds (warning)
    or gets no answer within ``timeout_s`` (critical).
    """

    warn_free_percent: float = 10.0
    warn_free_mb: float = 1024.0
    critical_free_percent: float = 2.0
    critical_free_mb: float = 100.0
    broker_slow_ms: float = 250.0
    database_slow_ms: float = 500.0
    timeout_s: float = 2.0
    #: seconds between two profiles (iterations in between reuse the last report)
    every_s: float = 60.0


@dataclass(frozen=True)
class ModuleContext:
    """Paths, connections and clock the modules use; nothing is looked up behind your back.

    ``sessions`` is a SQLAlchemy session factory (job checker, database health);
    ``session``, when given, is a session already open (the live iteration's): the job
    checker then works inside it and the caller commits -- on SQLite a second writer
    would wait for the first.  ``redis`` is any client with ``ping()`` (broker health).  ``rm`` restricts the job
    checker to one resource manager (None: all).  ``config`` is the ``maui.cfg`` the
    modules read their parameters from when built by name (None: Maui's defaults).
    Relative ``LOGDIR`` values resolve against ``state_dir``; ``log_dir`` overrides.
    """

    state_dir: Path = Path(".")
    rm: str | None = None
    sessions: Callable[[], Any] | None = None
    session: Any = None
    redis: Any = None
    config: "MauiConfig | None" = None
    log_dir: Path | None = None
    loggers: tuple[str, ...] = ("grid_tasks",)
    thresholds: ProfilerThresholds = field(default_factory=ProfilerThresholds)
    clock: Callable[[], float] = time.time

    @classmethod
    def from_settings(cls, settings: "Settings", *, rm: str | None = None,
                      config: "MauiConfig | None" = None,
                      thresholds: ProfilerThresholds | None = None) -> "ModuleContext":
        """A context on ``settings``: its state dir, database and Redis (short timeouts)."""
        limits = thresholds or ProfilerThresholds()
        # the one builder: ACL user from the URL, TLS options for rediss://
        client = redis_client(
            settings, settings.redis_url, socket_timeout=limits.timeout_s,
            socket_connect_timeout=limits.timeout_s,
            retry=Retry(NoBackoff(), 0))  # a health probe reports, it does not insist
        return cls(state_dir=Path(settings.state_dir), rm=rm,
                   sessions=session_factory(get_engine(settings.database_url)),
                   redis=client, config=config, thresholds=limits)

    def maui_config(self) -> "MauiConfig":
        """The maui.cfg in force: the given one, else Maui's defaults."""
        if self.config is not None:
            return self.config

        return parse_maui_config("", source="<defaults>")


_current: contextvars.ContextVar[ModuleContext | None] = contextvars.ContextVar(
    "grid_tasks_module_context", default=None)
_default: ModuleContext | None = None
_default_lock = threading.Lock()


def set_default_context(context: ModuleContext | None) -> None:
    """The context modules built by name use when no :func:`use_context` block is active."""
    global _default
    with _default_lock:
        _default = context


@contextmanager
def use_context(context: ModuleContext) -> Iterator[ModuleContext]:
    """Within the block (this thread / task only), modules built by name use ``context``."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def current_context() -> ModuleContext:
    """The active context: :func:`use_context`, else the default, else from the environment."""
    active = _current.get()
    if active is not None:
        return active
    global _default
    with _default_lock:
        if _default is None:
            _default = ModuleContext.from_settings(Settings.from_env())
        return _default

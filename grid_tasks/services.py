"""What a worker process builds once and hands to its tasks: its :class:`Grid`.

A task must not build connections per call (an engine, a Redis pool, an app):
:func:`grid_for` gives every task of one worker process the same ``Grid`` on the
worker's own app and settings, made on first use (as arq builds ``ctx`` once per
worker).  This module sits on top with the task modules: it may import the client.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from grid_tasks.client import Grid
from grid_tasks.settings import Settings

T = TypeVar("T")
_made: dict[tuple[int, int, str], Any] = {}
_lock = threading.RLock()  # re-entrant: one thing's factory may ask for another


def per_process(app: Any, kind: str, make: Callable[[], T]) -> T:
    """The ``kind`` object of this process and ``app``, made by ``make`` on first use."""
    key = (os.getpid(), id(app), kind)
    with _lock:
        if key not in _made:
            _made[key] = make()
        return _made[key]  # type: ignore[no-any-return]


def grid_for(app: Any) -> Grid:
    """This process's Grid on ``app``'s settings, sharing ``app`` (never closed)."""
    def make() -> Grid:
        settings = getattr(app, "grid_settings", None) or Settings.from_env()
        grid = Grid(settings)
        grid._app = app  # reuse the worker's app for iteration triggers
        return grid

    return per_process(app, "grid", make)

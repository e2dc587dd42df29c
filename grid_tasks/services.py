"""What a worker process builds once and hands to its tasks: its :class:`Grid`.

A task must not build connections per call (an engine, a Redis pool, an app):
:func:`grid_for` gives every task of one worker process the same ``Grid`` on the
worker's own app and settings, made on first use (as arq builds ``ctx`` once per
worker).  This module sits on top with the task modules: it may import the client.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from grid_tasks.client import Grid
from grid_tasks.settings import Settings

_grids: dict[tuple[int, int], Grid] = {}
_lock = threading.Lock()


def grid_for(app: Any) -> Grid:
    """This process's Grid on ``app``'s settings, sharing ``app`` (never closed)."""
    key = (os.getpid(), id(app))
    with _lock:
        found = _grids.get(key)
        if found is None:
            settings = getattr(app, "grid_settings", None) or Settings.from_env()
            found = _grids[key] = Grid(settings)
            found._app = app  # reuse the worker's app for iteration triggers
        return found

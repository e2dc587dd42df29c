"""Typed errors of the security layer (all :class:`GridTasksError`)."""

from __future__ import annotations

from grid_tasks.errors import GridTasksError, SourceError


class Unauthorized(GridTasksError):
    """A submitting identity has no local account on a resource manager."""

    # Defaults keep it rebuildable from its message alone (Celery's result backend does so).
    def __init__(self, message: str, *, identity: str = "", rm: str = "") -> None:
        self.identity = identity
        self.rm = rm
        super().__init__(message)


class GridMapError(SourceError):
    """A grid map file is malformed; carries the line and column."""


class AccountError(GridTasksError):
    """A mapped local account cannot be used on this host (unknown, root, ...)."""


class RunAsRefused(AccountError):
    """The worker cannot start processes as the mapped account (it is not root)."""


class KeyMaterialError(GridTasksError):
    """A key, certificate or certificate store is missing, unreadable or invalid."""

"""The MIL error type."""

from __future__ import annotations

from grid_tasks.errors import SourceError


class MILError(SourceError):
    """A MIL query that cannot be read or compiled; carries line and column."""

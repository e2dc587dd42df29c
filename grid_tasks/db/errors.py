"""Typed errors of the SQL layer."""

from __future__ import annotations

from grid_tasks.errors import GridTasksError


class DatabaseError(GridTasksError):
    """Root of the SQL layer's own errors."""


class ConcurrentUpdateError(DatabaseError):
    """Another session changed the same row first (optimistic version check failed).

    The caller should reload the row and decide again; nothing was written.
    """


class InvalidTransitionError(DatabaseError):
    """A job state change that the GRAM state machine does not allow."""


class RecordError(DatabaseError):
    """A value that cannot be stored: negative resources, unknown fields."""


class MigrationError(DatabaseError):
    """The schema could not be brought to, or is not at, the expected revision."""


class SchemaBehindError(MigrationError):
    """The database's schema is older than this grid_tasks (or was never created).

    Read-only commands do not migrate: the operator runs ``grid-tasks db upgrade``
    (or any command that writes) and asks again.
    """


class SchemaAheadError(MigrationError):
    """The database's schema revision is one this grid_tasks does not know: a newer
    version of grid_tasks migrated it."""

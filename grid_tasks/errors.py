"""The one exception root of grid_tasks and the errors shared across packages.

Every error raised on purpose derives from :class:`GridTasksError`.  Errors about a
piece of text (RSL, MIL, maui.cfg, grid.toml, SWF traces) derive from
:class:`SourceError`, which knows where the problem is and can draw a caret under it.
Packages define their own specific subclasses next to their code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class GridTasksError(Exception):
    """Root of every error grid_tasks raises on purpose."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description, used by ``--json`` outputs."""
        return {"type": type(self).__name__, "message": str(self)}


@dataclass(frozen=True)
class Location:
    """Where in a source something is: 1-based line and column."""

    source: str = "<string>"
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        parts = [self.source]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)


class SourceError(GridTasksError):
    """An error located in a text: file (or ``<string>``), line, column.

    ``code`` is an optional machine-readable name (for RSL, the GRAM protocol
    error suffix such as ``INVALID_COUNT``); ``key`` names the offending
    attribute, parameter or configuration key when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str = "<string>",
        line: int | None = None,
        column: int | None = None,
        code: str | None = None,
        key: str | None = None,
        text: str | None = None,
    ) -> None:
        self.message = message
        self.location = Location(source, line, column)
        self.code = code
        self.key = key
        self.text = text  # the whole source text, when known, for the caret display
        super().__init__(self._one_line())

    @property
    def source(self) -> str:
        return self.location.source

    @property
    def line(self) -> int | None:
        return self.location.line

    @property
    def column(self) -> int | None:
        return self.location.column

    def _one_line(self) -> str:
        where = str(self.location)
        code = f"{self.code}: " if self.code else ""
        key = f" (key {self.key!r})" if self.key else ""
        return f"{where}: {code}{self.message}{key}"

    def caret(self) -> str:
        """The offending source line with a caret under the column, or ''."""
        if self.text is None or self.line is None:
            return ""
        lines = self.text.splitlines()
        if not 1 <= self.line <= len(lines):
            return ""
        src = lines[self.line - 1]
        col = max(1, self.column or 1)
        return f"{src}\n{' ' * (col - 1)}^"

    def pretty(self) -> str:
        """One line of explanation, then the caret display when available."""
        caret = self.caret()
        return f"{self}\n{caret}" if caret else str(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": type(self).__name__,
            "code": self.code,
            "message": self.message,
            "source": self.location.source,
            "line": self.location.line,
            "column": self.location.column,
            "key": self.key,
        }


class ConfigError(SourceError):
    """A configuration file or setting is malformed (grid.toml, settings)."""


class ConnectivityError(GridTasksError):
    """A required service (broker, result backend, Redis, database) is unreachable."""


class StorageUnavailable(ConnectivityError):
    """The grid's database cannot serve a request now (down, unreachable, disk full).

    ``database`` is its URL without the password, ``cause`` the driver's one-line
    reason.  Nothing of the request was stored (its transaction rolled back); a retry
    after the database is back is safe."""

    def __init__(self, database: str, cause: str, *, message: str | None = None) -> None:
        self.database, self.cause = database, cause
        super().__init__(message or f"database {database} unavailable: {cause}")

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "database": self.database, "cause": self.cause}


class NotFoundError(GridTasksError):
    """A named thing (resource manager, node, job, reservation) does not exist."""

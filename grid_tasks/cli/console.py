"""The rich Console every command prints its tables with.

Rich lays a table out for 80 columns when its output is not a terminal, so a piped
``showq | grep strict`` would read ``stric…``.  Piped or redirected, lines are as long
as their content instead (unless COLUMNS says otherwise, as rich honours it).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console

__all__ = ["PIPE_WIDTH", "wide_console"]

#: The width when not printing to a terminal: wide enough that nothing is cut.
PIPE_WIDTH = 10_000


def wide_console(*, stderr: bool = False, minimum: int = 0, **options: Any) -> Console:
    """A Console on stdout (or stderr) that never cuts a table when piped; on a terminal
    its width, but at least ``minimum`` columns."""
    stream = sys.stderr if stderr else sys.stdout
    width: int | None = None
    if "COLUMNS" not in os.environ and not _is_tty(stream):
        width = PIPE_WIDTH
    elif minimum:
        width = max(Console(stderr=stderr).width, minimum)
    return Console(stderr=stderr, width=width, **options)


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or unusual stream: not a terminal
        return False

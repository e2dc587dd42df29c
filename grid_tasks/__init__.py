"""grid_tasks: coallocated parallel jobs across clusters on Celery, Redis and SQL.

The public surface is deliberately narrow::

    from grid_tasks import Grid, JobHandle, JobStatus, GridTasksError
"""

from typing import Any

from grid_tasks.errors import GridTasksError

__all__ = ["Grid", "GridTasksError", "JobHandle", "JobStatus"]
__version__ = "0.1.0"

_LAZY = {"Grid", "JobHandle", "JobStatus"}


def __getattr__(name: str) -> Any:
    # The client pulls in SQLAlchemy and redis: import it only when asked for.
    if name in _LAZY:
        from grid_tasks import client

        return getattr(client, name)
    raise AttributeError(f"module 'grid_tasks' has no attribute {name!r}")

"""The RM's refusal of a grid reservation, in a module light enough to import anywhere.

Celery rebuilds a task's exception in the caller only from a module the caller has
already imported: every broker imports this through :mod:`grid_tasks.broker.remote`
(an application's too), without SQLAlchemy or the RM side
(:mod:`grid_tasks.scheduling.rm_service`).
"""

from __future__ import annotations

from typing import Any

from grid_tasks.errors import GridTasksError


class ReservationRefused(GridTasksError):
    """An RM refused a grid reservation (or its release); ``reason`` names why in one
    word (``busy``, ``unknown_node``, ``taken``, ``bad_request``, ``past``, ``not_grid``,
    ``unavailable``: a Slurm controller that did not answer).

    ``args`` is ``(message, reason)`` so the exception survives Celery's JSON result
    backend: ``AsyncResult.get()`` raises this type again in the client.
    """

    def __init__(self, message: str, reason: str = "refused") -> None:
        super().__init__(message, reason)
        self.message, self.reason = message, reason

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "message": self.message, "reason": self.reason}

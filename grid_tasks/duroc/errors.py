"""Typed errors of the DUROC control side (job request, add/delete, release, cancel)."""

from __future__ import annotations

from grid_tasks.errors import GridTasksError


class CoallocError(GridTasksError):
    """Root of the control-side errors of coallocated jobs."""


class CoallocRequestError(CoallocError):
    """The multi-request cannot become a coallocated job (duplicate labels, bad RM...)."""


class CoallocFinishedError(CoallocError):
    """The coallocated job has ended (or was cancelled): nothing to change any more."""


class SubjobFailedError(CoallocError):
    """A subjob could not start, or ended before entering the barrier."""

    def __init__(self, message: str, *, label: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.label, self.reason = label, reason


class BarrierDeadlineError(CoallocError):
    """The barrier was not complete before the job's barrier timeout."""

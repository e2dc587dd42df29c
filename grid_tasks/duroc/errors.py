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


def ended_outside_barrier(state: str, exit_code: int | None) -> str:
    """Why a barrier subjob whose processes ended by themselves failed: most often a
    plain program (``/bin/hostname``) that never calls the barrier; say so and how."""
    return (f"its processes ended ({state}, exit code {exit_code}) without entering the "
            "barrier: a barrier subjob's program calls runtime.barrier() or `grid-tasks "
            "runtime barrier` first (or give the component (subjobStartType=no-barrier))")

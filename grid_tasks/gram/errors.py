"""Typed errors of the GRAM layer; ``code`` is a GRAM protocol error name where one fits."""

from __future__ import annotations

from grid_tasks.errors import GridTasksError


class GramJobError(GridTasksError):
    """A GRAM request refused; ``code`` names the GRAM error (``GramError`` value)."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def number(self) -> int | None:
        """The GLOBUS_GRAM_PROTOCOL_ERROR number of ``code``."""
        # (imported here: node daemons import these errors, and the rsl package loads
        # its parser and lark, which a node never needs)
        from grid_tasks.rsl import GramError

        return GramError(self.code).number if self.code else None


class JobRefusedError(GramJobError):
    """Submission refused before the job was stored (e.g. the job can never run)."""


def check_rm_contact(rm: str | None, contact: str | None) -> None:
    """Refuse a request sent to ``rm`` whose RSL names another resourceManagerContact:
    running it on either would silently ignore what the user asked for."""
    if rm and contact and rm != contact:
        raise JobRefusedError(f"the request names resourceManagerContact={contact} but was "
                              f"sent to {rm}: drop one, or make them agree",
                              code="INVALID_REQUEST")


class JobFinishedError(GramJobError):
    """The job is DONE or FAILED already (cancel of a finished job)."""


class WaitTimeoutError(GridTasksError):
    """``JobHandle.wait(timeout)`` ran out of time; ``status`` is the last state seen."""

    def __init__(self, message: str, status: object = None) -> None:
        super().__init__(message)
        self.status = status


class LaunchError(GramJobError):
    """A host-side launch failure (EXECUTABLE_NOT_FOUND, BAD_DIRECTORY, ...)."""

"""Typed errors of the Slurm resource manager; each carries the GRAM error a job manager
in front of Slurm (GRAM's jobmanager-slurm) would report."""

from __future__ import annotations

from grid_tasks.gram.errors import GramJobError


class SlurmError(GramJobError):
    """A Slurm RM request failed; ``code`` names the GRAM error."""


class SlurmUntranslatable(SlurmError):
    """The RSL asks for something Slurm cannot be told (refused before any command runs)."""


class SlurmUnavailable(SlurmError):
    """slurmctld did not answer (down, unreachable, or the command timed out): nothing
    was submitted, a retry once it is back is safe."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="CONNECTION_FAILED")


class SlurmRefused(SlurmError):
    """Slurm answered and refused the request (sbatch, scontrol or scancel error)."""


class ReservationInUse(SlurmRefused):
    """Slurm keeps a reservation while a job runs in it: release again once it ended."""

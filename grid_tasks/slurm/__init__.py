"""Slurm clusters as grid_tasks resource managers (issue 24): the RSL's translation to a
batch job, Slurm's answers read into typed values, and its client commands run as the
mapped account.  Pure parts (:mod:`.translate`, :mod:`.parse`) never run a command."""

from grid_tasks.slurm.client import SlurmClient
from grid_tasks.slurm.errors import SlurmError, SlurmRefused, SlurmUnavailable, SlurmUntranslatable
from grid_tasks.slurm.parse import Estimate, SlurmJob
from grid_tasks.slurm.translate import BatchJob, batch_job

__all__ = ["BatchJob", "Estimate", "SlurmClient", "SlurmError", "SlurmJob", "SlurmRefused",
           "SlurmUnavailable", "SlurmUntranslatable", "batch_job"]

"""A showstart request given as a single-job RSL: apart from :mod:`grid_tasks.ops.plan`
so that the RSL parser and validator load only for such a request (``showstart JOB``
is a new process that never needs them)."""

from __future__ import annotations

from grid_tasks.maui import Job
from grid_tasks.rsl import lower

from .plan import DEFAULT_WALLTIME
from .timefmt import OpsError


def rsl_request(text: str) -> Job:
    """A showstart request from a single-job RSL (count, maxWallTime, minMemory)."""
    subjobs = lower(text, source="<showstart>")
    if len(subjobs) != 1:
        raise OpsError(f"showstart takes a single-job RSL, got a multi-request of "
                       f"{len(subjobs)} subjobs (ask each RM separately)")
    sub = subjobs[0]
    walltime = sub.max_wall_time_s or sub.max_time_s or DEFAULT_WALLTIME
    return Job(id="showstart", tasks=max(1, sub.count or 1), walltime=float(walltime),
               mem_per_task=int(sub.min_memory_mb or 0))

"""RSL subjob → Slurm batch job: the sbatch options and the batch script (pure).

What GRAM's batch job managers do for PBS or LSF, for Slurm: ``count`` processes
(``jobType=multiple``, started by ``srun``), one process on ``count`` processors
(``single``), or an MPI launch (``mpi``, ``srun`` with Slurm's MPI plugin);
``maxWallTime`` (or ``maxTime``) in whole minutes, ``hostCount`` as nodes, ``queue`` as
the partition, ``project`` as the account, ``maxMemory`` per process, the directory and
the standard streams.  The environment is sbatch's own (``--export=ALL`` of an
environment built here, never the gatekeeper's): the job sees the variables the job
manager defines, the RSL's on top, and Slurm's, as a GRAM job does.  Nothing of it is on
sbatch's argument list, which other accounts can read.  A job is never requeued by
Slurm (``--no-requeue``): a GRAM job runs once, and one killed by a node failure is the
job's failure with that reason (NODE_FAIL), not a second run of its processes.

A request Slurm cannot honour is refused here with the GRAM error its attribute has
(``maxCpuTime``: Slurm has no per-job CPU limit to ask for), so nothing reaches Slurm
that would run differently from what was asked.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from grid_tasks.rsl.lower import SubjobRequest
from grid_tasks.slurm.errors import SlurmUntranslatable

#: Attributes Slurm has no counterpart for, with the GRAM error that refuses them.
UNSUPPORTED = {"max_cpu_time_s": ("maxCpuTime", "INVALID_MAX_CPU_TIME")}
JOB_TYPES = ("single", "multiple", "mpi")


#: The search path of a job whose RSL sets none (GRAM's batch job managers give one too).
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class BatchJob:
    """What to hand to ``sbatch``: options (argv after the command), the script on its
    stdin, and the environment to run it in (which the job inherits)."""

    options: tuple[str, ...]
    script: str
    environment: dict[str, str]


def minutes(seconds: int) -> int:
    """Slurm's time limits are whole minutes: round up, never below one."""
    return max(1, math.ceil(seconds / 60))


def batch_job(req: SubjobRequest, *, name: str, partition: str | None = None,
              account: str | None = None, output: str, error: str,
              environment: dict[str, str] | None = None,
              reservation: str | None = None, srun: str = "srun") -> BatchJob:
    """The sbatch options and script for ``req``.

    ``output``/``error`` are where the job's streams go when the RSL names none (the
    RM keeps them for ``grid-tasks output``); ``environment`` is what the job manager
    defines (HOME, LOGNAME, GLOBUS_*), below the RSL's own ``environment``; ``srun`` the
    launcher's path on the compute nodes."""
    _refuse_untranslatable(req)
    opts = [f"--job-name={name}", "--export=ALL", "--parsable", "--no-requeue"]
    if req.job_type == "single":
        opts += ["--ntasks=1", f"--cpus-per-task={req.count}"]
    else:
        opts.append(f"--ntasks={req.count}")
    if req.host_count is not None:
        opts.append(f"--nodes={req.host_count}")
    walltime = req.max_wall_time_s if req.max_wall_time_s is not None else req.max_time_s
    if walltime is not None:
        opts.append(f"--time={minutes(walltime)}")
    chosen = req.queue or partition
    if chosen:
        opts.append(f"--partition={chosen}")
    if req.project or account:
        opts.append(f"--account={req.project or account}")
    if req.max_memory_mb is not None:
        opts.append(f"--mem-per-cpu={req.max_memory_mb}")
    elif req.min_memory_mb is not None:
        opts.append(f"--mem-per-cpu={req.min_memory_mb}")
    if req.directory:
        opts.append(f"--chdir={req.directory}")
    opts += [f"--input={req.stdin or '/dev/null'}", f"--output={req.stdout or output}",
             f"--error={req.stderr or error}"]
    if reservation:
        opts.append(f"--reservation={reservation}")
    env = {"PATH": DEFAULT_PATH, **(environment or {}), **req.environment}
    return BatchJob(tuple(opts), script(req, srun), env)


def _refuse_untranslatable(req: SubjobRequest) -> None:
    for field_name, (attribute, code) in UNSUPPORTED.items():
        if getattr(req, field_name) is not None:
            raise SlurmUntranslatable(f"{attribute} cannot be enforced by Slurm (it has no "
                                      "per-job CPU time limit); use maxWallTime", code=code)
    if req.job_type not in JOB_TYPES:
        raise SlurmUntranslatable(f"jobType {req.job_type} is not supported by the Slurm RM "
                                  f"(use one of {', '.join(JOB_TYPES)})",
                                  code="JOBTYPE_NOT_SUPPORTED")
    if req.job_type == "single" and req.host_count not in (None, 1):
        raise SlurmUntranslatable("jobType single runs one process: hostCount must be 1",
                                  code="INVALID_HOST_COUNT")


#: A shell between srun and each task's program gives the task its place as a native
#: job manager does (``GRID_TASKS_RANK``, ``GRID_TASKS_SIZE``: what DUROC's runtime
#: library and job scripts read): srun numbers the tasks, a batch script cannot.
TASK_PLACE = ("/bin/sh -c 'GRID_TASKS_RANK=$SLURM_PROCID GRID_TASKS_SIZE=$SLURM_NTASKS "
              "exec \"$@\"' grid-tasks-task")


def script(req: SubjobRequest, srun: str = "srun") -> str:
    """The batch script: the launch, ``exec``'d so that its exit code is the job's."""
    command = " ".join(shlex.quote(part) for part in (req.executable, *req.arguments))
    launcher = shlex.quote(srun)
    if req.job_type == "single":  # one process holding count CPUs (as natively)
        launch = f"export GRID_TASKS_RANK=0 GRID_TASKS_SIZE=1\nexec {command}"
    elif req.job_type == "mpi":
        launch = f"exec {launcher} --mpi=\"${{SLURM_MPI_TYPE:-pmi2}}\" {TASK_PLACE} {command}"
    else:
        launch = f"exec {launcher} --kill-on-bad-exit=0 {TASK_PLACE} {command}"
    return f"#!/bin/sh\n{launch}\n"

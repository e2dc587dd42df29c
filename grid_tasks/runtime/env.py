"""The environment a coallocated job's process learns its place from.

Set by the control side (through the GRAM launcher's ``extra_env``) and by the
job manager; see :mod:`grid_tasks.runtime` for the table.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from grid_tasks.duroc.store_errors import RuntimeEnvironmentError
from grid_tasks.duroc.store_keys import JOB_ID_RE

RUNTIME_URL = "GRID_TASKS_RUNTIME_URL"
COALLOC_ID = "GRID_TASKS_COALLOC_ID"
SUBJOB_INDEX = "GRID_TASKS_SUBJOB_INDEX"
SUBJOB_LABEL = "GRID_TASKS_SUBJOB_LABEL"
RANK = "GRID_TASKS_RANK"
SIZE = "GRID_TASKS_SIZE"
BARRIER_TIMEOUT = "GRID_TASKS_BARRIER_TIMEOUT"
RECEIVE_TIMEOUT = "GRID_TASKS_RECEIVE_TIMEOUT"
TLS_PREFIX = "GRID_TASKS_REDIS_TLS_"
#: Under Slurm each task learns its rank and the task count from ``srun`` (a batch job
#: script cannot set a variable per task): used when the job manager's are absent.
SLURM_RANK = "SLURM_PROCID"
SLURM_SIZE = "SLURM_NTASKS"


@dataclass(frozen=True)
class RuntimeEnv:
    """One process's identity in a coallocated job, and its default timeouts."""

    url: str
    job: str
    subjob: int
    rank: int
    size: int
    label: str = ""
    barrier_timeout: float | None = None
    receive_timeout: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise RuntimeEnvironmentError(
                RANK, f"rank {self.rank} is outside the subjob of {self.size} processes")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "RuntimeEnv":
        """Read the variables; :class:`RuntimeEnvironmentError` names any bad one."""
        env = os.environ if environ is None else environ
        url = _required(env, RUNTIME_URL)
        if "://" not in url:
            raise RuntimeEnvironmentError(RUNTIME_URL, f"not a Redis URL: {url!r}")
        job = _required(env, COALLOC_ID)
        if not JOB_ID_RE.fullmatch(job):
            raise RuntimeEnvironmentError(COALLOC_ID, f"invalid coallocated job id {job!r}")
        return cls(url=url, job=job, subjob=_integer(env, SUBJOB_INDEX, 0),
                   rank=_integer(env, _named(env, RANK, SLURM_RANK), 0),
                   size=_integer(env, _named(env, SIZE, SLURM_SIZE), 1),
                   label=env.get(SUBJOB_LABEL, ""),
                   barrier_timeout=_seconds(env, BARRIER_TIMEOUT),
                   receive_timeout=_seconds(env, RECEIVE_TIMEOUT))


def runtime_environment(url: str, job: str, subjob: int, label: str, *,
                        barrier_timeout: float | None = None,
                        tls_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables the control side passes to a subjob's processes (``extra_env``).

    The job manager adds ``GRID_TASKS_RANK`` and ``GRID_TASKS_SIZE`` per process
    (and drops the host's ``GRID_TASKS_*``): for a ``rediss://`` URL pass the
    control side's environment as ``tls_env`` to forward its
    ``GRID_TASKS_REDIS_TLS_*`` variables.
    """
    env = {RUNTIME_URL: url, COALLOC_ID: job, SUBJOB_INDEX: str(subjob), SUBJOB_LABEL: label}
    if barrier_timeout is not None:
        env[BARRIER_TIMEOUT] = repr(float(barrier_timeout))
    if tls_env is not None and url.lower().startswith("rediss://"):
        env.update({k: v for k, v in tls_env.items() if k.startswith(TLS_PREFIX)})
    return env


def _named(env: Mapping[str, str], ours: str, slurms: str) -> str:
    """``ours`` when set (a native job manager's, or the RSL's), else Slurm's ``slurms``
    when the process runs in a Slurm job; errors then name the variable read."""
    if env.get(ours, "").strip() or not env.get(slurms, "").strip():
        return ours
    return slurms


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise RuntimeEnvironmentError(
            name, f"{name} is not set: this process was not started as part of a "
                  "coallocated job")
    return value


def _integer(env: Mapping[str, str], name: str, minimum: int) -> int:
    raw = _required(env, name)
    try:
        value = int(raw)
    except ValueError:
        raise RuntimeEnvironmentError(name, f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise RuntimeEnvironmentError(name, f"{name}={value} must be at least {minimum}")
    return value


def _seconds(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RuntimeEnvironmentError(name, f"{name}={raw!r} is not a number of seconds") \
            from None
    if not math.isfinite(value) or value <= 0:
        raise RuntimeEnvironmentError(name, f"{name}={raw!r} must be positive seconds")
    return value

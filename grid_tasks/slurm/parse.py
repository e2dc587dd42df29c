"""What Slurm's client commands print, read into typed values (pure: no commands run).

Slurm 22.05 answers an estimate (``sbatch --test-only``) only as text on stderr, and
states through ``squeue --json``.  Times Slurm prints are the controller's local time
without a zone: they are read as this host's local time (the Slurm RM runs beside the
cluster's client commands, which print in the same zone).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from grid_tasks.slurm.errors import ReservationInUse, SlurmRefused, SlurmUnavailable
from grid_tasks.states import JobState

_TEST_ONLY = re.compile(
    r"Job (?P<job>\d+) to start at (?P<start>\S+) using (?P<procs>\d+) processors on nodes "
    r"(?P<nodes>\S+) in partition (?P<partition>\S+)")

#: sbatch/scontrol refusals → the GRAM error a job manager reports for them
_REFUSALS = (
    ("invalid partition", "INVALID_QUEUE"),
    ("invalid account", "INVALID_PROJECT"),
    ("time limit", "INVALID_MAX_WALL_TIME"),
    ("node configuration is not available", "NO_RESOURCES"),
    ("more processors requested than permitted", "NO_RESOURCES"),
    ("memory specification", "INVALID_MAX_MEMORY"),
    ("reservation", "RSL_RESERVATION_HANDLE"),
    ("access denied", "AUTHORIZATION"),
)
_UNREACHABLE = ("unable to contact slurm controller", "connection refused",
                "socket timed out", "zero bytes were transmitted")

#: Slurm job states → GRAM states (anything not listed is treated as still pending)
GRAM_STATES = {
    "PENDING": JobState.PENDING, "REQUEUED": JobState.PENDING, "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "CONFIGURING": JobState.ACTIVE, "RUNNING": JobState.ACTIVE, "COMPLETING": JobState.ACTIVE,
    "STAGE_OUT": JobState.ACTIVE, "SIGNALING": JobState.ACTIVE, "RESIZING": JobState.ACTIVE,
    "SUSPENDED": JobState.SUSPENDED, "STOPPED": JobState.SUSPENDED,
    "COMPLETED": JobState.DONE,
    "FAILED": JobState.FAILED, "CANCELLED": JobState.FAILED, "TIMEOUT": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED, "PREEMPTED": JobState.FAILED, "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.FAILED, "OUT_OF_MEMORY": JobState.FAILED, "REVOKED": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
}


@dataclass(frozen=True)
class Estimate:
    """``sbatch --test-only``'s answer: when and where the job would start."""

    job_id: int  # the id the test used up
    start: datetime  # aware (UTC)
    procs: int
    nodes: str
    partition: str


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue --json`` shows it."""

    job_id: int
    slurm_state: str
    reason: str
    exit_code: int | None  # the batch script's exit status once it ended
    signal: int | None  # the signal that ended it, if one did
    start_time: float | None  # epoch seconds
    end_time: float | None
    nodes: str

    @property
    def state(self) -> JobState:
        return GRAM_STATES.get(self.slurm_state, JobState.PENDING)

    @property
    def finished(self) -> bool:
        return self.state in (JobState.DONE, JobState.FAILED)


def local_time(text: str) -> datetime:
    """A Slurm timestamp (``2026-11-26T05:49:54``, local, no zone) as aware UTC."""
    return datetime.fromisoformat(text).astimezone().astimezone(timezone.utc)


def estimate(stderr: str) -> Estimate:
    """The estimate in ``sbatch --test-only``'s stderr; its refusal as a typed error."""
    found = _TEST_ONLY.search(stderr)
    if found is None:
        raise refusal(stderr, "estimate")
    return Estimate(int(found["job"]), local_time(found["start"]), int(found["procs"]),
                    found["nodes"], found["partition"])


def refusal(stderr: str, what: str) -> SlurmUnavailable | SlurmRefused:
    """The typed error for a Slurm command's failure, by what it printed."""
    text = " ".join(stderr.split()) or "no message"
    low = text.lower()
    if any(sign in low for sign in _UNREACHABLE):
        return SlurmUnavailable(f"{what}: Slurm controller unreachable: {text}")
    if "reservation is in use" in low:
        return ReservationInUse(f"{what}: a job still runs in it ({text})", code="INVALID_REQUEST")
    code = next((code for sign, code in _REFUSALS if sign in low), "INVALID_REQUEST")
    return SlurmRefused(f"{what} refused by Slurm: {text}", code=code)


def squeue_jobs(stdout: str) -> dict[int, SlurmJob]:
    """Jobs of ``squeue --json`` by id."""
    return {job.job_id: job for job in map(_job, json.loads(stdout).get("jobs", []))}


def _job(raw: dict[str, Any]) -> SlurmJob:
    status = int(raw.get("exit_code") or 0)
    state = str(raw.get("job_state", "PENDING"))
    ended = GRAM_STATES.get(state) in (JobState.DONE, JobState.FAILED)
    # exit_code is a wait status: exit code in the high byte, signal in the low bits
    code = (status >> 8) & 0xFF if ended else None
    sig = (status & 0x7F) or None if ended else None
    start, end = raw.get("start_time") or None, raw.get("end_time") or None
    return SlurmJob(int(raw["job_id"]), state, str(raw.get("state_reason", "None")), code, sig,
                    float(start) if start and state != "PENDING" else None,
                    float(end) if end and ended else None, str(raw.get("nodes") or ""))


def cpus(sinfo_line: str) -> tuple[int, int]:
    """``sinfo -h -o %C`` (allocated/idle/other/total) → (idle, total)."""
    try:
        _alloc, idle, _other, total = (int(x) for x in sinfo_line.strip().split("/"))
    except ValueError as exc:
        raise SlurmRefused(f"unexpected sinfo answer {sinfo_line!r}") from exc
    return idle, total

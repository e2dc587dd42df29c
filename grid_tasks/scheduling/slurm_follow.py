"""The job manager of a Slurm RM's jobs: the one writer of their states and output.

On a native RM each job's job manager reports its start and end; a Slurm job has no
such process of ours, so one follower per Slurm RM
(:mod:`grid_tasks.scheduling.slurm_watch` keeps exactly one running) asks Slurm for
all of them at once through the RM interface (:meth:`SlurmRM.states
<grid_tasks.scheduling.slurm_rm.SlurmRM.states>`, ``squeue --json``) and writes what
changed: PENDING -> ACTIVE (started on Slurm's nodes) -> DONE with
the exit code, or FAILED with Slurm's reason (time limit, node failure, cancel...).
Maui's view (Idle / Running / Completed) follows from the state, as for any job; a
job started in its grid reservation has the start recorded there
(:meth:`~grid_tasks.scheduling.slurm_rm.SlurmRM.record_start`: the estimate's error).
Slurm forgets an ended job after MinJobAge; the row keeps its end for good.

The job's streams, when its RSL named none, are files in its folder
(:func:`grid_tasks.slurm.folders.job_folder`): each pass copies their new complete lines
into the job's output stream, and the rest once the job ended, before its end is
recorded (a waiter that sees DONE finds every line).  How far each file was copied is
kept in Redis, so a follower taking over copies no line twice.

A pass Slurm does not answer (slurmctld down) changes nothing: the jobs are followed
again when it returns (Slurm keeps its jobs across a controller restart).

Two more duties come with being the one writer of these jobs:

* a cancel recorded in SQL by a caller without Slurm's commands
  (:mod:`grid_tasks.scheduling.slurm_cancel`) is applied here: every pass ``scancel``s
  such a job (as its account, at most every :data:`CANCEL_AGAIN_S`) until Slurm
  reports it ended, and the end is recorded as the user's cancel;
* a job bound to a grid reservation that ended has the RM's prune task sent at once
  (:func:`grid_tasks.scheduling.rm_tasks.prune`): its Slurm reservation and the
  broker's tokens for it go as soon as it ended, not when the reserved window does.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select

from grid_tasks.db import Reservation, ReservationKind, session_scope
from grid_tasks.db.models import Job as JobRow
from grid_tasks.effects import send_prune
from grid_tasks.events import append_output, output_stream
from grid_tasks.gram.keys import cancel_key
from grid_tasks.gram.records import Outbox, finish, transition
from grid_tasks.scheduling.slurm_jobs import CANCEL, SLURM, slurm_stopper_for
from grid_tasks.scheduling.slurm_rm import SlurmRM
from grid_tasks.services import Services
from grid_tasks.slurm.errors import SlurmRefused
from grid_tasks.slurm.parse import SlurmJob
from grid_tasks.states import JobState

log = logging.getLogger(__name__)

#: Passes in a row, and seconds, that Slurm does not list a job before it is declared
#: lost (a job ended and forgotten while nobody followed it; a controller restart keeps
#: its jobs): both, so neither quick passes nor one slow answer lose a job.
MISSES_TO_LOSE, LOSE_AFTER_S = 10, 30.0
#: Bytes of a stream file copied per pass at most (the rest in the next passes).
CHUNK = 1 << 20
OFFSETS_TTL_S = 7 * 24 * 3600
#: Seconds between two ``scancel`` of a job whose recorded cancel Slurm has not ended yet.
CANCEL_AGAIN_S = 5.0

#: Slurm's end states that are failures, with the reason and the GRAM error recorded.
FAILURES = {
    "TIMEOUT": ("killed by Slurm: its time limit (maxWallTime) ran out (TIMEOUT)",
                "JOB_EXECUTION_FAILED"),
    "NODE_FAIL": ("killed by Slurm: a node of the job failed (NODE_FAIL)",
                  "JOB_EXECUTION_FAILED"),
    "OUT_OF_MEMORY": ("killed by Slurm: over its memory limit (OUT_OF_MEMORY)",
                      "JOB_EXECUTION_FAILED"),
    "BOOT_FAIL": ("Slurm could not boot the job's nodes (BOOT_FAIL)", "JOB_EXECUTION_FAILED"),
    "DEADLINE": ("killed by Slurm: its deadline passed (DEADLINE)", "JOB_EXECUTION_FAILED"),
    "PREEMPTED": ("preempted by Slurm (PREEMPTED)", "JOB_EXECUTION_FAILED"),
    "CANCELLED": ("cancelled in Slurm (scancel by its owner or an administrator)",
                  "USER_CANCELLED"),
}
_OPEN = (JobState.PENDING, JobState.ACTIVE, JobState.SUSPENDED, JobState.STAGE_IN,
         JobState.STAGE_OUT)


@dataclass(frozen=True)
class Ending:
    """How a job Slurm ended is recorded."""

    state: JobState
    reason: str
    gram_error: str | None = None


def ending(job: SlurmJob, cancelled_by_user: bool) -> Ending:
    """The GRAM end of a Slurm job that ended.  A batch script that ran and exited is
    DONE with its exit code, as any GRAM job (Slurm calls a non-zero exit FAILED)."""
    if job.slurm_state == "COMPLETED" or (job.slurm_state == "FAILED" and not job.signal):
        return Ending(JobState.DONE, f"exit code {job.exit_code or 0}")
    if job.slurm_state == "CANCELLED" and cancelled_by_user:
        return Ending(JobState.FAILED, "cancelled by user", "USER_CANCELLED")
    if job.slurm_state in FAILURES:
        reason, code = FAILURES[job.slurm_state]
        return Ending(JobState.FAILED, reason, code)
    if job.signal:
        return Ending(JobState.FAILED, f"killed by signal {job.signal}", "JOB_EXECUTION_FAILED")
    return Ending(JobState.FAILED, f"ended by Slurm: {job.slurm_state} ({job.reason})",
                  "JOB_EXECUTION_FAILED")


@dataclass
class Follower:
    """One Slurm RM's follower; :meth:`once` is one pass."""

    services: Services
    rm: str
    backend: SlurmRM
    lose_after_s: float = LOSE_AFTER_S
    misses: dict[int, tuple[int, float]] = field(default_factory=dict)  # count, since
    offsets: dict[tuple[int, str], int] = field(default_factory=dict)
    cancelled: dict[int, float] = field(default_factory=dict)  # job -> last scancel (monotonic)

    def once(self) -> int:
        """Follow every open job of the RM once; how many are still open.  Raises
        :class:`~grid_tasks.slurm.errors.SlurmUnavailable` when Slurm does not answer."""
        open_jobs = self._open_jobs()
        if not open_jobs:
            return 0
        known = self.backend.states(str(info["id"]) for info in open_jobs.values())
        for job_id, info in open_jobs.items():
            seen = known.get(str(info["id"]))
            if seen is not None and _ran(seen):
                self._copy_output(job_id, info, seen.nodes, final=seen.finished)
            if CANCEL in info and (seen is None or not seen.finished):
                self._cancel(job_id, info)
        outbox = Outbox()
        ended, bound = 0, False
        with session_scope(self.services.sessions) as session:
            for job_id, info in open_jobs.items():
                row = session.get(JobRow, job_id)
                if row is not None and self._apply(session, row, known.get(str(info["id"])),
                                                   outbox):
                    ended += 1
                    self.cancelled.pop(job_id, None)
                    bound = bound or self._bound(session, job_id)
        outbox.rms.discard(self.rm)  # no Maui iteration schedules a Slurm RM
        outbox.flush(self.services.redis, self.services.app)
        if bound:
            self._prune_now()
        return len(open_jobs) - ended

    def _cancel(self, job_id: int, info: dict[str, Any]) -> None:
        """``scancel`` a job whose cancel was recorded (again after :data:`CANCEL_AGAIN_S`
        while Slurm has not ended it); one Slurm ended meanwhile needs none."""
        last = self.cancelled.get(job_id)
        if last is not None and time.monotonic() - last < CANCEL_AGAIN_S:
            return
        self.cancelled[job_id] = time.monotonic()
        try:
            slurm_stopper_for(self.backend)(info)
        except SlurmRefused as exc:  # tried again later; the other jobs are followed on
            log.warning("Slurm RM %s: recorded cancel of job %s refused by Slurm: %s",
                        self.rm, job_id, exc)
            return
        log.info("Slurm RM %s: job %s (Slurm %s) cancelled as recorded by %s", self.rm,
                 job_id, info.get("id"), (info.get(CANCEL) or {}).get("by"))

    def _bound(self, session: Any, job_id: int) -> bool:
        """Whether ``job_id`` holds a grid reservation of this RM."""
        return session.scalar(select(Reservation.id).where(
            Reservation.rm == self.rm, Reservation.kind == ReservationKind.GRID,
            Reservation.owner_job_id == job_id).limit(1)) is not None

    def _prune_now(self) -> None:
        """Have the RM's scheduler delete the grid reservations of jobs that ended, with
        their tokens, now (beat's prune catches up if this cannot be sent)."""
        try:
            send_prune(self.services.app, self.rm, why="a job bound to a grid reservation ended")
        except Exception as exc:  # noqa: BLE001 - beat prunes every PRUNE_EVERY_S anyway
            log.warning("Slurm RM %s: prune not sent after a bound job ended: %s", self.rm, exc)

    def _open_jobs(self) -> dict[int, dict[str, Any]]:
        """The RM's jobs not ended yet, with their Slurm particulars."""
        query = select(JobRow.id, JobRow.request).where(
            JobRow.rm == self.rm, JobRow.state.in_(_OPEN))
        with session_scope(self.services.sessions) as session:
            rows = session.execute(query).all()
        return {row.id: row.request[SLURM] for row in rows
                if isinstance((row.request or {}).get(SLURM), dict)}

    def _apply(self, session: Any, row: JobRow, job: SlurmJob | None, outbox: Outbox) -> int:
        """Record what Slurm says of ``row``'s job; 1 if this ended it."""
        if job is None:
            return self._missing(session, row, outbox)
        self.misses.pop(row.id, None)
        now = self.services.clock.now()
        if _ran(job) and row.state is JobState.PENDING:
            transition(session, row, JobState.ACTIVE, f"started on {job.nodes or 'Slurm'}",
                       _between(row.submit_time, _when(job.start_time), now), outbox)
            if job.nodes:  # Slurm's host list as Maui's views show a job's nodes
                row.nodes_allocated = {job.nodes: int(row.tasks or row.procs or 1)}
            self._started_in_reservation(session, row.id, float(job.start_time))
        if job.state is JobState.SUSPENDED and row.state is JobState.ACTIVE:
            transition(session, row, JobState.SUSPENDED, "suspended by Slurm", now, outbox)
        elif job.state is JobState.ACTIVE and row.state is JobState.SUSPENDED:
            transition(session, row, JobState.ACTIVE, "resumed by Slurm", now, outbox)
        if not job.finished:
            return 0
        asked = CANCEL in ((row.request or {}).get(SLURM) or {})
        end = ending(job, asked or bool(self.services.redis.exists(cancel_key(row.id))))
        codes = {"0": job.exit_code} if job.exit_code is not None else None
        at = _between(row.start_time or row.submit_time,
                      _when(job.end_time) if job.end_time else now, now)
        return int(finish(session, row, end.state, end.reason, at, outbox,
                          gram_error=end.gram_error, exit_code=job.exit_code, exit_codes=codes))

    def _started_in_reservation(self, session: Any, job_id: int, started: float) -> None:
        """Note the start on the grid reservation the job is bound to, if any."""
        query = select(Reservation.name).where(
            Reservation.rm == self.rm, Reservation.kind == ReservationKind.GRID,
            Reservation.owner_job_id == job_id)
        for name in session.scalars(query).all():
            self.backend.record_start(session, name, started)

    def _missing(self, session: Any, row: JobRow, outbox: Outbox) -> int:
        """A job Slurm does not list: lost once it stays so for :data:`MISSES_TO_LOSE`
        passes and ``lose_after_s`` (its end is unknown; its Slurm job is no more)."""
        count, since = self.misses.get(row.id, (0, time.monotonic()))
        self.misses[row.id] = (count + 1, since)
        if count + 1 < MISSES_TO_LOSE or time.monotonic() - since < self.lose_after_s:
            return 0
        self.misses.pop(row.id)
        slurm_id = (row.request or {}).get(SLURM, {}).get("id")
        return int(finish(session, row, JobState.FAILED,
                          f"Slurm no longer knows its job {slurm_id}: it ended while nobody "
                          "followed it, and its end is lost", self.services.clock.now(),
                          outbox, gram_error="JOB_EXECUTION_FAILED"))

    def _copy_output(self, job_id: int, info: dict[str, Any], nodes: str, final: bool) -> None:
        """Copy the new lines of the job's stream files into its output stream."""
        folder = info.get("folder")
        if not folder:
            return
        redis = self.services.redis
        mark = f"{output_stream(job_id)}:copied"
        for stream in ("stdout", "stderr"):
            key = (job_id, stream)
            if key not in self.offsets:
                self.offsets[key] = int(redis.hget(mark, stream) or 0)
            lines, offset = read_lines(Path(folder) / stream, self.offsets[key], final,
                                       _uid(info.get("user")))
            if offset == self.offsets[key]:
                continue
            pipe = redis.pipeline(transaction=True)
            for line in lines:
                append_output(pipe, job_id, stream, nodes or "slurm", 0, line)
            pipe.hset(mark, stream, offset)
            pipe.expire(mark, OFFSETS_TTL_S)
            pipe.execute()
            self.offsets[key] = offset
        if final:
            for stream in ("stdout", "stderr"):
                self.offsets.pop((job_id, stream), None)


def read_lines(path: Path, offset: int, final: bool,
               owner: int | None = None) -> tuple[list[bytes], int]:
    """The complete lines of ``path`` from ``offset`` (and a last unterminated one
    when ``final``), and the offset after them; nothing if the file is not there.

    The folder is the job's: its account may have put anything there.  Only a plain
    file of ``owner`` (uid; default this process's) is read, never through a symbolic
    link, so a job cannot have the follower copy another account's file (or block on
    a pipe) into its output."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError:
        return [], offset
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        wanted = os.geteuid() if owner is None else owner
        if not stat.S_ISREG(info.st_mode) or info.st_uid != wanted:
            log.warning("%s is not a plain file of uid %d: not copied", path, wanted)
            return [], offset
        handle.seek(offset)
        data = handle.read() if final else handle.read(CHUNK)
    cut = len(data) if final else data.rfind(b"\n") + 1
    lines = data[:cut].splitlines(keepends=True)
    return lines, offset + cut


def _ran(job: SlurmJob) -> bool:
    """Whether the job got nodes (Slurm gives a job cancelled while pending a start
    time too, the moment of its cancel, but no nodes)."""
    return job.start_time is not None and (bool(job.nodes) or job.slurm_state != "CANCELLED")


def _uid(account: str | None) -> int | None:
    """The uid of a job's account (None: this process's own, the job ran as it)."""
    if account is None:
        return None
    try:
        return pwd.getpwnam(account).pw_uid
    except KeyError:
        return -1  # an account gone: nothing of its folder is read


def _when(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _between(earliest: datetime | None, when: datetime, latest: datetime) -> datetime:
    """Slurm's time of a change (whole seconds) kept after the job's previous change
    and not after now, so its history reads in order."""
    when = min(when, latest)
    return max(when, earliest) if earliest is not None else when

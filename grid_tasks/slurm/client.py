"""Slurm's client commands against one cluster, as the account a job belongs to.

The shell around :mod:`grid_tasks.slurm.parse` and :mod:`~grid_tasks.slurm.translate`:
every command runs with the cluster's ``SLURM_CONF`` and nothing else of this process's
environment that could select another cluster; submissions and cancels run as the
mapped local account (Slurm then enforces its own ownership rules), queries as the
service.  A command that hangs or cannot reach slurmctld raises
:class:`~grid_tasks.slurm.errors.SlurmUnavailable`; one Slurm refuses,
:class:`~grid_tasks.slurm.errors.SlurmRefused` with the GRAM error.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from grid_tasks.slurm import parse
from grid_tasks.slurm.errors import SlurmRefused, SlurmUnavailable
from grid_tasks.slurm.translate import BatchJob, minutes

#: Slurm client commands take 4-11 ms; a controller that does not answer in this long is down.
COMMAND_TIMEOUT = 10.0


@dataclass(frozen=True)
class SlurmClient:
    """Client commands of one cluster (``conf``: its slurm.conf) and partition."""

    conf: str
    partition: str | None = None
    timeout: float = COMMAND_TIMEOUT

    def run(self, command: str, *args: str, user: str | None = None, stdin: str | None = None,
            env: dict[str, str] | None = None, what: str = "") -> subprocess.CompletedProcess[str]:
        """Run a client command; a non-zero exit becomes the typed error for its stderr."""
        path = shutil.which(command) or shutil.which(command, path="/usr/sbin:/usr/bin")
        if path is None:
            raise SlurmUnavailable(f"{command} not found on this host: install Slurm's client commands")
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {}),
                "SLURM_CONF": self.conf}
        account = pwd.getpwnam(user) if user else None
        try:
            done = subprocess.run(
                [path, *args], input=stdin, env=base, capture_output=True, text=True,
                timeout=self.timeout, user=account.pw_uid if account else None,
                group=account.pw_gid if account else None,
                extra_groups=os.getgrouplist(account.pw_name, account.pw_gid) if account else None,
                cwd="/" if account else None)
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailable(f"{what or command}: no answer from Slurm in {self.timeout:g} s") from exc
        if done.returncode != 0:
            raise parse.refusal(done.stderr, what or command)
        return done

    def capacity(self) -> tuple[int, int]:
        """(idle, total) processors of the partition."""
        args = ["-h", "-o", "%C"] + ([f"--partition={self.partition}"] if self.partition else [])
        return parse.cpus(self.run("sinfo", *args, what="sinfo").stdout.splitlines()[0])

    def estimate(self, count: int, walltime_s: int, user: str | None = None) -> parse.Estimate:
        """When a job of ``count`` processors for ``walltime_s`` would start (uses up a job id)."""
        args = ["--test-only", f"--ntasks={count}", f"--time={minutes(walltime_s)}",
                "--wrap=/bin/true"] + ([f"--partition={self.partition}"] if self.partition else [])
        done = self.run("sbatch", *args, user=user, what="estimate")
        return parse.estimate(done.stderr)  # the answer is on stderr, exit code 0

    def submit(self, job: BatchJob, user: str | None = None) -> int:
        """Submit as ``user``; the Slurm job id.  A job bigger than the partition is
        refused here: Slurm would accept it and leave it pending forever."""
        wanted = _tasks(job.options)
        _idle, total = self.capacity()
        if wanted > total:
            raise SlurmRefused(f"the job asks {wanted} processors; partition "
                               f"{self.partition or '(default)'} has {total}", code="NO_RESOURCES")
        done = self.run("sbatch", *job.options, user=user, stdin=job.script,
                        env=job.environment, what="submit")
        return int(done.stdout.strip().split(";")[0])

    def jobs(self, ids: Iterable[int] | None = None) -> dict[int, parse.SlurmJob]:
        """The jobs Slurm still knows (finished ones until MinJobAge), optionally only ``ids``."""
        found = parse.squeue_jobs(self.run("squeue", "--json", "--states=all", what="squeue").stdout)
        if ids is None:
            return found
        wanted = set(ids)
        return {jid: job for jid, job in found.items() if jid in wanted}

    def cancel(self, job_id: int, user: str | None = None) -> None:
        self.run("scancel", str(job_id), user=user, what=f"cancel of Slurm job {job_id}")

    # -- advance reservations (root or a Slurm operator) ----------------------------
    def reserve(self, name: str, start: datetime, duration_s: int, cpus: int, user: str,
                flags: tuple[str, ...] = ()) -> None:
        """Reserve ``cpus`` processors of the partition for ``user`` from ``start`` for
        ``duration_s`` (whole minutes, rounded up: a job longer than its reservation
        is killed at its end).  ``flags`` e.g. ``("FLEX",)`` to allow an early start."""
        args = ["create", "reservation", f"reservationname={name}",
                f"starttime={_slurm_time(start)}", f"duration={minutes(duration_s)}",
                f"users={user}", f"corecnt={cpus}"]
        if self.partition:
            args.append(f"partitionname={self.partition}")
        if flags:
            args.append(f"flags={','.join(flags)}")
        self.run("scontrol", *args, what=f"reservation {name}")

    def move_reservation(self, name: str, start: datetime) -> None:
        """Move the reservation's start (to now: its job starts in the next pass)."""
        self.run("scontrol", "update", f"reservation={name}", f"starttime={_slurm_time(start)}",
                 what=f"reservation {name}")

    def release(self, name: str) -> None:
        """Delete the reservation (Slurm refuses while a job runs in it)."""
        self.run("scontrol", "delete", f"reservation={name}", what=f"release of reservation {name}")


def _slurm_time(when: datetime) -> str:
    """An aware time as Slurm reads it: this host's local time, whole seconds."""
    return when.astimezone().replace(tzinfo=None, microsecond=0).isoformat()


def _tasks(options: tuple[str, ...]) -> int:
    tasks = cpus = 1
    for opt in options:
        if opt.startswith("--ntasks="):
            tasks = int(opt.split("=", 1)[1])
        elif opt.startswith("--cpus-per-task="):
            cpus = int(opt.split("=", 1)[1])
    return tasks * cpus

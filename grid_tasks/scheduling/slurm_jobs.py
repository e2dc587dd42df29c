"""A GRAM job on a Slurm RM: recorded as any job, then handed to Slurm as its account.

The gatekeeper has mapped the submitter to a local account (the trust boundary);
the job is stored exactly as on a native RM (so ``showq``, ``checkjob`` and a job
handle see it), and inside that same transaction submitted through the RM interface
(:meth:`SlurmRM.submit <grid_tasks.scheduling.slurm_rm.SlurmRM.submit>`: ``sbatch`` as
the mapped account, into the job's grid reservation when its RSL names one).  Either
both happen or neither: Slurm down (:class:`~grid_tasks.slurm.errors.SlurmUnavailable`,
CONNECTION_FAILED, found before the transaction begins) or refusing (the GRAM error)
rolls the row back, and a Slurm job whose row then failed to commit is cancelled again.
The job's Slurm id, folder and account go into its stored request, where the follower
(:mod:`grid_tasks.scheduling.slurm_follow`) and a cancel find them.

Scheduling is Slurm's: no Maui iteration runs for the job.  Its PENDING event is
published here (a native gatekeeper sends it with its iteration's round trip), with a
wake-up call for the RM's follower.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from sqlalchemy.orm import Session

from grid_tasks.db.models import Job as JobRow
from grid_tasks.events import publish
from grid_tasks.gram.binding import requested_reservation
from grid_tasks.gram.errors import check_rm_contact
from grid_tasks.gram.jmvars import (JobManagerRequest, account_variables, contact_variables,
                                    gatekeeper_variables)
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import store_submission
from grid_tasks.rsl.lower import SubjobRequest
from grid_tasks.scheduling.rm_kinds import backend_for, topology_of
from grid_tasks.scheduling.slurm_rm import SlurmRM
from grid_tasks.services import Services
from grid_tasks.slurm.errors import SlurmError, SlurmRefused
from grid_tasks.slurm.folders import job_folder
from grid_tasks.slurm.translate import batch_job
from grid_tasks.topology import RMKind, SlurmSpec

log = logging.getLogger(__name__)

#: The key of a Slurm job's particulars in its row's stored request.
SLURM = "slurm"
#: The key, among them, of a cancel asked where Slurm's commands may not be (who asked,
#: when): the RM's follower scancels the job until Slurm reports it ended
#: (:mod:`grid_tasks.scheduling.slurm_cancel`).
CANCEL = "cancel"
#: How long a wake-up call for an RM's follower waits to be taken (seconds).
WAKE_TTL_S = 60
#: What scancel says of a job that has ended already.
_ENDED = ("already completing or completed", "invalid job id", "job has already finished")


@dataclass(frozen=True)
class SlurmSide:
    """A Slurm RM as its gatekeeper and follower use it: its topology entry (partition,
    account, output folder) and its implementation of the RM interface."""

    rm: str
    spec: SlurmSpec
    backend: SlurmRM


def slurm_sides(settings: Any) -> dict[str, SlurmSide]:
    """Every Slurm RM of the grid's topology (none when it cannot be read)."""
    topology = topology_of(settings.topology_file)
    names = topology.rms if topology is not None else {}
    return {name: side for name in names if (side := slurm_side(settings, name)) is not None}


def slurm_rm_names(settings: Any) -> frozenset[str]:
    """The names of the topology's Slurm RMs (whose nodes are Slurm's, not the grid's)."""
    topology = topology_of(settings.topology_file)
    if topology is None:
        return frozenset()
    return frozenset(name for name, spec in topology.rms.items() if spec.kind is RMKind.SLURM)


def slurm_side(settings: Any, rm: str) -> SlurmSide | None:
    """``rm`` as a Slurm RM; None for a native one (or one the topology lacks).  Every
    submission asks: one ``stat`` of the topology file when it is native."""
    topology = topology_of(settings.topology_file)
    spec = topology.rms.get(rm) if topology is not None else None
    if spec is None or spec.kind is not RMKind.SLURM or spec.slurm is None:
        return None
    backend = backend_for(rm, topology)
    assert isinstance(backend, SlurmRM)  # the kind's implementation (rm_kinds.KINDS)
    return SlurmSide(rm, spec.slurm, backend)


def wake_key(rm: str) -> str:
    """A list the follower of ``rm`` blocks on between passes: a submission pushes to
    it, so the new job's start is seen at once rather than at the next pass."""
    return f"grid_tasks:slurm:{rm}:wake"


def lease_key(rm: str) -> str:
    """The lease of ``rm``'s one follower (held by the gatekeeper worker following its
    jobs, renewed every pass): absent, no gatekeeper of the RM is alive to act."""
    return f"grid_tasks:slurm:{rm}:follower"


def submit_to_slurm(services: Services, side: SlurmSide, rsl: str,
                    request: JobManagerRequest, creds: dict[str, Any], *,
                    identity: str | None, idempotency_key: str | None = None,
                    extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    """Store the job and submit it to Slurm in one transaction; (id, contact)."""
    job_id, contact, _stored = store_on_slurm(
        services, side, rsl, request, request.lower(), creds, identity=identity,
        idempotency_key=idempotency_key, extra_env=extra_env)
    return job_id, contact


def store_on_slurm(services: Services, side: SlurmSide, rsl: str,
                   request: JobManagerRequest | None, sub: SubjobRequest,
                   creds: dict[str, Any], *, identity: str | None,
                   idempotency_key: str | None = None,
                   extra_env: dict[str, str] | None = None,
                   coallocation: tuple[int, str] | None = None,
                   within: Callable[[Session, int], None] | None = None
                   ) -> tuple[int, str, bool]:
    """:func:`submit_to_slurm` for any caller: (id, contact, stored by this call).

    ``request`` None: ``sub`` as lowered by the caller (a DUROC subjob, whose RSL the
    control side lowered; no job manager variables to rebind).  ``within`` runs in the
    storing transaction before the hand-over (a subjob links itself there), so a
    refused link never reaches Slurm."""
    # Slurm's clients retry a controller that is down for seconds: find out before the
    # transaction, whose database lock every other writer of the grid waits for
    side.backend.client.capacity()
    hand_over = HandOver(services, side, request, sub, extra_env)
    held = Outbox()

    def store_then_submit(session: Session, job_id: int) -> None:
        if within is not None:
            within(session, job_id)
        hand_over(session, job_id)

    try:
        job_id, contact, stored = store_submission(
            services, rsl, sub, side.rm, creds, idempotency_key=idempotency_key,
            extra_env=extra_env, identity=identity, coallocation=coallocation,
            within=store_then_submit, hold=held, check=_names_this_rm)
    except BaseException:
        hand_over.withdraw()
        raise
    if not stored:  # an earlier attempt's job: one handed over here was rolled back
        hand_over.withdraw()
        return job_id, contact, False
    pipe = services.redis.pipeline(transaction=False)
    for event in held.events:
        publish(pipe, event)
    pipe.rpush(wake_key(side.rm), job_id)
    pipe.expire(wake_key(side.rm), WAKE_TTL_S)
    pipe.execute()
    return job_id, contact, True


@dataclass
class HandOver:
    """The step of the storing transaction that submits the stored job to Slurm (as
    its mapped account, with its folder and environment) and notes its Slurm id."""

    services: Services
    side: SlurmSide
    request: JobManagerRequest | None  # None: ``sub`` as is (a DUROC subjob)
    sub: SubjobRequest
    extra_env: dict[str, str] | None
    submitted: list[tuple[str, str | None]] = field(default_factory=list)

    def __call__(self, session: Session, job_id: int) -> None:
        row = session.get(JobRow, job_id)
        account = (row.request or {}).get("run_as")
        wanted = (self.request.rebind(row.contact) if self.request is not None else None) \
            or self.sub
        rm, spec = self.side.rm, self.side.spec
        folder = job_folder(spec.output_dir, rm, job_id, account)
        job = batch_job(replace(wanted, directory=wanted.directory or _home(account, folder)),
                        name=f"gt{job_id}.{rm}", partition=spec.partition,
                        account=spec.account, output=str(folder / "stdout"),
                        error=str(folder / "stderr"),
                        environment=job_environment(self.services, rm, job_id, row.contact,
                                                    account, self.extra_env),
                        srun=shutil.which("srun") or "srun")
        native = self.side.backend.submit(job, account=account,
                                          reservation=requested_reservation(wanted))
        self.submitted.append((native, account))
        row.request = {**(row.request or {}),
                       SLURM: {"id": int(native), "folder": str(folder), "user": account}}

    def withdraw(self) -> None:
        """Cancel the Slurm jobs whose rows were not stored (best effort: logged)."""
        for native, account in self.submitted:
            try:
                self.side.backend.cancel(native, account=account)
            except SlurmError as exc:
                log.error("Slurm job %s submitted but its grid job not stored; cancelling "
                          "it failed: %s", native, exc)


def job_environment(services: Services, rm: str, job_id: int, contact: str | None,
                    account: str | None, extra_env: dict[str, str] | None) -> dict[str, str]:
    """What the job manager defines for the job (GRAM's ``HOME``, ``LOGNAME``,
    ``GLOBUS_*``; grid_tasks' job id and RM; DUROC's extra environment)."""
    env = account_variables(account)
    if "LOGNAME" in env:
        env["USER"] = env["LOGNAME"]
    env.update(gatekeeper_variables(services.settings))
    if contact:
        env.update(contact_variables(contact))
    env.update({"GRID_TASKS_JOB_ID": str(job_id), "GRID_TASKS_RM": rm})
    env.update({str(k): str(v) for k, v in (extra_env or {}).items()})
    return env


def _home(account: str | None, folder: Any) -> str:
    """GRAM's default directory, the account's home; its job folder when it has none."""
    home = account_variables(account).get("HOME")
    return home if home and os.path.isdir(home) else str(folder)


def _names_this_rm(_session: Session, rm: str, sub: Any) -> None:
    """A Slurm RM's fit is Slurm's to judge (at submission); only a request naming
    another RM (resourceManagerContact) is refused before."""
    check_rm_contact(rm, sub.rm_contact)


def slurm_stopper(side: SlurmSide) -> Callable[[JobRow], None]:
    """How a cancel stops a Slurm RM's job: ``scancel`` as the job's account (Slurm then
    checks it is theirs).  A job Slurm has ended meanwhile needs no stopping: the
    follower records its end."""
    stop_info = slurm_stopper_for(side.backend)

    def stop(row: JobRow) -> None:
        info = (row.request or {}).get(SLURM)
        if isinstance(info, dict):  # else it never reached Slurm
            stop_info(info)

    return stop


def slurm_stopper_for(backend: SlurmRM) -> Callable[[dict[str, Any]], None]:
    """``scancel`` of the job a row's Slurm particulars ``info`` name, as its account;
    quiet when Slurm has ended it already."""
    def stop(info: dict[str, Any]) -> None:
        try:
            backend.cancel(str(info["id"]), account=info.get("user"))
        except SlurmRefused as exc:
            if not any(sign in str(exc).lower() for sign in _ENDED):
                raise

    return stop

"""The gatekeeper's tasks: GRAM's door at a resource manager (queue ``gram.<rm>``).

A client never writes a job record: it asks here (:mod:`grid_tasks.gram.door`), and
the gatekeeper takes the submitter to be the verified signer, maps it through its own
grid map, records, cancels, or tells the job's owner its status.  Each answers as
data (``{"ok": ...}`` or the refusal).  Door tasks track no STARTED state: nobody
reads it, and it would cost a result-backend write per request.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from grid_tasks.gram.door import CANCEL, STATUS, SUBMIT, answer
from grid_tasks.gram.jmvars import JobManagerRequest, mapped_account
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import cancel_job, job_report, restart_job, store_submission
from grid_tasks.scheduling.runner import iterate_here
from grid_tasks.scheduling.slurm_jobs import slurm_side, slurm_stopper, submit_to_slurm
from grid_tasks.scheduling.slurm_watch import install as install_slurm_followers
from grid_tasks.security.roles import Role
from grid_tasks.services import services_for

log = logging.getLogger(__name__)
install_slurm_followers()  # a worker serving a Slurm RM's queue follows its jobs


@shared_task(name=SUBMIT, bind=True, track_started=False)
def submit(self: Any, *, rm: str, rsl: str, creds: dict[str, Any],
           idempotency_key: str | None = None, extra_env: dict[str, str] | None = None,
           variables: dict[str, str] | None = None, source: str = "<rsl>") -> dict[str, Any]:
    """A GRAM submission: the verified submitter is mapped through this gatekeeper's
    grid map and the job recorded; ``{"ok": {id, contact}}`` or the refusal.

    The RSL is evaluated here, for the mapped account: ``$(HOME)``, ``$(LOGNAME)``,
    the job's contact... are the job manager's (:mod:`grid_tasks.gram.jmvars`), not
    the caller's.  A restart request takes up the job it names.

    A stored job's RM iterates right here (the quick pass, under the RM's lock, as a
    DUROC header does), not in a scheduler worker the trigger would travel to: the
    job's start waits for no other task, and the answer goes back once it is placed.
    On a Slurm RM the job is stored and submitted to Slurm as the mapped account in
    one transaction (:mod:`grid_tasks.scheduling.slurm_jobs`): Slurm schedules it."""
    services = services_for(self.app)
    who = self.submitter()
    held = Outbox()

    def store() -> dict[str, Any]:
        account = mapped_account(services.settings, who, rm, creds.get("user"))
        request = JobManagerRequest.for_account(services.settings, rsl, variables, account,
                                                source)
        sub = request.lower()
        if sub.restart is not None:  # GRAM's restart request: the job is taken up again
            job_id, contact = restart_job(services, sub.restart, rm, who)
            return {"id": job_id, "contact": contact}
        side = slurm_side(services.settings, rm)
        if side is not None:
            job_id, contact = submit_to_slurm(
                services, side, rsl, request, _known_creds(creds), identity=who,
                idempotency_key=idempotency_key, extra_env=extra_env)
            return {"id": job_id, "contact": contact}
        job_id, contact, stored = store_submission(
            services, rsl, sub, rm, _known_creds(creds), idempotency_key=idempotency_key,
            extra_env=extra_env, identity=who, hold=held,
            rebind=request.rebind if request.contact_bound else None)
        if stored:  # its events go with the iteration lock's round trip
            try:
                iterate_here(services, rm, events=held.events, quick=True)
            except Exception as exc:  # the job is stored: beat's iteration will place it
                log.warning("job %s stored on %s but not scheduled in place: %s",
                            job_id, rm, exc)
        return {"id": job_id, "contact": contact}

    return answer(store)


@shared_task(name=CANCEL, bind=True, track_started=False)
def cancel(self: Any, *, rm: str, job: int, submitter: str | None = None) -> dict[str, Any]:
    """A cancel: only the job's owner (as verified, or as the scheduler vouches for it:
    a coallocated job's Slurm subjob is cancelled here, where Slurm's commands are) may,
    when a grid map says who is who, or an operator (Maui's admin canceljob); the job's
    status, or the refusal."""
    services = services_for(self.app)
    who, admin = self.submitter(submitter), self.signed_as(Role.OPERATOR)
    side = slurm_side(services.settings, rm)
    stop = slurm_stopper(side) if side is not None else None  # scancel as its account
    return answer(lambda: cancel_job(services, int(job), rm=rm, identity=who,
                                     admin=admin, stop=stop).to_dict())


@shared_task(name=STATUS, bind=True, track_started=False)
def status(self: Any, *, job: int, history: bool = False,
           rm: str | None = None) -> dict[str, Any]:
    """A status query (GRAM's job status, globus-job-status): the job's status, and its
    state history when asked, for its owner (with a grid map) or an operator.  Asked
    without ``rm`` (a client that knows only the job's id) the scheduler answers."""
    services = services_for(self.app)
    who, admin = self.submitter(), self.signed_as(Role.OPERATOR)
    return answer(lambda: job_report(services, int(job), rm=rm, identity=who, admin=admin,
                                     history=bool(history)))


def _known_creds(creds: dict[str, Any]) -> dict[str, Any]:
    """The credential fields a submission may carry (anything else is dropped)."""
    return {k: creds.get(k) for k in ("user", "group", "account", "qos", "job_class")}

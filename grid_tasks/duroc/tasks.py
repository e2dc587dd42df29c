"""Celery tasks of DUROC coallocation: the chord's header submissions, body and error
path, and the settle (the one writer of a coallocated job's state).

Routing (all by :class:`~grid_tasks.celery_app.GridRouter`, nothing spelled here):

* ``grid_tasks.duroc.tasks.watch_subjob`` carries ``rm`` -> the subjob RM's gatekeeper queue;
* ``grid_tasks.duroc.tasks.release`` (the body) and ``...coalloc_failed`` (the
  errback) -> the scheduler queue, like ``celery.accumulate``/``chord_unlock``;
* the door (:mod:`grid_tasks.duroc.control_door`): ``request``, ``add_subjobs``,
  ``delete_subjob``, ``release_barrier`` and ``cancel``, a client's signed requests,
  -> the scheduler queue (no ``rm``: a coallocated job spans RMs).  They answer as
  data (:func:`grid_tasks.gram.door.answer`); the job's owner is the verified signer.

The errback takes one positional argument (the failed task id), so Celery sends it
as a task through the router instead of calling it inline inside the worker that
ran the failing header task (what it does for ``(request, exc, traceback)``
errbacks, which would ignore routing).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from grid_tasks.duroc.control import DEADLINE_HOP, Coallocator
from grid_tasks.duroc.door import (
    ADD_SUBJOBS, CANCEL, DELETE_SUBJOB, RELEASE_BARRIER, REQUEST, STATUS, SUBMIT_SUBJOB,
)
from grid_tasks.db.errors import DatabaseError
from grid_tasks.effects import FAILED, RELEASE, SETTLE, WATCH, send_deadline, settle_signature
from grid_tasks.errors import ConnectivityError, GridTasksError
from grid_tasks.gram.door import answer
from grid_tasks.queues import SCHEDULER_QUEUE
from grid_tasks.security.roles import Role
from grid_tasks.services import per_process, services_for

log = logging.getLogger(__name__)


def coallocator_for(app: Any) -> Coallocator:
    """This process's Coallocator on its worker's Services (never closed)."""
    return per_process(app, "coallocator", lambda: Coallocator(services_for(app)))


def scheduler_side(app: Any) -> Coallocator:
    """The Coallocator of a scheduler process, its barrier watch running (adopting the
    jobs waiting in SQL: after a restart no waiting job depends on a reader)."""
    co = coallocator_for(app)
    co.barrier_watch.start()
    return co


def _watch_at_worker_start(sender: Any = None, **_: Any) -> None:
    """A worker consuming the scheduler queue starts its barrier watch at once: a job
    left waiting by a restart (or whose deadline task was lost with the broker) is
    adopted without waiting for the next DUROC task to reach this worker."""
    app = getattr(sender, "app", None)
    if app is None or SCHEDULER_QUEUE not in app.amqp.queues.consume_from:
        return
    try:
        scheduler_side(app)
    except Exception:  # the first DUROC task starts it again
        log.exception("barrier watch not started at worker start")


worker_ready.connect(_watch_at_worker_start, weak=False, dispatch_uid="grid_tasks.duroc.watch")


#: What a header raises when the grid itself failed (Redis, the database out of reach):
#: the task fails (Flower counts it against its worker) and the chord's error path
#: settles the job.  Any other error of a header is the user's job failing.
INFRASTRUCTURE_ERRORS: tuple[type[Exception], ...] = (ConnectivityError, DatabaseError)


# track_started off: nobody reads a header's STARTED state; a subjob's progress is in
# the coordination store and in SQL (subjob_states), its submission in the chord's join.
@shared_task(name=WATCH, bind=True, acks_late=True, reject_on_worker_lost=True,
             track_started=False)
def watch_subjob(self: Any, *, rm: str, job: int, address: int, deadline: float,
                 submitter: str | None = None, account: str | None = None,
                 slice_s: float | None = None) -> dict[str, Any]:
    """Chord header: submit one subjob through GRAM (once), then end: the barrier is
    watched by the scheduler (:mod:`grid_tasks.duroc.barrier_watch`), not by re-queued
    headers.

    A subjob refused or dead before the barrier (a strict one aborts the barrier) is
    the user's failure, not the grid's: the header returns it as ``{"failed": ...}``
    and sends the settle, which FAILs the job; as a task failure it showed in Flower
    as the gatekeeper's.  Only :data:`INFRASTRUCTURE_ERRORS` and the like fail it.

    Every delivery is counted (:meth:`Coallocator.header_deliveries`), redeliveries of
    a message whose worker died mid-task apart: the proof that acks-late did its job.
    ``slice_s``: ignored (headers sent by an older scheduler).
    """
    co = coallocator_for(self.app)
    # the job's owner, vouched for by the scheduler that sent the chord
    who = self.submitter(submitter)
    delivery = self.request.delivery_info or {}
    try:
        url, info = co.first_look(job, address, self.request.id,
                                  bool(delivery.get("redelivered")))
        return co.watch_step(job, address, deadline, url=url, info=info, identity=who,
                             account=account)
    except GridTasksError as exc:
        if isinstance(exc, INFRASTRUCTURE_ERRORS):
            raise
        settle_signature(self.app, job).apply_async(ignore_result=True)
        return {"address": address, "failed": str(exc), "error": type(exc).__name__}


@shared_task(name=SUBMIT_SUBJOB, bind=True, track_started=False)
def submit_subjob(self: Any, *, rm: str, job: int, address: int,
                  submitter: str | None = None, account: str | None = None) -> dict[str, Any]:
    """A no-barrier subjob, submitted at its RM's gatekeeper for the job's owner (the
    ``submitter`` the scheduler vouches for); ``{"ok": {"gram_job": id}}`` or the
    refusal as data (:mod:`grid_tasks.gram.door`)."""
    co = coallocator_for(self.app)
    who = self.submitter(submitter)
    return answer(lambda: {"gram_job": co.submit_subjob(job, address, identity=who,
                                                        account=account)[0]})


# -- the door: a client's requests, served by the scheduler worker ---------------------
@shared_task(name=REQUEST, bind=True, track_started=False)
def coalloc_request(self: Any, *, rsl: str, barrier_timeout: float,
                    account: str | None = None, variables: dict[str, str] | None = None,
                    source: str = "<rsl>", submitter: str | None = None) -> dict[str, Any]:
    """Store and start a coallocated job owned by the verified signer; ``{"ok": {"job":
    id}}`` or the refusal as data (nothing stored then)."""
    co, who = scheduler_side(self.app), self.submitter(submitter)
    return answer(lambda: {"job": co.serve_request(
        who, rsl, account=account, barrier_timeout=barrier_timeout, variables=variables,
        source=source)})


@shared_task(name=ADD_SUBJOBS, bind=True, track_started=False)
def add_subjobs(self: Any, *, job: int, rsl: str, variables: dict[str, str] | None = None,
                source: str = "<rsl>", submitter: str | None = None) -> dict[str, Any]:
    """The owner adds subjobs before release; ``{"ok": {"labels": [...]}}``."""
    co, who = scheduler_side(self.app), self.submitter(submitter)
    return answer(lambda: {"labels": co.serve_add(who, job, rsl, variables=variables,
                                                  source=source)})


@shared_task(name=DELETE_SUBJOB, bind=True, track_started=False)
def delete_subjob(self: Any, *, job: int, label: str,
                  submitter: str | None = None) -> dict[str, Any]:
    """The owner deletes a subjob before release; ``{"ok": {"job": id}}``."""
    co, who = scheduler_side(self.app), self.submitter(submitter)
    return answer(lambda: {"job": co.delete_here(co.owned(job, who)[0], label)})


@shared_task(name=RELEASE_BARRIER, bind=True, track_started=False)
def release_barrier(self: Any, *, job: int, submitter: str | None = None) -> dict[str, Any]:
    """The owner releases the barrier now (BarrierNotReadyError unless every barrier
    subjob is in: the client waits for that itself); ``{"ok": {"job": id}}``."""
    co, who = scheduler_side(self.app), self.submitter(submitter)
    return answer(lambda: {"job": co.release_here(co.owned(job, who)[0], False)})


@shared_task(name=CANCEL, bind=True, track_started=False)
def cancel(self: Any, *, job: int, submitter: str | None = None) -> dict[str, Any]:
    """The owner cancels the whole job; ``{"ok": {"job": id, "notes": [...]}}``, the
    notes saying which subjob cancels are still under way (and why)."""
    co, who = scheduler_side(self.app), self.submitter(submitter)

    def cancel_it() -> dict[str, Any]:
        job_id, notes = co.cancel_noting(co.owned(job, who)[0])
        return {"job": job_id, "notes": notes}

    return answer(cancel_it)


@shared_task(name=STATUS, bind=True, track_started=False)
def status(self: Any, *, job: int, submitter: str | None = None) -> dict[str, Any]:
    """The job's snapshot for its owner or an operator; ``{"ok": {...}}``."""
    co, who = scheduler_side(self.app), self.submitter(submitter)
    admin = self.signed_as(Role.OPERATOR)
    return answer(lambda: co.serve_status(who, job, admin=admin))


@shared_task(name=RELEASE, bind=True)
def release(self: Any, results: Any = None, *, job: int) -> int:
    """Chord body: every subjob is submitted.  Nothing to decide (nor write) here: the
    barrier releases itself in the store (auto-release) and the scheduler's barrier
    watch settles the job then; how many subjobs the headers submitted."""
    return sum(1 for r in results or () if isinstance(r, dict) and r.get("gram_job"))


@shared_task(name=FAILED, bind=True)
def coalloc_failed(self: Any, task_id: str | None = None, *, job: int) -> str:
    """Chord error path: a header failed (it aborted the barrier with its reason, or the
    job had ended); settle cancels every subjob and FAILs the job."""
    return scheduler_side(self.app).settle(job).state.value


@shared_task(name=SETTLE, bind=True, ignore_result=True)
def settle(self: Any, *, job: int, deadline: float | None = None) -> str:
    """Settle the coallocated job's fate (:mod:`grid_tasks.duroc.settle`): sent when one
    of its subjobs ended, and as the deadline task (``deadline``: the job's barrier
    deadline; a task due before it, a hop, sends the next one while the job waits)."""
    co = scheduler_side(self.app)
    plan = co.settle_plan(job)
    status = plan.status
    if deadline is not None and status is not None and status.barrier == "waiting" \
            and not status.terminal:
        send_deadline(self.app, job, deadline,
                      hop_s=DEADLINE_HOP * co.services.settings.visibility_timeout)
    return status.state.value if status is not None else "?"

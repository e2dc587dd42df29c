"""Celery tasks of DUROC coallocation: the chord's header watchers, body and error path.

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

from typing import Any

from celery import shared_task

from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
from grid_tasks.duroc.control import Coallocator
from grid_tasks.duroc.door import (
    ADD_SUBJOBS, CANCEL, DELETE_SUBJOB, RELEASE_BARRIER, REQUEST, STATUS, SUBMIT_SUBJOB,
)
from grid_tasks.effects import FAILED, RELEASE, SETTLE, WATCH
from grid_tasks.gram.door import answer
from grid_tasks.security.roles import Role
from grid_tasks.services import per_process, services_for
#: Longest a header task waits for entries before re-queuing itself (seconds).
SLICE_S = 0.5



def coallocator_for(app: Any) -> Coallocator:
    """This process's Coallocator on its worker's Services (never closed)."""
    return per_process(app, "coallocator", lambda: Coallocator(services_for(app)))


# track_started off: a header's STARTED state in the result backend would cost a round
# trip before every run (every slice) and nobody reads it: a subjob's progress is in
# the coordination store and in SQL (subjob_states), its end in the chord's join.
@shared_task(name=WATCH, bind=True, acks_late=True, reject_on_worker_lost=True,
             max_retries=None, track_started=False)
def watch_subjob(self: Any, *, rm: str, job: int, address: int, deadline: float,
                slice_s: float = SLICE_S, submitter: str | None = None,
                account: str | None = None) -> dict[str, Any]:
    """Chord header: submit one subjob through GRAM, finish when all its processes are in
    the barrier; fails (strict) when it cannot start or dies first.

    Every delivery is counted (:meth:`Coallocator.header_deliveries`), redeliveries of
    a message whose worker died mid-task apart: the proof that acks-late did its job.
    """
    co = coallocator_for(self.app)
    # the job's owner, vouched for by the scheduler that sent the chord (on later
    # slices by this gatekeeper, re-queuing the header)
    who = self.submitter(submitter)
    delivery = self.request.delivery_info or {}
    url, info = co.first_look(job, address, self.request.id, bool(delivery.get("redelivered")))
    result = co.watch_step(job, address, deadline, slice_s, url=url, info=info, identity=who,
                           account=account)
    if result is None:
        raise self.retry(countdown=0, kwargs={**(self.request.kwargs or {}), "submitter": who})
    return result


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
    co, who = coallocator_for(self.app), self.submitter(submitter)
    return answer(lambda: {"job": co.serve_request(
        who, rsl, account=account, barrier_timeout=barrier_timeout, variables=variables,
        source=source)})


@shared_task(name=ADD_SUBJOBS, bind=True, track_started=False)
def add_subjobs(self: Any, *, job: int, rsl: str, variables: dict[str, str] | None = None,
                source: str = "<rsl>", submitter: str | None = None) -> dict[str, Any]:
    """The owner adds subjobs before release; ``{"ok": {"labels": [...]}}``."""
    co, who = coallocator_for(self.app), self.submitter(submitter)
    return answer(lambda: {"labels": co.serve_add(who, job, rsl, variables=variables,
                                                  source=source)})


@shared_task(name=DELETE_SUBJOB, bind=True, track_started=False)
def delete_subjob(self: Any, *, job: int, label: str,
                  submitter: str | None = None) -> dict[str, Any]:
    """The owner deletes a subjob before release; ``{"ok": {"job": id}}``."""
    co, who = coallocator_for(self.app), self.submitter(submitter)
    return answer(lambda: {"job": co.delete_here(co.owned(job, who)[0], label)})


@shared_task(name=RELEASE_BARRIER, bind=True, track_started=False)
def release_barrier(self: Any, *, job: int, submitter: str | None = None) -> dict[str, Any]:
    """The owner releases the barrier now (BarrierNotReadyError unless every barrier
    subjob is in: the client waits for that itself); ``{"ok": {"job": id}}``."""
    co, who = coallocator_for(self.app), self.submitter(submitter)
    return answer(lambda: {"job": co.release_here(co.owned(job, who)[0], False)})


@shared_task(name=CANCEL, bind=True, track_started=False)
def cancel(self: Any, *, job: int, submitter: str | None = None) -> dict[str, Any]:
    """The owner cancels the whole job; ``{"ok": {"job": id}}``."""
    co, who = coallocator_for(self.app), self.submitter(submitter)
    return answer(lambda: {"job": co.cancel_here(co.owned(job, who)[0])})


@shared_task(name=STATUS, bind=True, track_started=False)
def status(self: Any, *, job: int, submitter: str | None = None) -> dict[str, Any]:
    """The job's snapshot for its owner or an operator; ``{"ok": {...}}``."""
    co, who = coallocator_for(self.app), self.submitter(submitter)
    admin = self.signed_as(Role.OPERATOR)
    return answer(lambda: co.serve_status(who, job, admin=admin))


@shared_task(name=RELEASE, bind=True, max_retries=None)
def release(self: Any, results: Any = None, *, job: int) -> bool:
    """Chord body: release the barrier (re-queued while subjobs added later are not in)."""
    done = coallocator_for(self.app).release_step(job)
    if done is None:
        raise self.retry(countdown=0.05)
    return bool(done)


@shared_task(name=FAILED, bind=True)
def coalloc_failed(self: Any, task_id: str | None = None, *, job: int) -> bool:
    """Chord error path: cancel every subjob of the job and release its resources."""
    co = coallocator_for(self.app)
    reason = co.failure_reason(job)
    barrier = SqlBarrier.TIMED_OUT if "barrier timeout" in reason else SqlBarrier.FAILED
    if reason == "cancelled by user":
        barrier = SqlBarrier.CANCELLED
    return co.terminate(job, reason, barrier)


@shared_task(name=SETTLE, bind=True, ignore_result=True)
def settle(self: Any, *, job: int) -> str:
    """A subjob's GRAM job ended: settle the coallocated job's fate by its start types
    (a strict subjob failing after release kills the others; all ended -> DONE)."""
    return coallocator_for(self.app).subjob_states(job).state.value

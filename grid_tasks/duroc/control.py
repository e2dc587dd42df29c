"""The DUROC control side: a multi-request becomes a Celery chord of subjob submissions.

A client asks the scheduler through the door (:mod:`grid_tasks.duroc.client`);
the scheduler worker's ``request_here`` stores one ``CoallocatedJob`` row with a
``Subjob`` row per component (and its ``barrier_deadline``), creates the job's
coordination store and sends a flat chord: one ``grid_tasks.duroc.tasks.watch_subjob``
header task per barrier subjob, vouching for the job's owner at its gatekeeper,
routed to its RM's gatekeeper queue, submits the subjob through GRAM (idempotently)
and returns.  Nobody polls while the subjob's processes start: the barrier is
auto-release (the store opens it in the very entry, or deletion, that completes it),
and the scheduler's barrier watch (:mod:`grid_tasks.duroc.barrier_watch`) blocks on
the job's event stream.

The job's state has one writer, the settle (:mod:`grid_tasks.duroc.settle`): run
by the watch (release, abort, keys lost, deadline), by the deadline task due at
``barrier_deadline``, by the settle task a subjob's end sends, by the chord's body
and error path, and by the owner's actions here (release, cancel, add, delete).
A strict subjob failing before the release aborts the barrier (nobody passes it)
and the settle cancels every subjob, FAILs the job and revokes its store access.
After the release a subjob's end settles the job's fate by its start type
(:func:`grid_tasks.duroc.records.final_state`).

acks-late makes a gatekeeper killed mid-header get the very message back (every
delivery is counted: :meth:`Coallocator.header_deliveries`).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Any

from celery import chord
from sqlalchemy import update

from grid_tasks.db import ConcurrentUpdateError, session_scope
from grid_tasks.db.models import Job
from grid_tasks.duroc.barrier_watch import BarrierWatch
from grid_tasks.duroc.control_door import DoorService
from grid_tasks.duroc.control_rows import (
    DEFAULT_BARRIER_TIMEOUT_S, URL_KEY, check_rms as _check_rms, coalloc_row as _coalloc,
    detach as _detach, insert_coallocation, labels as _labels, link_subjob,
    retrying as _retrying, submission_facts,
)
from grid_tasks.duroc.control_structure import StructureChanges
from grid_tasks.duroc.control_watch import HeaderSteps
from grid_tasks.duroc.door import SUBMIT_SUBJOB
from grid_tasks.duroc.errors import CoallocFinishedError, CoallocRequestError
from grid_tasks.duroc.records import parse_job_ref, store_id
from grid_tasks.duroc.settle import CANCELLED_REASON, Settling
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import BarrierAbortedError, JobNotFoundError
from grid_tasks.duroc.store_models import BarrierState, SubjobSpec
from grid_tasks.effects import (
    failed_signature, release_signature, send_deadline, watch_signature,
)
from grid_tasks.errors import NotFoundError
from grid_tasks.gram.door import ask
from grid_tasks.gram.errors import JobFinishedError
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import cancel_job, store_submission
from grid_tasks.rsl import lower
from grid_tasks.runtime.env import runtime_environment
from grid_tasks.scheduling.runner import iterate_here
from grid_tasks.queues import gatekeeper_queue
from grid_tasks.scheduling.slurm_cancel import request_cancel
from grid_tasks.scheduling.slurm_jobs import (slurm_rm_names, slurm_side, slurm_stopper,
                                              store_on_slurm)
from grid_tasks.services import Services
from grid_tasks.slurm.errors import SlurmError
from grid_tasks.states import JobState, SubjobStartType

log = logging.getLogger(__name__)
#: The deadline task hops at most this share of the broker's visibility timeout at a
#: time: a Redis broker hands an unacknowledged ETA message out again after it.
DEADLINE_HOP = 0.8


class Coallocator(HeaderSteps, StructureChanges, DoorService, Settling):
    """DUROC control operations as the grid's services run them, over one process's
    :class:`~grid_tasks.services.Services`: the scheduler serves an application's
    requests (:class:`~grid_tasks.duroc.client.CoallocClient`) with the ``*_here``
    methods, gatekeepers run the header steps."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._store: Any = None
        self._watch: BarrierWatch | None = None

    @property
    def barrier_watch(self) -> BarrierWatch:
        """This process's barrier watch (started by its first job, or :meth:`start`)."""
        if self._watch is None:
            self._watch = BarrierWatch(self)
        return self._watch

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = CoordinationStore.from_settings(self.services.settings)
        return self._store

    # -- request (run by the scheduler worker: see control_door) -----------------------
    def request_here(self, rsl: str, *, owner: str, account: str | None = None,
                     barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT_S,
                     variables: dict[str, str] | None = None, source: str = "<rsl>",
                     lowered: list[Any] | None = None) -> int:
        """Store and start a coallocated job owned by ``owner`` (the verified
        submitter); its id.  ``account``: the local account its subjobs ask for (the
        grid map's first by default); ``lowered``: ``rsl`` lowered already (with
        ``variables``), not parsed again."""
        if not barrier_timeout or barrier_timeout <= 0:
            raise CoallocRequestError(f"barrier_timeout must be positive, not {barrier_timeout!r}")
        subs = lowered if lowered is not None else lower(
            rsl, variables, source=source,
            max_substitution=self.services.settings.rsl_max_substitution)
        labels = _labels(subs, set())
        deadline = time.time() + float(barrier_timeout)
        with session_scope(self.services.sessions) as session:
            _check_rms(session, subs, slurm_rm_names(self.services.settings))
            job_id = insert_coallocation(session, rsl, owner, barrier_timeout, subs, labels,
                                         datetime.fromtimestamp(deadline, timezone.utc))
        sid = store_id(job_id)
        # the barrier expects the processes that start (one for jobType single), not count
        self.store.create_job(sid, [SubjobSpec(label, sub.processes(), sub.start_type,
                                               sub.comms_type) for sub, label in zip(subs, labels)],
                              ttl_s=float(barrier_timeout) + 24 * 3600, auto_release=True)
        self.store.grant_access(sid, scripts_loaded=True,  # by create_job
                                remember=(URL_KEY.format(job_id), int(barrier_timeout) + 24 * 3600))
        self._start(job_id, [(a, sub) for a, sub in enumerate(subs)], deadline,
                    owner=owner, account=account)
        # after the chord: the subjobs' start waits for neither
        self.barrier_watch.watch(job_id, deadline)
        send_deadline(self.services.app, job_id, deadline,
                      hop_s=DEADLINE_HOP * self.services.settings.visibility_timeout)
        return job_id

    def _start(self, job_id: int, subs: list[tuple[int, Any]], deadline: float, *,
               owner: str, account: str | None) -> None:
        """Submit no-barrier subjobs now; send the chord of watchers for the rest, each
        vouching for ``owner`` at its gatekeeper (this worker signs as a scheduler)."""
        watched = [(a, s) for a, s in subs if s.start_type is not SubjobStartType.NO_BARRIER]
        for address, sub in subs:
            if sub.start_type is SubjobStartType.NO_BARRIER:
                self.ask_submit(job_id, address, sub.rm_contact, owner, account)
        if not watched:
            self.store.release(store_id(job_id), require_complete=False)
            self.settle(job_id)
            return
        header = [watch_signature(self.services.app, job_id, a, s.rm_contact, deadline,
                                  submitter=owner, account=account)
                  for a, s in watched]
        body = release_signature(self.services.app, job_id)
        body.link_error(failed_signature(self.services.app, job_id))
        result = chord(header, app=self.services.app)(body)
        # Nobody waits on the chord's result here: detach it from the backend now, or its
        # __del__ talks to Redis whenever it is collected (possibly after shutdown).
        _detach(result)

    # -- subjob submission and watching (run by the header tasks) -------------------------
    def submit_subjob(self, job_id: int, address: int, iterate: bool = False,
                      url: bytes | None = None, identity: str | None = None,
                      account: str | None = None) -> tuple[int, bool]:
        """Submit subjob ``address`` through GRAM once (idempotent): (its GRAM job id,
        stored by this call).  The GRAM job is stored linked to its subjob, in one
        transaction; a retry after a failure in between links it then.  ``iterate``:
        run the RM's iteration here at once instead of triggering it (a header task, in
        its gatekeeper: the subjob's start then waits for no other task).  ``identity``:
        the submitter as its gatekeeper verified it (mapped through its grid map);
        ``account``: the local account asked for (the grid map's first by default)."""
        with session_scope(self.services.sessions) as session:
            sub = submission_facts(session, job_id, address)
        if sub.gram_job_id is not None:
            return int(sub.gram_job_id), False
        rsl, rm, label = sub.rsl, sub.rm, sub.label or str(address)
        left = sub.barrier_timeout or DEFAULT_BARRIER_TIMEOUT_S
        if url is None:  # (a header task has read it already: note_delivery)
            url = self.store.client.get(URL_KEY.format(job_id))
        if url is None:
            raise CoallocFinishedError(f"coallocated job {job_id} has no runtime access any more")
        env = runtime_environment(url.decode(), store_id(job_id), address, label,
                                  barrier_timeout=left)
        (request,) = lower(rsl, max_substitution=self.services.settings.rsl_max_substitution)

        def link(session: Any, gram_id: int) -> None:  # the subjob row, same transaction
            link_subjob(session, job_id, address, gram_id)  # CoallocFinishedError if deleted

        gram_id, stored = self._store_subjob(
            rm or request.rm_contact, rsl, request, account=account, identity=identity,
            env=env, key=f"duroc-{job_id}-{address}", coallocation=(job_id, label),
            link=link, iterate=iterate)
        if not stored:  # stored by an earlier attempt that failed before linking
            try:
                _retrying(lambda: self._link(job_id, address, label, gram_id))
            except CoallocFinishedError:  # the subjob was deleted meanwhile
                self._cancel_gram(gram_id)
                raise
        self._cancel_if_gone(job_id, address, gram_id)
        return gram_id, stored

    def _store_subjob(self, rm: str | None, rsl: str, request: Any, *, account: str | None,
                      identity: str | None, env: dict[str, str], key: str,
                      coallocation: tuple[int, str], link: Any, iterate: bool
                      ) -> tuple[int, bool]:
        """Store a subjob's GRAM job (linked by ``link`` in the same transaction); (its
        id, stored by this call).  On a Slurm RM it is handed to Slurm in that
        transaction (Slurm places it: no node check, no iteration); on a native RM
        the RM's iteration runs here when ``iterate``."""
        side = slurm_side(self.services.settings, rm) if rm else None
        if side is not None:
            gram_id, _, stored = store_on_slurm(
                self.services, side, rsl, None, request, {"user": account},
                identity=identity, idempotency_key=key, extra_env=env,
                coallocation=coallocation, within=link)
            return gram_id, stored
        # iterating here needs the RM named (else the stored job's RM is triggered); the
        # job's events then go with the iteration lock's round trip
        held = Outbox() if iterate and rm else None
        gram_id, _, stored = store_submission(
            self.services, rsl, request, rm, {"user": account}, extra_env=env,
            idempotency_key=key, coallocation=coallocation, within=link, hold=held,
            identity=identity)
        if stored and held is not None:
            iterate_here(self.services, rm, events=held.events, quick=True)
        return gram_id, stored

    def ask_submit(self, job_id: int, address: int, rm: str, owner: str | None = None,
                   account: str | None = None) -> int:
        """Have ``rm``'s gatekeeper submit a no-barrier subjob for ``owner`` (vouched for
        by this scheduler worker); its GRAM job id."""
        reply = ask(self.services.app, SUBMIT_SUBJOB, rm,
                    {"job": job_id, "address": address, "submitter": owner,
                     "account": account},
                    shadow=f"duroc-submit coalloc-{job_id}/{address} on {rm}")
        return int(reply["gram_job"])

    def _link(self, job_id: int, address: int, label: str, gram_id: int) -> None:
        """Link subjob and GRAM job both ways.

        The GRAM row is written with a targeted UPDATE that leaves its optimistic-lock
        ``version`` alone: the RM's iteration (triggered by this very submission) may
        hold the row loaded at that moment, and an ORM flush here would bump the
        version under it and make the iteration lose its start decision.
        """
        with session_scope(self.services.sessions) as session:
            link_subjob(session, job_id, address, gram_id)  # CoallocFinishedError if deleted
            session.execute(update(Job).where(Job.id == gram_id, Job.coallocation_id.is_(None))
                            .values(coallocation_id=job_id, coallocation_label=label)
                            .execution_options(synchronize_session=False))

    def _cancel_if_gone(self, job_id: int, address: int, gram_id: int) -> None:
        """A subjob submitted while the job was cancelled, failed or lost its coordination
        state, or the subjob deleted: cancel it.  Read after the link committed, so a
        settle failing the job meanwhile either sees this link or is seen here."""
        try:
            snap = self.store.snapshot(store_id(job_id))
            gone = snap.state is BarrierState.ABORTED or all(
                s.address != address for s in snap.subjobs)
        except JobNotFoundError:
            gone = True
        if not gone:
            with session_scope(self.services.sessions) as session:
                gone = JobState(_coalloc(session, job_id).state).terminal
        if gone:
            self._cancel_gram(gram_id)

    # -- release and cancel (the owner's actions: each ends in a settle) -------------------
    def _cancel_gram(self, gram_id: int) -> str | None:
        """Cancel a subjob's GRAM job: a native one here (its record, its cancel flag for
        the nodes, which its job managers watch).  A Slurm one is ``scancel``ed where
        Slurm's commands are: here when this process is its RM's gatekeeper (a header's
        submission cancelling its own subjob), else by its RM's follower, the one
        writer of the job, from a cancel recorded in SQL
        (:mod:`~grid_tasks.scheduling.slurm_cancel`): nobody waits on a gatekeeper, and
        one that is down applies it once back.  What the caller is told of a cancel
        still under way (None: done, or nothing left to cancel)."""
        slurm = self._on_slurm(gram_id)
        if slurm is not None and not self._serves(slurm[0]):
            return self._cancel_by_follower(gram_id, *slurm)
        side = slurm_side(self.services.settings, slurm[0]) if slurm is not None else None
        for attempt in range(8):
            try:
                cancel_job(self.services, gram_id,
                           stop=slurm_stopper(side) if side is not None else None)
                return None
            except (JobFinishedError, NotFoundError):
                return None
            except SlurmError as exc:  # Slurm did not take it now: its follower retries
                log.warning("subjob job %s: scancel failed here (%s); left to the follower",
                            gram_id, exc)
                return self._cancel_by_follower(gram_id, *slurm)  # type: ignore[misc]
            except ConcurrentUpdateError:
                time.sleep(0.02 * (attempt + 1))
        return None

    def _serves(self, rm: str) -> bool:
        """Whether this process is a worker consuming ``rm``'s gatekeeper queue."""
        return gatekeeper_queue(rm) in (self.services.app.amqp.queues.consume_from or {})

    def _on_slurm(self, gram_id: int) -> tuple[str, str | None] | None:
        """(RM, owner) of a GRAM job on a Slurm RM not ended yet; None otherwise."""
        slurm_rms = slurm_rm_names(self.services.settings)
        if not slurm_rms:
            return None
        with session_scope(self.services.sessions) as session:
            row = session.get(Job, gram_id)
            if row is None or row.rm not in slurm_rms or JobState(row.state).terminal:
                return None
            return str(row.rm), row.owner

    def _cancel_by_follower(self, gram_id: int, rm: str, owner: str | None) -> str | None:
        """Record the cancel of a Slurm subjob for its RM's follower (the scheduler
        cancels for the job's ``owner``, whom it checked); the note for the caller."""
        asked = request_cancel(self.services, gram_id, owner)
        if asked is None:
            return None  # ended meanwhile: its follower records the end
        if not asked.followed:
            log.warning("%s", asked.note)
        return asked.note

    def cancel_here(self, job: int | str) -> int:
        """Cancel the whole job at any stage; its id.  CoallocFinishedError once ended."""
        return self.cancel_noting(job)[0]

    def cancel_noting(self, job: int | str) -> tuple[int, list[str]]:
        """:meth:`cancel_here`, and what the owner is told of subjob cancels still
        under way (a Slurm RM whose gatekeeper is unreachable: retried until it answers)."""
        job_id = self._existing(job, changing=True)
        plan = self.settle_plan(job_id, cancel=CANCELLED_REASON)
        if plan.failed:
            return job_id, list(plan.notes)
        # the barrier watch may have settled the abort this settle made, first: its
        # cancels may still be under way, so make them here too (each is idempotent)
        if plan.status is None or plan.status.reason != CANCELLED_REASON:
            raise CoallocFinishedError(f"coallocated job {job_id} has ended already")
        linked = _retrying(lambda: self._linked(job_id))
        return job_id, [note for gram_id in linked if (note := self._cancel_gram(gram_id))]

    def release_here(self, job: int | str, wait_for_subjobs: bool = True,
                     timeout: float | None = None) -> int:
        """Release the barrier: waiting (up to ``timeout``) for every barrier subjob to be
        in, or at once (BarrierNotReadyError when some are not); the job's id.  The
        release itself is recorded by the settle that follows."""
        job_id = self._existing(job)
        sid = store_id(job_id)
        try:
            if wait_for_subjobs:
                self.store.await_entries(sid, None, timeout)
            self.store.release(sid, require_complete=True)
        except (BarrierAbortedError, JobNotFoundError):
            pass  # the settle records why
        status = self.settle(job_id)
        if status.state is JobState.FAILED:
            raise CoallocFinishedError(f"coallocated job {job_id} was aborted: {status.reason}")
        return job_id

    def _existing(self, job: int | str, changing: bool = False) -> int:
        """The job's id (NotFoundError if unknown); with ``changing``, refuse an ended job."""
        job_id = parse_job_ref(job)
        with session_scope(self.services.sessions) as session:
            row = _coalloc(session, job_id)
            if changing and JobState(row.state).terminal:
                raise CoallocFinishedError(
                    f"coallocated job {job_id} is {JobState(row.state).value}: its subjobs "
                    "cannot change any more")
        return job_id

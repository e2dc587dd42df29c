"""The DUROC control side: a multi-request becomes a Celery chord of subjob watchers.

A client asks the scheduler through the door (:mod:`grid_tasks.duroc.client`);
the scheduler worker's ``request_here`` stores one ``CoallocatedJob`` row with a
``Subjob`` row per component, creates the job's coordination store and sends a flat
chord: one ``grid_tasks.duroc.tasks.watch_subjob`` header task per barrier subjob,
vouching for the job's owner at its gatekeeper, routed to its RM's gatekeeper
queue, submits the subjob through GRAM (idempotently) and completes when all its
processes are in the barrier.  The barrier is auto-release: the store opens it in the
very entry (or deletion) that completes it; the watchers and the chord body
(``...tasks.release``) record the release in SQL.  A strict subjob that fails first
aborts the barrier (nobody passes it) and the chord's error path
(``...tasks.coalloc_failed``) cancels every subjob, FAILs the job and revokes its
store access.  After the release a subjob's end settles the job's fate by its start
type (:func:`grid_tasks.duroc.records.final_state`).

Header tasks never hold a worker slot for long: each run waits at most ``slice_s``
for entries, then re-queues itself with ``retry`` (same task id, counted once by the
chord); acks-late makes a gatekeeper killed mid-header get the very message back
(every delivery is counted: :meth:`Coallocator.header_deliveries`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import chord
from sqlalchemy import update

from grid_tasks.db import ConcurrentUpdateError, session_scope
from grid_tasks.db.models import CoallocatedJob, Job
from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
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
from grid_tasks.duroc.records import (
    CoallocStatus, coalloc_status, final_state, mark, parse_job_ref, store_id,
)
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import (
    BarrierAbortedError, BarrierNotReadyError, JobNotFoundError,
)
from grid_tasks.duroc.store_models import BarrierState, SubjobSpec
from grid_tasks.duroc.waiting import announce
from grid_tasks.effects import (
    failed_signature, release_signature, settle_signature, watch_signature,
)
from grid_tasks.errors import NotFoundError
from grid_tasks.gram.door import ask
from grid_tasks.gram.errors import JobFinishedError
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import cancel_job, store_submission
from grid_tasks.rsl import lower
from grid_tasks.runtime.env import runtime_environment
from grid_tasks.scheduling.runner import iterate_here
from grid_tasks.services import Services
from grid_tasks.states import JobState, SubjobStartType

log = logging.getLogger(__name__)


class Coallocator(HeaderSteps, StructureChanges, DoorService):
    """DUROC control operations as the grid's services run them, over one process's
    :class:`~grid_tasks.services.Services`: the scheduler serves an application's
    requests (:class:`~grid_tasks.duroc.client.CoallocClient`) with the ``*_here``
    methods, gatekeepers run the header steps."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._store: Any = None

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
            _check_rms(session, subs)
            job_id = insert_coallocation(session, rsl, owner, barrier_timeout, subs, labels)
        sid = store_id(job_id)
        self.store.create_job(sid, [SubjobSpec(label, sub.count, sub.start_type, sub.comms_type)
                                    for sub, label in zip(subs, labels)],
                              ttl_s=float(barrier_timeout) + 24 * 3600, auto_release=True)
        self.store.grant_access(sid, scripts_loaded=True,  # by create_job
                                remember=(URL_KEY.format(job_id), int(barrier_timeout) + 24 * 3600))
        self._start(job_id, [(a, sub) for a, sub in enumerate(subs)], deadline,
                    owner=owner, account=account)
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
            self.release_step(job_id)
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

        rm = rm or request.rm_contact
        # iterating here needs the RM named (else the stored job's RM is triggered); the
        # job's events then go with the iteration lock's round trip
        held = Outbox() if iterate and rm else None
        gram_id, stored, _ = store_submission(
            self.services, rsl, request, rm, {"user": account}, extra_env=env,
            idempotency_key=f"duroc-{job_id}-{address}", coallocation=(job_id, label),
            within=link, hold=held, identity=identity)
        if stored and held is not None:
            iterate_here(self.services, rm, events=held.events, quick=True)
        if not stored:  # stored by an earlier attempt that failed before linking
            try:
                _retrying(lambda: self._link(job_id, address, label, gram_id))
            except CoallocFinishedError:  # the subjob was deleted meanwhile
                self._cancel_gram(gram_id)
                raise
        self._cancel_if_gone(job_id, address, gram_id)
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
        """A subjob submitted while the job was cancelled or the subjob deleted: cancel it."""
        try:
            snap = self.store.snapshot(store_id(job_id))
            gone = snap.state is BarrierState.ABORTED or all(
                s.address != address for s in snap.subjobs)
        except JobNotFoundError:
            gone = True
        if gone:
            self._cancel_gram(gram_id)

    # -- release, failure, cancel ------------------------------------------------------
    def release_step(self, job_id: int) -> bool | None:
        """Release if every barrier subjob is in: True, None (not yet), False (aborted)."""
        try:
            self.store.release(store_id(job_id), require_complete=True)
        except BarrierNotReadyError:
            return None
        except (BarrierAbortedError, JobNotFoundError):
            return False

        def record() -> tuple[bool, bool]:
            with session_scope(self.services.sessions) as session:
                row = session.get(CoallocatedJob, job_id)
                if row is None or row.barrier_state is not SqlBarrier.WAITING:
                    return False, False
                mark(row, JobState.ACTIVE, SqlBarrier.RELEASED, None)
                return True, any(s.gram_job is not None and JobState(s.gram_job.state).terminal
                                 for s in row.subjobs)
        changed, ended = _retrying(record)
        if changed:
            announce(self.store.client, job_id, JobState.ACTIVE.value)
        if ended:
            # The store released the barrier (auto-release) before this SQL record: a
            # subjob that ended in between had its settle find the job still waiting.
            # Settled by its own task: a failure there must not reach the chord's errback.
            settle_signature(self.services.app, job_id).apply_async()
        return True

    def terminate(self, job_id: int, reason: str, barrier: SqlBarrier) -> bool:
        """Abort the barrier, cancel every GRAM subjob, FAIL the job, revoke its access."""
        sid = store_id(job_id)
        try:
            self.store.abort(sid, reason)
        except JobNotFoundError:
            pass
        changed: list[bool] = []

        def record() -> list[int]:
            with session_scope(self.services.sessions) as session:
                row = _coalloc(session, job_id)
                was_released = row.barrier_state is SqlBarrier.RELEASED
                changed[:] = [mark(row, JobState.FAILED, None if was_released else barrier,
                                   reason)]
                return [s.gram_job_id for s in row.subjobs if s.gram_job_id is not None]
        for gram_id in _retrying(record):
            self._cancel_gram(gram_id)
        if changed and changed[0]:
            announce(self.store.client, job_id, JobState.FAILED.value)
        try:
            self.store.revoke_access(sid)
        except Exception:  # noqa: BLE001 - best effort: the key TTL bounds the ACL anyway
            pass
        return bool(changed and changed[0])

    def _cancel_gram(self, gram_id: int) -> None:
        """Cancel a subjob's GRAM job here (its record, its cancel flag for the nodes)."""
        for attempt in range(8):
            try:
                cancel_job(self.services, gram_id)
                return
            except (JobFinishedError, NotFoundError):
                return
            except ConcurrentUpdateError:
                time.sleep(0.02 * (attempt + 1))

    def failure_reason(self, job_id: int) -> str:
        """Why the barrier was aborted (as a header task recorded it), for the error path."""
        try:
            snap = self.store.snapshot(store_id(job_id))
        except JobNotFoundError:
            return "coordination state lost"
        return snap.reason or "a subjob watcher failed"

    def cancel_here(self, job: int | str) -> int:
        """Cancel the whole job at any stage; its id.  CoallocFinishedError once ended."""
        job_id = self._existing(job)
        if not self.terminate(job_id, "cancelled by user", SqlBarrier.CANCELLED):
            raise CoallocFinishedError(f"coallocated job {job_id} has ended already")
        return job_id

    def release_here(self, job: int | str, wait_for_subjobs: bool = True,
                     timeout: float | None = None) -> int:
        """Release the barrier: waiting (up to ``timeout``) for every barrier subjob to be
        in, or at once (BarrierNotReadyError when some are not); the job's id."""
        job_id = self._existing(job)
        sid = store_id(job_id)
        if wait_for_subjobs:
            self.store.await_entries(sid, None, timeout)
        else:
            self.store.release(sid, require_complete=True)
        if self.release_step(job_id) is False:
            raise CoallocFinishedError(f"coallocated job {job_id} was aborted: "
                                       f"{self.failure_reason(job_id)}")
        return job_id

    # -- observation ------------------------------------------------------------------------
    def subjob_states(self, job: int | str) -> CoallocStatus:
        """The job's snapshot; settles its fate once released subjobs have ended."""
        job_id = self._existing(job)
        try:
            snap = self.store.snapshot(store_id(job_id))
            infos, released = {s.address: s for s in snap.subjobs}, snap.state
        except JobNotFoundError:
            infos, released = {}, None
        with session_scope(self.services.sessions) as session:
            row = _coalloc(session, job_id)
            status = coalloc_status(row, infos)
            lagging = (released is BarrierState.RELEASED and not status.terminal
                       and row.barrier_state is SqlBarrier.WAITING)
            fate = None
            if not status.terminal and row.barrier_state is SqlBarrier.RELEASED:
                fate = final_state(row)
            overdue = (row.barrier_state is SqlBarrier.WAITING and row.barrier_timeout
                       and time.time() > row.created_at.timestamp() + row.barrier_timeout + 5)
        if lagging:  # the store released (auto-release) before anyone recorded it in SQL
            self.release_step(job_id)
        elif fate is not None and fate[0] is JobState.FAILED:
            self.terminate(job_id, fate[1] or "a strict subjob failed", SqlBarrier.FAILED)
        elif fate is not None:
            _retrying(lambda: self._mark_done(job_id, fate[1]))
        elif overdue and not status.terminal:  # no watcher acted (e.g. no gatekeeper alive)
            self.terminate(job_id, "barrier timeout", SqlBarrier.TIMED_OUT)
        else:
            return status
        return self.subjob_states(job_id)

    def _mark_done(self, job_id: int, reason: str | None) -> None:
        with session_scope(self.services.sessions) as session:
            changed = mark(_coalloc(session, job_id), JobState.DONE, None, reason)
        if changed:
            announce(self.store.client, job_id, JobState.DONE.value)
        try:
            self.store.purge(store_id(job_id))
        except JobNotFoundError:
            pass

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

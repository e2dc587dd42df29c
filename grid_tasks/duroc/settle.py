"""The one writer of a coallocated job's fate: :meth:`Settling.settle` (a mixin of
:class:`~grid_tasks.duroc.control.Coallocator`).

Nothing else writes a ``CoallocatedJob`` row's state or barrier, nor its subjob rows'
``state`` and ``checked_in``: the header tasks only submit subjobs and change the
coordination store (abort, leave the barrier), and every event that may decide the
job's fate makes one settle look at the store and at SQL and write what follows:

* a subjob's GRAM job ending (:func:`grid_tasks.effects.announce` sends the settle
  task after the GRAM record commits);
* the barrier timeout (a deadline settle task, due at ``barrier_deadline``, and the
  scheduler's barrier watch: :mod:`grid_tasks.duroc.barrier_watch`);
* the store releasing or aborting the barrier, or losing the job's keys (the watch);
* the owner's actions: release, cancel, add and delete (the door tasks run it).

A settle is idempotent and safe to run concurrently: each transition is conditional
on the row's current state under its optimistic lock, so the release is recorded
once, and the first ending stands.  Reads (:meth:`subjob_states`) never settle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import object_session

from grid_tasks.db import session_scope
from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
from grid_tasks.duroc.control_rows import coalloc_row, linked_gram_jobs, retrying
from grid_tasks.duroc.errors import ended_outside_barrier
from grid_tasks.duroc.records import (
    CoallocStatus, coalloc_status, final_state, mark, parse_job_ref, store_id,
)
from grid_tasks.duroc.store_errors import (
    JobNotFoundError, StructureFrozenError, SubjobNotFoundError,
)
from grid_tasks.duroc.store_models import BarrierState, JobSnapshot
from grid_tasks.duroc.waiting import announce
from grid_tasks.gram.records import Outbox, finish
from grid_tasks.scheduling.slurm_jobs import SLURM
from grid_tasks.services import Services
from grid_tasks.states import JobState, MauiJobState, SubjobStartType

#: The reason of a job whose coordination state vanished before its barrier's release.
LOST_REASON = ("coordination state lost before the barrier release: the job's barrier keys "
               "are gone from the coordination store (Redis restarted empty or flushed)")
#: A job younger than this (seconds) with no coordination keys is being created (its SQL
#: rows come first), not lost: the watch looks again, a second later.
LOST_GRACE_S = 5.0
#: The store's abort reason of a job the owner cancelled.
CANCELLED_REASON = "cancelled by user"
#: How early (seconds) a settle may run and still count the barrier as timed out: a
#: deadline task's ETA and the watch's clock may fire a little before ``barrier_deadline``.
DEADLINE_SLACK_S = 0.2


@dataclass
class Plan:
    """What one settle decided inside its transaction, and does after the commit."""

    status: CoallocStatus | None = None
    #: JobState values to announce on the job's channel, in order
    announce: list[str] = field(default_factory=list)
    #: a store change to make first, then settle again (the store decides the barrier)
    abort: str | None = None
    leave: list[str] = field(default_factory=list)
    failed: str | None = None  # the job was FAILED by this settle, for this reason
    done: bool = False
    released: bool = False  # the release was recorded by this settle
    #: the GRAM records' announcements (subjobs ended with the job), sent after the commit
    outbox: Outbox = field(default_factory=Outbox)
    #: subjob cancels still under way after the commit, as the owner is told of them
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.announce)


def barrier_for(reason: str) -> SqlBarrier:
    """The SQL barrier state of a job aborted in the store for ``reason``."""
    if reason == CANCELLED_REASON:
        return SqlBarrier.CANCELLED
    return SqlBarrier.TIMED_OUT if "barrier timeout" in reason else SqlBarrier.FAILED


def deadline_of(row: Any) -> float:
    """The job's barrier deadline (epoch seconds): ``barrier_deadline``, else created +
    timeout (rows written before the deadline was)."""
    if row.barrier_deadline is not None:
        return float(row.barrier_deadline.timestamp())
    return float(row.created_at.timestamp()) + float(row.barrier_timeout or 0)


class Settling:
    """:meth:`settle` and the pure read :meth:`subjob_states`; the Coallocator provides
    services, store and ``_cancel_gram``."""

    services: Services
    store: Any
    _cancel_gram: Any

    def settle(self, job: int | str, *, cancel: str | None = None) -> CoallocStatus:
        """Settle the job's fate from the store and SQL; its snapshot afterwards.
        ``cancel``: the owner's cancel (its reason), which fails a job not ended yet."""
        return self.settle_plan(parse_job_ref(job), cancel=cancel).status  # type: ignore

    def settle_plan(self, job_id: int, *, cancel: str | None = None) -> Plan:
        """:meth:`settle`, with what it changed."""
        sid = store_id(job_id)
        if cancel:  # nobody may pass the barrier from now on
            try:
                self.store.abort(sid, cancel)
            except JobNotFoundError:
                pass
        plan = Plan()
        for _ in range(4):  # store changes first, then a fresh look (bounded)
            snap = self._snapshot_or_none(job_id)
            plan = retrying(lambda: self._decide(job_id, snap, cancel))
            if not plan.abort and not plan.leave:
                break
            self._change_store(sid, plan)
        self._after_commit(job_id, plan)
        return plan

    def subjob_states(self, job: int | str) -> CoallocStatus:
        """The job's snapshot: SQL rows with the store's barrier entries.  A pure read:
        it never settles nor writes anything."""
        job_id = parse_job_ref(job)
        snap = self._snapshot_or_none(job_id)
        infos = {s.address: s for s in snap.subjobs} if snap is not None else {}
        with session_scope(self.services.sessions) as session:
            return coalloc_status(coalloc_row(session, job_id), infos)

    # -- inside the transaction --------------------------------------------------------------
    def _snapshot_or_none(self, job_id: int) -> JobSnapshot | None:
        try:
            return self.store.snapshot(store_id(job_id))
        except JobNotFoundError:
            return None

    def _decide(self, job_id: int, snap: JobSnapshot | None, cancel: str | None) -> Plan:
        plan = Plan()
        with session_scope(self.services.sessions) as session:
            row = coalloc_row(session, job_id)
            if not JobState(row.state).terminal:
                self._judge(row, snap, cancel, plan)
                if plan.abort or plan.leave:
                    return plan  # nothing written: the store changes first
            infos = {s.address: s for s in snap.subjobs} if snap is not None else {}
            released = snap is not None and snap.state is BarrierState.RELEASED
            sync_subjobs(row, infos, released)
            plan.status = coalloc_status(row, infos)
        return plan

    def _judge(self, row: Any, snap: JobSnapshot | None, cancel: str | None,
               plan: Plan) -> None:
        """Decide the fate of a job not ended yet (writes ``row`` or asks ``plan`` for a
        store change first)."""
        waiting = SqlBarrier(row.barrier_state) is SqlBarrier.WAITING
        if cancel:
            return self._fail(row, plan, cancel, SqlBarrier.CANCELLED if waiting else None)
        if waiting:
            if snap is None:
                if time.time() - row.created_at.timestamp() < LOST_GRACE_S:
                    return None  # stored in SQL, its store not created yet: no loss
                return self._fail(row, plan, LOST_REASON, SqlBarrier.FAILED)
            if snap.state is BarrierState.ABORTED:
                reason = snap.reason or "aborted"
                return self._fail(row, plan, reason, barrier_for(reason))
            if snap.state is not BarrierState.RELEASED:
                return self._before_release(row, snap, plan)
            mark(row, JobState.ACTIVE, SqlBarrier.RELEASED, None)  # the one record of it
            plan.announce.append(JobState.ACTIVE.value)
            plan.released = True
        fate = final_state(row)
        if fate is None:
            return None
        if fate[0] is JobState.FAILED:
            return self._fail(row, plan, fate[1] or "a strict subjob failed", None)
        mark(row, JobState.DONE, None, fate[1])
        plan.announce.append(JobState.DONE.value)
        plan.done = True
        return None

    def _before_release(self, row: Any, snap: JobSnapshot, plan: Plan) -> None:
        """A barrier still open: a barrier subjob that ended before it aborts the job
        (strict) or leaves the barrier (loose); past the deadline it times out."""
        infos = {s.address: s for s in snap.subjobs}
        for sub in row.subjobs:
            info, gram = infos.get(sub.position), sub.gram_job
            if info is None or gram is None or info.complete \
                    or SubjobStartType(sub.start_type) is SubjobStartType.NO_BARRIER \
                    or not JobState(gram.state).terminal:
                continue
            why = gram.failure_reason if gram.state is JobState.FAILED else None
            why = why or ended_outside_barrier(gram.state.value, gram.exit_code)
            if SubjobStartType(sub.start_type) is SubjobStartType.STRICT_BARRIER:
                plan.abort = f"subjob {sub.label!r} failed before the barrier: {why}"
                return
            plan.leave.append(str(sub.label))
        if plan.leave:
            return
        if time.time() >= deadline_of(row) - DEADLINE_SLACK_S:
            late = [s.label for s in snap.pending(None)] or ["?"]
            plan.abort = (f"barrier timeout: subjob {', '.join(map(repr, late))} not in the "
                          f"barrier after {float(row.barrier_timeout or 0):g} s")

    def _fail(self, row: Any, plan: Plan, reason: str, barrier: SqlBarrier | None) -> None:
        """FAIL the job; in the same transaction its subjobs' GRAM jobs not started yet
        end FAILED too (the scheduler can never start one after the job failed); the
        running ones are cancelled after the commit, as are those waiting in Slurm
        (Slurm, not the scheduler, would start them: their follower records the end
        once the cancel reached Slurm)."""
        if not mark(row, JobState.FAILED, barrier, reason):
            return
        plan.announce.append(JobState.FAILED.value)
        plan.failed = reason
        session, now = object_session(row), self.services.clock.now()
        for sub in row.subjobs:
            gram = sub.gram_job
            if gram is not None and JobState(gram.state) is JobState.PENDING \
                    and not isinstance((gram.request or {}).get(SLURM), dict) \
                    and gram.maui_state is not MauiJobState.STARTING:
                finish(session, gram, JobState.FAILED,
                       f"cancelled: coallocated job {row.id} failed ({reason})", now,
                       plan.outbox, gram_error="USER_CANCELLED")

    # -- outside it ------------------------------------------------------------------------
    def _change_store(self, sid: str, plan: Plan) -> None:
        for label in plan.leave:  # a loose subjob leaves: the others may still be released
            try:
                self.store.delete_subjob(sid, label)
            except (StructureFrozenError, SubjobNotFoundError, JobNotFoundError):
                pass
        if plan.abort:
            try:
                self.store.abort(sid, plan.abort)
            except JobNotFoundError:
                pass

    def _after_commit(self, job_id: int, plan: Plan) -> None:
        """The effects of a committed settle: aborted store, cancelled subjobs (read
        after the commit: a subjob linked meanwhile is seen here, or its submission sees
        the job FAILED and cancels itself), announcements, the store's cleanup."""
        sid = store_id(job_id)
        plan.outbox.flush(self.services.redis, self.services.app)
        if plan.failed:
            try:
                self.store.abort(sid, plan.failed)
            except JobNotFoundError:
                pass
            for gram_id in retrying(lambda: self._linked(job_id)):
                note = self._cancel_gram(gram_id)
                if note:
                    plan.notes.append(note)
        for state in plan.announce:
            announce(self.store.client, job_id, state)
        try:
            if plan.done:
                self.store.purge(sid)
            elif plan.failed:
                self.store.revoke_access(sid)
        except Exception:  # noqa: BLE001 - best effort: the keys' TTL bounds them anyway
            pass

    def _linked(self, job_id: int) -> list[int]:
        with session_scope(self.services.sessions) as session:
            return linked_gram_jobs(session, job_id)


def sync_subjobs(row: Any, infos: dict[int, Any], released: bool) -> None:
    """Keep the subjob rows current: their GRAM job's state and reason, their barrier
    entries (``checked_in``), and FAILED for a subjob never submitted by an ended job."""
    ended = JobState(row.state).terminal
    for sub in row.subjobs:
        info = infos.get(sub.position)
        if info is not None and info.entered is not None:
            entered = info.size if released and info.in_barrier else int(info.entered)
            if entered != sub.checked_in:
                sub.checked_in = entered
        gram = sub.gram_job
        if gram is not None:
            if JobState(gram.state) is not JobState(sub.state):
                sub.state = JobState(gram.state)
            if gram.failure_reason and gram.failure_reason != sub.failure_reason:
                sub.failure_reason = gram.failure_reason
        elif ended and not JobState(sub.state).terminal:
            sub.state = JobState.FAILED
            sub.failure_reason = f"never submitted: the job ended {row.state.value} " \
                                 f"({row.failure_reason or 'no reason'})"

"""The header tasks' side of a coallocated job: counting deliveries and the one step
of a header (a mixin of :class:`~grid_tasks.duroc.control.Coallocator`).

A header task submits its subjob through GRAM (idempotently) and ends: it neither
waits for the barrier nor re-queues itself (the scheduler's barrier watch blocks on
the job's events; a subjob's end sends the settle task).  A subjob found dead already
aborts a strict job and leaves a loose one's barrier so the others can be released.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from grid_tasks.duroc.control_rows import header_deliveries, note_delivery
from grid_tasks.duroc.errors import (BarrierDeadlineError, CoallocFinishedError, SubjobFailedError,
                                     ended_outside_barrier)
from grid_tasks.duroc.records import parse_job_ref, store_id
from grid_tasks.duroc.store_errors import (
    JobNotFoundError, StructureFrozenError, SubjobNotFoundError,
)
from grid_tasks.duroc.store_models import BarrierState
from grid_tasks.errors import GridTasksError
from grid_tasks.gram.submission import gram_status
from grid_tasks.services import Services
from grid_tasks.states import JobState, SubjobStartType

log = logging.getLogger("grid_tasks.duroc.control")
_UNREAD = object()  # watch_step: the subjob's barrier info not read yet


class HeaderSteps:
    """Delivery counts and :meth:`watch_step`; the Coallocator provides services, store,
    ``submit_subjob`` and the rest."""

    services: Services
    store: Any
    submit_subjob: Any

    def note_delivery(self, job_id: int, address: int, task_id: str | None,
                      redelivered: bool) -> bytes | None:
        """Count one delivery of the header task watching ``address``; the job's runtime
        URL (see :func:`~grid_tasks.duroc.control_rows.note_delivery`)."""
        return note_delivery(self.store.client, job_id, address, task_id, redelivered)

    def first_look(self, job_id: int, address: int, task_id: str | None,
                   redelivered: bool) -> tuple[bytes | None, Any]:
        """A header run's first round trip: its delivery counted (:meth:`note_delivery`),
        the job's runtime URL and the subjob's barrier info for :meth:`watch_step`.
        Raises :class:`CoallocFinishedError` when the job is gone or aborted."""
        sid = store_id(job_id)
        url, reply = note_delivery(self.store.client, job_id, address, task_id, redelivered,
                                   queue=lambda pipe: self.store.queue_snapshot(pipe, sid))
        return url, self._barrier_info(job_id, address, reply)

    def header_deliveries(self, job: int | str) -> dict[int, dict[str, Any]]:
        """Per subjob address: ``runs`` and ``redelivered`` counts and the ``task`` id of
        its header task; empty for a job never watched."""
        return header_deliveries(self.store.client, parse_job_ref(job))

    def watch_step(self, job_id: int, address: int, deadline: float,
                   url: bytes | None = None, info: Any = _UNREAD,
                   identity: str | None = None,
                   account: str | None = None) -> dict[str, Any]:
        """A header task's one step: submit the subjob (once) and return, or raise.
        Nothing waits here for the barrier: the scheduler's barrier watch does.
        ``url``: the job's runtime URL if already read (else the submission reads it);
        ``info``: the subjob's barrier info if already read (:meth:`first_look`);
        ``identity``: the verified submitter, authorized at this gatekeeper;
        ``account``: the local account it asked for (the grid map's first if None)."""
        sid = store_id(job_id)
        if info is _UNREAD:
            info = self._barrier_info(job_id, address)
        if info is None:
            return {"address": address, "deleted": True}
        if info.complete:
            return {"address": address, "label": info.label, "entered": info.entered}
        if time.time() >= deadline:  # delivered too late: the settle times the job out
            reason = f"barrier timeout: subjob {info.label!r} not submitted in time"
            self.store.abort(sid, reason)
            raise BarrierDeadlineError(f"coallocated job {job_id}: {reason}")
        try:
            gram_id, stored = self.submit_subjob(job_id, address, iterate=True, url=url,
                                                 identity=identity, account=account)
        except CoallocFinishedError:
            if self._barrier_info(job_id, address) is None:  # deleted since the look above
                return {"address": address, "deleted": True}
            raise
        except GridTasksError as exc:  # refused (RSL, rights, limits): nobody may pass
            self._refused(job_id, info, exc)
        # a job stored by this very step is PENDING: its end sends the settle task
        status = None if stored else gram_status(self.services.sessions, gram_id)
        if status is not None and status.state.terminal:
            why = status.reason if status.state is JobState.FAILED else None
            return self._subjob_died(job_id, info, why or ended_outside_barrier(
                status.state.value, status.exit_code))
        return {"address": address, "label": info.label, "gram_job": gram_id}

    def _refused(self, job_id: int, info: Any, exc: Exception) -> None:
        """A subjob whose submission was refused aborts the barrier with the refusal as
        its reason (the chord's error path settles the job: FAILED, every other subjob
        cancelled, as before headers stopped waiting), and re-raises."""
        try:
            self.store.abort(store_id(job_id),
                             f"subjob {info.label!r} could not be submitted: {exc}")
        except JobNotFoundError:
            pass
        raise exc

    def _barrier_info(self, job_id: int, address: int, reply: Any = None) -> Any:
        """The subjob's info in the job's snapshot (``reply``: a queued SNAPSHOT's, else
        read now); None if it was deleted."""
        sid = store_id(job_id)
        try:
            snap = self.store.snapshot(sid) if reply is None else \
                self.store.snapshot_from(sid, reply)
        except JobNotFoundError:
            raise CoallocFinishedError(f"coallocated job {job_id} is gone") from None
        if snap.state is BarrierState.ABORTED:
            raise CoallocFinishedError(f"coallocated job {job_id} aborted: {snap.reason}")
        info = next((s for s in snap.subjobs if s.address == address), None)
        if info is not None and snap.state is BarrierState.RELEASED:
            return type(info)(**{**info.__dict__, "entered": info.size})
        return info

    def _subjob_died(self, job_id: int, info: Any, reason: str) -> dict[str, Any]:
        """A subjob ended before the barrier: strict aborts the job, loose leaves it."""
        why = f"subjob {info.label!r} failed before the barrier: {reason}"
        if info.start_type is SubjobStartType.STRICT_BARRIER:
            self.store.abort(store_id(job_id), why)
            raise SubjobFailedError(f"coallocated job {job_id}: {why}", label=info.label,
                                    reason=reason)
        try:  # a loose subjob leaves the barrier so the others can still be released
            self.store.delete_subjob(store_id(job_id), info.label)
        except (StructureFrozenError, SubjobNotFoundError):
            pass
        return {"address": info.address, "label": info.label, "failed": reason}

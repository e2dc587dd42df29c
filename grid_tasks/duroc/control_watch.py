"""The header tasks' side of a coallocated job: counting deliveries and one bounded
watch step per run (a mixin of :class:`~grid_tasks.duroc.control.Coallocator`).

A header task submits its subjob through GRAM (idempotently), then waits a slice for
the subjob's processes to enter the barrier; a subjob that dies first aborts a strict
job and leaves a loose one's barrier so the others can still be released.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from grid_tasks.duroc.control_rows import header_deliveries, note_delivery
from grid_tasks.duroc.errors import BarrierDeadlineError, CoallocFinishedError, SubjobFailedError
from grid_tasks.duroc.records import parse_job_ref, store_id
from grid_tasks.duroc.store_errors import (
    BarrierAbortedError, BarrierTimeoutError, JobNotFoundError, StructureFrozenError,
    SubjobNotFoundError,
)
from grid_tasks.duroc.store_models import BarrierState
from grid_tasks.gram.submission import gram_status
from grid_tasks.services import Services
from grid_tasks.states import JobState, SubjobStartType

log = logging.getLogger("grid_tasks.duroc.control")
_UNREAD = object()  # watch_step: the subjob's barrier info not read yet


class HeaderSteps:
    """Delivery counts and :meth:`watch_step`; the Coallocator provides services, store,
    ``submit_subjob`` and ``release_step``."""

    services: Services
    store: Any
    submit_subjob: Any
    release_step: Any

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

    def watch_step(self, job_id: int, address: int, deadline: float, slice_s: float = 1.0,
                   url: bytes | None = None, info: Any = _UNREAD,
                   identity: str | None = None,
                   account: str | None = None) -> dict[str, Any] | None:
        """One bounded step of a header task: a result, None (call again), or an error.
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
        try:
            gram_id, stored = self.submit_subjob(job_id, address, iterate=True, url=url,
                                                 identity=identity, account=account)
        except CoallocFinishedError:
            if self._barrier_info(job_id, address) is None:  # deleted since the look above
                return {"address": address, "deleted": True}
            raise
        # a job stored by this very step is PENDING: its state is read from the next on
        status = None if stored else gram_status(self.services.sessions, gram_id)
        if status is not None and status.state.terminal:
            why = status.reason if status.state is JobState.FAILED else None
            return self._subjob_died(job_id, info, why or (
                f"its processes ended ({status.state.value}, exit code {status.exit_code})"))
        if time.time() >= deadline:
            reason = f"barrier timeout: subjob {info.label!r} not started in time"
            self.store.abort(sid, reason)
            raise BarrierDeadlineError(f"coallocated job {job_id}: {reason}")
        try:
            self.store.await_entries(sid, [address],
                                     timeout=max(0.05, min(slice_s, deadline - time.time())))
        except BarrierTimeoutError:
            return None
        except SubjobNotFoundError:
            return {"address": address, "deleted": True}
        except BarrierAbortedError as exc:
            raise CoallocFinishedError(f"coallocated job {job_id} aborted: {exc.reason}") \
                from None
        # The last entry released the barrier in the store: record it in SQL now rather
        # than after the chord's join and body (a no-op while other subjobs are not in).
        try:
            self.release_step(job_id)
        except Exception:  # noqa: BLE001 - best effort: the chord body records it too,
            log.warning("coallocated job %s: release not recorded by the watcher of %s",
                        job_id, address, exc_info=True)  # and no header must fail for it
        return {"address": address, "label": info.label, "entered": info.size}

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

"""The scheduler's barrier watch: one thread per scheduler process blocks on the event
streams of every coallocated job still waiting for its barrier, and settles a job
(:meth:`~grid_tasks.duroc.settle.Settling.settle`) when its store released or
aborted the barrier or a subjob's processes all entered it, when the job's
coordination keys vanished (Redis restarted empty, or flushed) and when its barrier
deadline passed.

This replaces header tasks that re-queued themselves through the broker every slice
to look: a waiting subjob costs no broker message and no SQL read at all; the watch
costs one blocking ``XREAD`` over all waiting jobs' streams, and one pipelined
``EXISTS`` per job every :data:`CHECK_S` while nothing happens.  A job is watched
from its request (by the process that stored it), or adopted from SQL (every job
still waiting) when the watch starts: after a scheduler restart nothing waits for a
reader.  Several watches over one job do no harm: a settle is idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import select

from grid_tasks.db import session_scope
from grid_tasks.db.models import CoallocatedJob
from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
from grid_tasks.duroc.records import store_id
from grid_tasks.duroc.settle import deadline_of

log = logging.getLogger(__name__)

#: Longest single block on the streams (ms), and how often (s) vanished keys are looked for.
BLOCK_MS = 1000
CHECK_S = 1.0
#: Key prefix of a watch's own wake-up stream, and its TTL (renewed by every new job).
WAKE_PREFIX = "grid_tasks:duroc:watch:"
WAKE_TTL_S = 3600
#: Longest pause (s) before a job whose settle failed (database away) is settled again.
MAX_BACKOFF_S = 5.0
#: Event types of a job's stream that call for a settle ("complete": a subjob's
#: processes all entered, its row's ``checked_in`` follows).
DECISIVE = {b"released", b"aborted", b"complete"}


class BarrierWatch:
    """Watches the waiting coallocated jobs of one process (see the module doc).

    ``coallocator``: the process's Coallocator (its store, services and settle)."""

    def __init__(self, coallocator: Any) -> None:
        self.co = coallocator
        self._jobs: dict[int, tuple[str, float]] = {}  # job -> (last stream id, deadline)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._checked = 0.0
        self._failed: dict[int, tuple[int, float]] = {}  # job -> (failures, next try)
        # a stream of this watch alone: a new job wakes the blocked XREAD at once
        self._wake_key = f"{WAKE_PREFIX}{uuid.uuid4().hex}"
        self._wake_last = "0-0"

    def watch(self, job_id: int, deadline: float) -> None:
        """Watch ``job_id`` until its barrier is settled (released or failed in SQL)."""
        self.start()
        with self._lock:
            self._jobs.setdefault(int(job_id), ("0-0", float(deadline)))
        self._wake.set()
        try:
            pipe = self.co.store.client.pipeline(transaction=False)
            pipe.xadd(self._wake_key, {"job": int(job_id)}, maxlen=16, approximate=True)
            pipe.expire(self._wake_key, WAKE_TTL_S)
            pipe.execute()
        except RedisError:  # the next round (within BLOCK_MS) picks the job up anyway
            pass

    def watching(self) -> set[int]:
        with self._lock:
            return set(self._jobs)

    def start(self) -> None:
        """Start the thread once (adopting every job waiting in SQL)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="duroc-barrier-watch",
                                            daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._adopt()
        except Exception:  # noqa: BLE001 - a database not reachable yet: watch new jobs
            log.warning("barrier watch: waiting jobs not adopted", exc_info=True)
        while not self._stop.is_set():
            try:
                self._round()
            except Exception:  # noqa: BLE001 - Redis away, a settle failed: look again
                log.warning("barrier watch round failed", exc_info=True)
                self._stop.wait(0.5)

    def _adopt(self) -> None:
        with session_scope(self.co.services.sessions) as session:
            rows = session.execute(select(CoallocatedJob).where(
                CoallocatedJob.barrier_state == SqlBarrier.WAITING)).scalars().all()
            found = {row.id: deadline_of(row) for row in rows
                     if not row.state.terminal}
        with self._lock:
            for job_id, deadline in found.items():
                self._jobs.setdefault(job_id, ("0-0", deadline))

    def _round(self) -> None:
        with self._lock:
            jobs = dict(self._jobs)
            self._wake.clear()
        if not jobs:
            self._wake.wait(CHECK_S)
            return
        due = self._read(jobs)
        now = time.time()
        due |= {j for j, (_, deadline) in jobs.items() if now >= deadline}
        if now - self._checked >= CHECK_S:
            due |= self._vanished(jobs)
            self._checked = now
        for job_id in sorted(due):
            fails, retry_at = self._failed.get(job_id, (0, 0.0))
            if now < retry_at:
                continue
            try:
                self._settle(job_id)
                self._failed.pop(job_id, None)
            except Exception:  # noqa: BLE001 - the database away: back off, look again
                log.warning("barrier watch: coallocated job %s not settled", job_id,
                            exc_info=fails == 0)
                self._failed[job_id] = (fails + 1, now + min(MAX_BACKOFF_S, 0.25 * 2 ** fails))

    def _read(self, jobs: dict[int, tuple[str, float]]) -> set[int]:
        """Block on every watched job's stream (woken early by a new job); the jobs
        whose barrier was released or aborted."""
        keys = {self.co.store.keys(store_id(j)).events: j for j in jobs}
        soonest = min([d for _, d in jobs.values()] + [t for _, t in self._failed.values()])
        block = min(BLOCK_MS, max(20, int(1000 * (soonest - time.time()))))
        streams = {key: jobs[j][0] for key, j in keys.items()}
        streams[self._wake_key] = self._wake_last
        try:
            reply = self.co.store.client.xread(streams, block=block)
        except RedisError:
            self._stop.wait(0.5)
            return set()
        due: set[int] = set()
        for key, entries in reply or []:
            name = key.decode() if isinstance(key, bytes) else key
            if name == self._wake_key:  # a new job: the next round reads its stream too
                last = entries[-1][0]
                self._wake_last = last.decode() if isinstance(last, bytes) else last
                continue
            job_id = keys[name]
            last = entries[-1][0]
            with self._lock:
                if job_id in self._jobs:
                    self._jobs[job_id] = (last.decode() if isinstance(last, bytes) else last,
                                          self._jobs[job_id][1])
            if any(fields.get(b"type") in DECISIVE for _, fields in entries):
                due.add(job_id)
        return due

    def _vanished(self, jobs: dict[int, tuple[str, float]]) -> set[int]:
        pipe = self.co.store.client.pipeline(transaction=False)
        for job_id in jobs:
            pipe.exists(self.co.store.keys(store_id(job_id)).meta)
        try:
            found = pipe.execute()
        except RedisError:
            return set()
        return {job_id for job_id, there in zip(jobs, found) if not there}

    def _settle(self, job_id: int) -> None:
        """Settle the job; stop watching it once its barrier is decided in SQL."""
        plan = self.co.settle_plan(job_id)
        status = plan.status
        if status is None or status.terminal or status.barrier != SqlBarrier.WAITING.value:
            with self._lock:
                self._jobs.pop(job_id, None)

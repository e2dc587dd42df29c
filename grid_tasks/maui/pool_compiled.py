"""The conservative pool on its compiled core (``grid_tasks.maui._conservative``).

:class:`CompiledConservativePool` keeps the jobs, keys and :class:`Reservation` objects
in Python and hands the free-processor profile, the reservation book and the
compression pass to the C core, which makes the same floating-point operations in the
same order as :class:`ConservativePool` (the reference), so both decide identically.
The compression pass dominates a conservative replay (hundreds of thousands of
reservation moves per trace), and its cost in Python is interpreter overhead.

The compiled core is used when it was built (``setup.py`` builds it where a C compiler
exists) unless ``GRID_TASKS_PURE=1`` forces the reference; :data:`CORE` says which runs.
"""

from __future__ import annotations

import os
from bisect import bisect_left

from grid_tasks.maui.model import ACL, IterationResult, Job, Reservation, ReservationKind, SchedulerError
from grid_tasks.maui.pool_conservative import ConservativePool
from grid_tasks.maui.reservation_book import Key

try:
    from grid_tasks.maui import _conservative
except ImportError:  # no compiler at install time: the pure-Python reference runs
    _conservative = None  # type: ignore[assignment]

FORCED_PURE = os.environ.get("GRID_TASKS_PURE", "") not in ("", "0")
CORE = "compiled" if _conservative is not None and not FORCED_PURE else "pure"


def conservative_pool() -> type[ConservativePool]:
    """The conservative pool class to use: compiled when available and not refused."""
    return CompiledConservativePool if CORE == "compiled" else ConservativePool


class CompiledConservativePool(ConservativePool):
    """:class:`ConservativePool` with the profile, book and compression in C."""

    def __init__(self, node) -> None:
        super().__init__(node)
        self.core = _conservative.Core(float(node.procs))
        self.slot_of: dict[str, int] = {}  # job id -> slot of its reservation
        self.by_slot: dict[int, tuple[Key, Reservation]] = {}

    # -- events --------------------------------------------------------------------
    def ended(self, job_id: str, now: float) -> None:
        entry = self.running.pop(job_id, None)
        if entry is None:
            raise SchedulerError(f"job {job_id} is not running")
        job, start, end = entry
        a = max(start, now)
        if end > a:  # ended before its walltime: the rest of it is free again
            self.core.add(a, end, job.procs)
            self.core.region(a, end)
        self.freed = True

    def restore(self, job: Job, start: float, now: float) -> None:
        end = start + job.walltime
        if self.core.min_over(max(start, now), end) < job.procs:
            raise SchedulerError(f"job {job.id}: allocation {{{self.name!r}: {job.tasks}}} is not free")
        self.core.add(start, end, -job.procs)
        self.running[job.id] = (job, start, end)

    def _release(self, job_id: str) -> Reservation | None:
        slot = self.slot_of.pop(job_id, None)
        if slot is None:
            return None
        self.core.release(slot)
        return self.by_slot.pop(slot)[1]

    def cancel(self, job_id: str) -> None:
        entry = self.idle.pop(job_id, None)
        if entry is None:
            raise SchedulerError(f"job {job_id} is not idle")
        job, key = entry
        del self.keys[bisect_left(self.keys, key)]
        r = self._release(job_id)
        if r is None:
            self.fresh.remove(key)
            return
        self.core.add(r.start, r.end, job.procs)
        self.core.region(r.start, r.end)
        self.freed = True

    # -- iteration -----------------------------------------------------------------
    def iterate(self, now: float) -> IterationResult:
        res = IterationResult(now)
        self.core.prune_maybe(now)
        res.considered = len(self.keys)
        if self.freed:
            self.freed = False
            self._compress(now, res)
        by_slot = self.by_slot
        due = self.fresh + [by_slot[s][0] for s in self.core.due(now)]
        self.fresh = []
        if due:
            due.sort()
            self._run_due(due, now, res)
        return res

    def _try(self, job: Job, key: Key, now: float, res: IterationResult, backfill: bool) -> bool:
        core = self.core
        end = now + job.walltime
        r = self._release(job.id)
        if r is not None:
            if r.start == now:  # its reservation begins now: the same interval, running
                self._started(job, key, now, res, backfill)
                res.reservations_released.append(r)
                return True
            core.add(r.start, r.end, job.procs)
            core.region(r.start, r.end)
        if core.min_over(now, end) >= job.procs:
            core.add(now, end, -job.procs)
            self._started(job, key, now, res, backfill)
            if r is not None:
                res.reservations_released.append(r)
            return True
        self._reserve(job, key, core.earliest(now, job.walltime, job.procs), res)
        return False

    def _reserve(self, job: Job, key: Key, t: float, res: IterationResult) -> None:
        r = Reservation(name=f"job.{job.id}", start=t, end=t + job.walltime,
                        acl=ACL(jobs=frozenset({job.id})), tasks=job.tasks,
                        procs_per_task=job.procs_per_task, kind=ReservationKind.JOB,
                        job_id=job.id, allocation={self.name: job.tasks})
        slot = self.core.reserve(key[0], key[1], job.procs, job.walltime, t)
        self.slot_of[job.id] = slot
        self.by_slot[slot] = (key, r)
        res.reservations_created.append(r)

    def _compress(self, now: float, res: IterationResult) -> None:
        """The pass of :meth:`ConservativePool._compress`, run by the core; the moved
        reservations are updated here, in the order they moved."""
        created, by_slot = res.reservations_created, self.by_slot
        for slot, start, end in self.core.compress(now):
            r = by_slot[slot][1]
            r.start, r.end = start, end
            created.append(r)

    # -- queries -------------------------------------------------------------------
    def next_wakeup(self, now: float) -> float | None:
        return self.core.next_start(now)

    def held(self) -> list[tuple[Job, Reservation]]:
        """Job reservations with their jobs, in priority order."""
        slot_of, by_slot = self.slot_of, self.by_slot
        return [(self.idle[k[2]][0], by_slot[slot_of[k[2]]][1]) for k in self.keys if k[2] in slot_of]

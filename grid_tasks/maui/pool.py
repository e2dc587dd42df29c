"""The pool fast path: one node seen as a processor pool, submission-order priority,
reservation depth 0 or 1, first-fit backfill or none (fcfs and easy).

It makes exactly the decisions the general engine makes in that setting, in O(1)-ish
time when nothing changed: running jobs are kept sorted by their walltime end, so the
head's shadow time (the earliest start of its reservation) and the processors left
over beside it ("extra") come from one walk over them, and a job may be backfilled
iff it fits now and either ends by the shadow time or fits in the extra processors.
A job that failed that test keeps failing while nothing is freed (time only makes the
first condition harder), so when only submissions happened just the new jobs are tested.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from math import inf

from grid_tasks.maui.config import BackfillPolicy, SchedulerConfig
from grid_tasks.maui.model import (
    ACL, IterationResult, Job, Node, Reservation, ReservationKind, SchedulerError, Start,
)


class Pool:
    """State and iteration of a single-node processor pool (see module docstring)."""

    @classmethod
    def maybe(cls, nodes: list[Node], cfg: SchedulerConfig, policies_active: bool) -> "Pool | None":
        """A pool when the configuration and the machine allow the fast path."""
        if not cfg.fast_path or len(nodes) != 1 or policies_active or cfg.standing_reservations:
            return None
        node = nodes[0]
        if not node.usable or node.utilized_procs or not cfg.fifo:
            return None
        if cfg.depth > 1:
            return None
        if cfg.backfill_policy not in (BackfillPolicy.FIRSTFIT, BackfillPolicy.NONE):
            return None
        return cls(node, cfg)

    def __init__(self, node: Node, cfg: SchedulerConfig) -> None:
        self.node = node
        self.name = node.name
        self.size = node.procs
        self.free = node.procs
        self.reserve_head = cfg.depth >= 1
        self.backfill = cfg.backfill_policy is BackfillPolicy.FIRSTFIT
        self.queue: list[Job] = []
        # parallel to the queue: (submit_time, seq) for order, processors and walltimes for speed
        self.keys: list[tuple[float, int]] = []
        self.qprocs: list[int] = []
        self.qwall: list[float] = []
        self.running: dict[str, tuple[Job, float, tuple[float, int, int]]] = {}
        self.ends: list[tuple[float, int, int]] = []  # (walltime end, seq, procs), sorted
        self.expired: set[str] = set()
        self.head_res: Reservation | None = None
        self.shadow = inf
        self.extra = 0
        self.dirty = True
        self.checked = 0
        self._seq = 0

    def accepts(self, job: Job) -> bool:
        return job.simple and job.procs <= self.size

    # -- events --------------------------------------------------------------------
    def submit(self, job: Job, seq: int) -> None:
        key = (job.submit_time, seq)
        if self.keys and key < self.keys[-1]:
            # an out-of-order submission can change the head: insert and rescan
            i = bisect_left(self.keys, key)
            self.keys.insert(i, key)
            self.queue.insert(i, job)
            self.qprocs.insert(i, job.procs)
            self.qwall.insert(i, job.walltime)
            self.dirty = True
        else:
            self.keys.append(key)
            self.queue.append(job)
            self.qprocs.append(job.procs)
            self.qwall.append(job.walltime)

    def ended(self, job_id: str, now: float) -> None:
        entry = self.running.pop(job_id, None)
        if entry is None:
            raise SchedulerError(f"job {job_id} is not running")
        if job_id in self.expired:
            self.expired.discard(job_id)
            return
        ends = self.ends
        i = bisect_left(ends, entry[2])
        del ends[i]
        self.free += entry[0].procs
        self.dirty = True

    def restore(self, job: Job, start: float, now: float) -> None:
        """A job already running since ``start``."""
        if job.procs > self.free:
            raise SchedulerError(f"job {job.id}: {job.procs} processors are not free")
        self._seq += 1
        key = (start + job.walltime, self._seq, job.procs)
        insort(self.ends, key)
        self.running[job.id] = (job, start, key)
        self.free -= job.procs
        self.dirty = True

    def cancel(self, job_id: str) -> None:
        for i, job in enumerate(self.queue):
            if job.id == job_id:
                self._drop(i)
                if i == 0:
                    self.dirty = True
                    self.head_res = None
                elif i < self.checked:
                    self.checked -= 1
                return
        raise SchedulerError(f"job {job_id} is not idle")

    # -- iteration -----------------------------------------------------------------
    def _expire(self, now: float) -> None:
        """Jobs past their walltime hold nothing from their end on (half-open intervals)."""
        ends = self.ends
        n = 0
        while n < len(ends) and ends[n][0] <= now:
            self.free += ends[n][2]
            n += 1
        if n:
            gone = {e[:2] for e in ends[:n]}
            del ends[:n]
            for jid, (_, _, key) in self.running.items():
                if key[:2] in gone:
                    self.expired.add(jid)
            self.dirty = True

    def _start(self, job: Job, now: float, res: IterationResult, backfill: bool) -> None:
        self._seq += 1
        key = (now + job.walltime, self._seq, job.procs)
        insort(self.ends, key)
        self.running[job.id] = (job, now, key)
        self.free -= job.procs
        res.started.append(Start(job.id, now, {self.name: job.tasks}))
        if backfill:
            res.backfilled += 1

    def iterate(self, now: float) -> IterationResult:
        res = IterationResult(now)
        if self.ends and self.ends[0][0] <= now:
            self._expire(now)
        q = self.queue
        while q and self.qprocs[0] <= self.free:
            job = q[0]
            self._drop(0)
            if self.head_res is not None:
                res.reservations_released.append(self.head_res)
                self.head_res = None
            self._start(job, now, res, False)
            self.dirty = True
        if not q:
            return res
        head_moved = self.reserve_head and (self.head_res is None or self.head_res.job_id != q[0].id)
        if self.dirty or head_moved:
            self.checked = 1
            self.dirty = False
            if self.reserve_head:
                self._shadow(q[0], now, res)
            else:  # no reservation to protect (RESERVATIONPOLICY NEVER): anything that fits
                self.shadow, self.extra = inf, self.size
        if self.backfill and self.free > 0:
            self._backfill(now, res)
        self.checked = len(q)
        res.considered = len(q)
        return res

    def _shadow(self, head: Job, now: float, res: IterationResult) -> None:
        need = head.procs
        avail = self.free
        shadow = inf
        for end, _, procs in self.ends:
            if shadow < inf and end > shadow:
                break
            avail += procs
            if shadow == inf and avail >= need:
                shadow = end
        self.shadow = shadow
        self.extra = avail - need if shadow < inf else 0
        if not self.reserve_head or shadow == inf:
            return
        r = self.head_res
        if r is None or r.job_id != head.id:
            r = Reservation(name=f"job.{head.id}", start=shadow, end=shadow + head.walltime,
                            acl=ACL(jobs=frozenset({head.id})), tasks=head.tasks,
                            procs_per_task=head.procs_per_task, kind=ReservationKind.JOB,
                            job_id=head.id, allocation={self.name: head.tasks})
            self.head_res = r
            res.reservations_created.append(r)
        elif r.start != shadow:
            r.start, r.end = shadow, shadow + head.walltime
            res.reservations_created.append(r)

    def _drop(self, i: int) -> None:
        del self.queue[i], self.keys[i], self.qprocs[i], self.qwall[i]

    def _backfill(self, now: float, res: IterationResult) -> None:
        procs, walls = self.qprocs, self.qwall
        limit = self.shadow - now  # a job this short ends before the head's reservation
        i = max(self.checked, 1)
        n = len(procs)
        free, extra = self.free, self.extra
        while i < n and free > 0:
            p = procs[i]
            if p <= free and (p <= extra or walls[i] <= limit):
                if walls[i] > limit:
                    extra -= p
                job = self.queue[i]
                self._drop(i)
                n -= 1
                self._start(job, now, res, True)
                free = self.free
                continue
            i += 1
        self.extra = extra

    # -- queries and hand-over -------------------------------------------------------
    def next_wakeup(self, now: float) -> float | None:
        r = self.head_res
        return r.start if r is not None and r.start > now else None

    def reservations(self) -> list[Reservation]:
        out = [
            Reservation(name=f"job.{jid}", start=start, end=start + job.walltime,
                        acl=ACL(jobs=frozenset({jid})), tasks=job.tasks, procs_per_task=job.procs_per_task,
                        kind=ReservationKind.RUNNING, job_id=jid, allocation={self.name: job.tasks})
            for jid, (job, start, _) in self.running.items()
        ]
        if self.head_res is not None:
            out.append(self.head_res)
        return out

    def held(self) -> list[tuple[Job, Reservation]]:
        """Job reservations with their jobs (the head's, if it holds one)."""
        r = self.head_res
        return [(job, r) for job in self.queue[:1] if r is not None and r.job_id == job.id]

    def export(self) -> tuple[list[Job], list[tuple[Job, float]]]:
        """Idle jobs in order and running jobs with their start, for the general engine."""
        return list(self.queue), [(job, start) for job, start, _ in self.running.values()]

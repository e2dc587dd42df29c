"""The conservative pool fast path: one node seen as a processor pool, submission-order
priority, every blocked job holding a reservation (RESERVATIONDEPTH unlimited,
RESERVATIONPOLICY HIGHEST, BACKFILLPOLICY FIRSTFIT).

It makes exactly the decisions the general engine makes in that setting:

* a job starts now iff it fits for its whole walltime beside every running job and
  every reservation (so it delays none); otherwise it is reserved at its earliest fit;
* a job reaching its reservation's start starts there;
* after any job ended (or a reserved job was cancelled) every reservation is, in
  priority order, moved to its earliest start before its current one, once.

The engine re-examines every reservation on every end; here a reservation is only
re-examined when the free-processor profile went *up* somewhere it could use since it
was last known immovable.  Every increase (an early end, a cancel, a reservation
moving away) is recorded as a region with a version number; a reservation remembers the
version at which it was last placed or re-examined.  A window [t, t + w) with t before
its start that did not fit then can only fit now if it covers a point whose free count
rose since, so a reservation no region after its version reaches is left alone: the
same answer the engine's search would give, without the search.  An end at the
walltime frees nothing and then nothing is re-examined at all.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from heapq import heappop, heappush
from math import inf

from grid_tasks.maui.config import BackfillPolicy, ReservationPolicy, SchedulerConfig
from grid_tasks.maui.model import (
    ACL, IterationResult, Job, Node, Reservation, ReservationKind, SchedulerError, Start,
)
from grid_tasks.maui.profile import StepProfile

Key = tuple[float, int, str]  # (submit time, submission sequence, job id): priority order
Region = tuple[int, float, float, float]  # (version, a, b, most free in [a, b) when it rose)


class ConservativePool:
    """State and iteration of a conservative single-node processor pool (see module doc)."""

    @classmethod
    def maybe(cls, nodes: list[Node], cfg: SchedulerConfig,
              policies_active: bool) -> "ConservativePool | None":
        """A pool when the configuration and the machine allow this fast path."""
        if not cfg.fast_path or len(nodes) != 1 or policies_active or cfg.standing_reservations:
            return None
        node = nodes[0]
        if not node.usable or node.utilized_procs or not cfg.fifo:
            return None
        if cfg.depth != inf or cfg.reservation_policy is not ReservationPolicy.HIGHEST:
            return None
        if cfg.backfill_policy is not BackfillPolicy.FIRSTFIT:
            return None
        return cls(node)

    def __init__(self, node: Node) -> None:
        self.name = node.name
        self.size = node.procs
        self.prof = StepProfile(node.procs)
        self.keys: list[Key] = []  # idle jobs in priority order
        self.idle: dict[str, tuple[Job, Key]] = {}
        self.fresh: list[Key] = []  # idle jobs not considered yet (no reservation)
        self.res: dict[str, Reservation] = {}
        self.ver: dict[str, int] = {}  # version at which each reservation was known immovable
        self.starts: list[tuple[float, Key]] = []  # reservation starts (stale entries skipped)
        self.running: dict[str, tuple[Job, float, float]] = {}  # id -> (job, start, end)
        self.regions: list[Region] = []  # where free processors went up, newest last
        self.version = 0
        self.freed = False

    def accepts(self, job: Job) -> bool:
        return job.simple and job.procs <= self.size and not job.priority

    # -- events --------------------------------------------------------------------
    def submit(self, job: Job, seq: int) -> None:
        key = (job.submit_time, seq, job.id)
        insort(self.keys, key)
        self.idle[job.id] = (job, key)
        self.fresh.append(key)

    def ended(self, job_id: str, now: float) -> None:
        entry = self.running.pop(job_id, None)
        if entry is None:
            raise SchedulerError(f"job {job_id} is not running")
        job, start, end = entry
        a = max(start, now)
        if end > a:  # ended before its walltime: the rest of it is free again
            self.prof.add(a, end, job.procs)
            self._rose(a, end)
        self.freed = True

    def restore(self, job: Job, start: float, now: float) -> None:
        """A job already running since ``start``."""
        end = start + job.walltime
        if self.prof.min_over(max(start, now), end) < job.procs:
            raise SchedulerError(f"job {job.id}: allocation {{{self.name!r}: {job.tasks}}} is not free")
        self.prof.add(start, end, -job.procs)
        self.running[job.id] = (job, start, end)

    def cancel(self, job_id: str) -> None:
        entry = self.idle.pop(job_id, None)
        if entry is None:
            raise SchedulerError(f"job {job_id} is not idle")
        job, key = entry
        del self.keys[bisect_left(self.keys, key)]
        r = self.res.pop(job_id, None)
        if r is None:
            self.fresh.remove(key)
            return
        del self.ver[job_id]
        self.prof.add(r.start, r.end, job.procs)
        self._rose(r.start, r.end)
        self.freed = True

    def _rose(self, a: float, b: float) -> None:
        """Free processors went up over [a, b): reservations may now move earlier.  The
        most found free there bounds what any point of it offers until it rises again
        (which is then a newer region)."""
        top = self._most(a, b)
        self.version += 1
        self.regions.append((self.version, a, b, top))

    # -- iteration -----------------------------------------------------------------
    def iterate(self, now: float) -> IterationResult:
        res = IterationResult(now)
        prof = self.prof
        if len(prof.times) > 16 and prof.times[16] <= now:
            prof.prune(now)  # now and then: the searches start at ``now`` anyway
        res.considered = len(self.keys)
        if self.freed:
            self.freed = False
            self._compress(now, res)
        due = self._due(now)
        if due:
            self._run_due(due, now, res)
        return res

    def _due(self, now: float) -> list[Key]:
        """Jobs to act on now: reservations beginning by now, and jobs never considered."""
        due = self.fresh
        self.fresh = []
        starts = self.starts
        while starts and starts[0][0] <= now:
            t, key = heappop(starts)
            r = self.res.get(key[2])
            if r is not None and r.start == t:
                due.append(key)
        due.sort()
        return due

    def _first_blocked(self, due: list[Key]) -> Key | None:
        """The highest-priority job that keeps waiting on a later reservation."""
        acting = set(due)
        for key in self.keys:
            if key not in acting:
                return key
        return None

    def _run_due(self, due: list[Key], now: float, res: IterationResult) -> None:
        """The engine's priority pass, restricted to the jobs it can act on."""
        blocked = self._first_blocked(due)
        for key in due:
            job = self.idle[key[2]][0]
            backfill = blocked is not None and blocked < key
            if self._try(job, key, now, res, backfill):
                continue
            if blocked is None or key < blocked:
                blocked = key

    def _try(self, job: Job, key: Key, now: float, res: IterationResult, backfill: bool) -> bool:
        """Start the job now if it fits (in its reservation or beside all), else reserve."""
        prof = self.prof
        end = now + job.walltime
        r = self.res.pop(job.id, None)
        if r is not None:
            del self.ver[job.id]
            if r.start == now:  # its reservation begins now: the same interval, running
                self._started(job, key, now, res, backfill)
                res.reservations_released.append(r)
                return True
            prof.add(r.start, r.end, job.procs)
            self._rose(r.start, r.end)
        if prof.min_over(now, end) >= job.procs:
            prof.add(now, end, -job.procs)
            self._started(job, key, now, res, backfill)
            if r is not None:
                res.reservations_released.append(r)
            return True
        self._reserve(job, key, prof.earliest(now, job.walltime, job.procs), res)
        return False

    def _started(self, job: Job, key: Key, now: float, res: IterationResult, backfill: bool) -> None:
        del self.idle[job.id]
        del self.keys[bisect_left(self.keys, key)]
        self.running[job.id] = (job, now, now + job.walltime)
        res.started.append(Start(job.id, now, {self.name: job.tasks}))
        if backfill:
            res.backfilled += 1

    def _reserve(self, job: Job, key: Key, t: float, res: IterationResult) -> None:
        r = Reservation(name=f"job.{job.id}", start=t, end=t + job.walltime,
                        acl=ACL(jobs=frozenset({job.id})), tasks=job.tasks,
                        procs_per_task=job.procs_per_task, kind=ReservationKind.JOB,
                        job_id=job.id, allocation={self.name: job.tasks})
        self.prof.add(t, r.end, -job.procs)
        self.res[job.id] = r
        self.ver[job.id] = self.version
        heappush(self.starts, (t, key))
        res.reservations_created.append(r)

    # -- compression: reservations move earlier after something was freed -------------
    def _compress(self, now: float, res: IterationResult) -> None:
        """Every reservation, in priority order, to its earliest start before its own —
        examined only when a region where free processors rose since it was last known
        immovable lies within its reach."""
        regions = [g for g in self.regions if g[2] > now]  # the past helps nobody
        self.regions = regions
        if not regions:
            return
        resv, ver, idle = self.res, self.ver, self.idle
        for key in self.keys:
            jid = key[2]
            r = resv.get(jid)
            if r is None or r.start <= now or ver[jid] == self.version:
                continue
            job = idle[jid][0]
            need = job.procs
            # a window crossing its start needs ``need`` free just before it; one wholly
            # before it needs room for its walltime (times and vals may be new lists)
            if (now + job.walltime < r.start or self.prof.vals[bisect_left(self.prof.times, r.start) - 1] >= need) \
                    and self._reachable(ver[jid], now, r.start, need, regions):
                self._advance(job, key, r, now, res)
            ver[jid] = self.version
        self._forget(now)

    def _reachable(self, v: int, now: float, start: float, need: int, regions: list[Region]) -> bool:
        """Whether a region newer than ``v`` offers ``need`` processors before ``start``:
        a window that did not fit then must cover a point that rose since, and only its
        part before ``start`` can have failed (from there on its own are given back)."""
        for ver, a, b, top in reversed(regions):
            if ver <= v:
                return False
            if a < start and top >= need and self._most(max(a, now), min(b, start)) >= need:
                return True
        return False

    def _most(self, a: float, b: float) -> float:
        """Most processors free at any time in [a, b)."""
        times = self.prof.times
        return max(self.prof.vals[bisect_right(times, a) - 1:bisect_left(times, b)])

    def _advance(self, job: Job, key: Key, r: Reservation, now: float, res: IterationResult) -> None:
        w, p = job.walltime, job.procs
        t = self._earlier(now, w, p, r.start)
        if t == inf:
            return
        old_start, old_end = r.start, r.end
        end = t + w
        if end <= old_start:
            self.prof.add(t, end, -p)
            self.prof.add(old_start, old_end, p)
        else:  # the overlap keeps its processors: only the ends change hands
            self.prof.add(t, old_start, -p)
            self.prof.add(end, old_end, p)
        r.start, r.end = t, end
        heappush(self.starts, (t, key))
        res.reservations_created.append(r)
        gone = max(old_start, r.end)
        if gone < old_end:
            self._rose(gone, old_end)

    def _earlier(self, now: float, w: float, need: int, limit: float) -> float:
        """Earliest ``t`` in [now, limit) where a job reserved from ``limit`` on would fit
        instead, else inf (the engine's ``earliest_without`` giving the reservation back).

        From ``limit`` on the job's own processors are given back, so a window there always
        fits: a start ``t`` fits iff ``need`` stay free from ``t`` for ``w`` or until ``limit``.
        Only the segments before ``limit`` are read, as runs of enough free processors."""
        times, vals = self.prof.times, self.prof.vals
        i = bisect_right(times, now) - 1
        hi = bisect_left(times, limit, i + 1)
        if vals[hi - 1] < need and max(vals[i:hi]) < need:
            return inf
        t: float | None = None  # start of the current run
        for k in range(i, hi):
            if vals[k] < need:
                t = None
                continue
            if t is None:
                t = now if k == i else times[k]
            if k + 1 == hi or times[k + 1] >= t + w:
                return t
        return inf

    def _forget(self, now: float) -> None:
        """Drop regions every reservation has been examined after."""
        oldest = min(self.ver.values(), default=self.version)
        self.regions = [g for g in self.regions if g[0] > oldest and g[2] > now]

    # -- queries and hand-over -------------------------------------------------------
    @property
    def queue(self) -> list[Job]:
        return [self.idle[key[2]][0] for key in self.keys]

    def next_wakeup(self, now: float) -> float | None:
        starts = self.starts
        while starts:
            t, key = starts[0]
            r = self.res.get(key[2])
            if r is not None and r.start == t:
                break
            heappop(starts)
        if starts and starts[0][0] > now:
            return starts[0][0]
        later = [r.start for r in self.res.values() if r.start > now]
        return min(later) if later else None

    def held(self) -> list[tuple[Job, Reservation]]:
        """Job reservations with their jobs, in priority order."""
        return [(self.idle[k[2]][0], self.res[k[2]]) for k in self.keys if k[2] in self.res]

    def reservations(self) -> list[Reservation]:
        out = [
            Reservation(name=f"job.{jid}", start=start, end=end, acl=ACL(jobs=frozenset({jid})),
                        tasks=job.tasks, procs_per_task=job.procs_per_task, kind=ReservationKind.RUNNING,
                        job_id=jid, allocation={self.name: job.tasks})
            for jid, (job, start, end) in self.running.items()
        ]
        return out + [r for _, r in self.held()]

    def export(self) -> tuple[list[Job], list[tuple[Job, float]]]:
        """Idle jobs in order and running jobs with their start, for the general engine."""
        return self.queue, [(job, start) for job, start, _ in self.running.values()]

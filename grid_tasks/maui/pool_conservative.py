"""The conservative pool fast path: one node seen as a processor pool, submission-order
priority, every blocked job holding a reservation (RESERVATIONDEPTH unlimited,
RESERVATIONPOLICY HIGHEST, BACKFILLPOLICY FIRSTFIT).

It makes exactly the decisions the general engine makes in that setting:

* a job starts now iff it fits for its whole walltime beside every running job and
  every reservation (so it delays none); otherwise it is reserved at its earliest fit;
* a job reaching its reservation's start starts there;
* after any job ended (or a reserved job was cancelled) every reservation is, in
  priority order, moved to its earliest start before its current one, once.

The engine re-examines every reservation on every end.  Here a reservation is only
re-examined when the free-processor profile went *up* (an early end, a cancel, a
reservation moving away: a "region") somewhere it could use.  Every reservation is
immovable right after it is placed or re-examined; a window that did not fit then can
only fit now if it covers a point that rose since, with enough processors free, before
the reservation's start (from there on its own processors are given back).  The
:class:`ReservationBook` finds exactly the reservations for which such a point exists.
A region found during a pass is applied to the jobs after the one that moved away, and
again to everyone at the next pass (the engine's single pass examines the earlier jobs
only then); after that it is forgotten.  An end at the walltime frees nothing, and the
next pass re-examines nothing unless a region is pending.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from heapq import heappop, heappush
from math import inf

from grid_tasks.maui.config import SchedulerConfig
from grid_tasks.maui.model import (
    ACL, IterationResult, Job, Node, Reservation, ReservationKind, SchedulerError, Start,
)
from grid_tasks.maui.policies import Backfill, QueuePolicy
from grid_tasks.maui.profile import StepProfile
from grid_tasks.maui.reservation_book import Key, ReservationBook


class ConservativePool:
    """State and iteration of a conservative single-node processor pool (see module doc)."""

    @classmethod
    def maybe(cls, nodes: list[Node], cfg: SchedulerConfig, queue: QueuePolicy, backfill: Backfill,
              policies_active: bool) -> "ConservativePool | None":
        """A pool when the machine and the policies allow this fast path: a queue policy
        keeping every blocked job's reservation and only moving it earlier (HIGHEST with
        unlimited depth), and backfill starting fitting jobs in priority order (FIRSTFIT)."""
        if not cfg.fast_path or len(nodes) != 1 or policies_active or cfg.standing_reservations:
            return None
        node = nodes[0]
        if not node.usable or node.utilized_procs or not cfg.fifo:
            return None
        if queue.depth != inf or not queue.reoptimizes or not (backfill.backfills and backfill.at_once):
            return None
        return cls(node)

    def __init__(self, node: Node) -> None:
        self.name = node.name
        self.size = node.procs
        self.prof = StepProfile(node.procs)
        self.keys: list[Key] = []  # idle jobs in priority order
        self.idle: dict[str, tuple[Job, Key]] = {}
        self.fresh: list[Key] = []  # idle jobs not considered yet (no reservation)
        self.book = ReservationBook()
        self.running: dict[str, tuple[Job, float, float]] = {}  # id -> (job, start, end)
        # where free processors rose, not yet applied: (a, b, only to jobs before this one)
        self.regions: list[tuple[float, float, Key | None]] = []
        self.freed = False
        self.gaps: list[tuple[int, float, float, float]] = []  # see _gap

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
            self.regions.append((a, end, None))
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
        r = self.book.pop(key)
        if r is None:
            self.fresh.remove(key)
            return
        self.prof.add(r.start, r.end, job.procs)
        self.regions.append((r.start, r.end, None))
        self.freed = True

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
        due = self.fresh + self.book.due(now)
        self.fresh = []
        if due:
            due.sort()
            self._run_due(due, now, res)
        return res

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
        r = self.book.pop(key)
        if r is not None:
            if r.start == now:  # its reservation begins now: the same interval, running
                self._started(job, key, now, res, backfill)
                res.reservations_released.append(r)
                return True
            prof.add(r.start, r.end, job.procs)
            self.regions.append((r.start, r.end, None))
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
        self.book.add(key, job.procs, job.walltime, r)
        res.reservations_created.append(r)

    # -- compression: reservations move earlier after something was freed -------------
    def _compress(self, now: float, res: IterationResult) -> None:
        """The engine's pass (every reservation, in priority order, to its earliest start
        before its own) over the reservations a pending region could help."""
        pending = _merged([g for g in self.regions if g[1] > now])  # the past helps nobody
        self.regions = []
        found: dict[Key, float] = {}
        todo: list[Key] = []
        self.gaps = []
        for a, b, upto in pending:
            for key in self.book.nominate(self.prof, a, b, now, None, upto, found):
                heappush(todo, key)
        while todo:
            key = heappop(todo)
            moved = self._advance(key, now, found[key], res)
            if moved is not None:
                a, b = moved
                self.regions.append((a, b, key))  # the jobs before this one see it next pass
                for later in self.book.nominate(self.prof, a, b, now, key, None, found):
                    heappush(todo, later)

    def _advance(self, key: Key, now: float, reach: float, res: IterationResult) -> tuple[float, float] | None:
        """Move the job's reservation to its earliest start before the current one (a
        window beginning before ``reach``); returns the region it gave up, if any."""
        book = self.book
        r = book.res.get(key[2])
        if r is None or r.start <= now:
            return None
        old_start, old_end = r.start, r.end
        w, p = book.walltime[key[2]], book.sizes[key[2]]
        times = self.prof.times
        last = bisect_left(times, old_start) - 1
        if self.prof.vals[last] >= p:  # a window may cross its start (own given back there)
            t = self._earlier(now, w, p, old_start, reach)
        elif now + w < old_start:  # only a window wholly before it: a gap ending by ``last``
            t = self._gap(now, w, p, times[last])
            t = t if t < reach else inf
        else:
            return None
        if t == inf:
            return None
        self.gaps = []  # the profile changes
        end = t + w
        if end <= old_start:
            self.prof.add(t, end, -p)
            self.prof.add(old_start, old_end, p)
        else:  # the overlap keeps its processors: only the ends change hands
            self.prof.add(t, old_start, -p)
            self.prof.add(end, old_end, p)
        self.book.move(key, r, t, end)
        res.reservations_created.append(r)
        gone = max(old_start, end)
        return (gone, old_end) if gone < old_end else None

    def _gap(self, now: float, w: float, need: int, end_by: float) -> float:
        """Earliest ``t >= now`` with ``need`` free over [t, t + w) and ``t + w <= end_by``.

        Between two moves many reservations ask this; the answers (or how far nothing was
        found) are kept in ``gaps`` until the profile changes.  A request for no more
        processors and no longer bounds a bigger one: its earliest gap ``t`` comes no
        later, and where it has none, neither has the bigger one."""
        for n, d, t, searched in self.gaps:
            if n <= need and d <= w:
                if t < inf and (t + d > end_by or (n == need and d == w)):
                    return t if t + w <= end_by else inf
                if t == inf and searched >= end_by:
                    return inf
        times, vals = self.prof.times, self.prof.vals
        i = bisect_right(times, now) - 1
        found = inf
        run: float | None = None  # start of the current run of enough free processors
        for k in range(i, bisect_left(times, end_by, i + 1)):
            if vals[k] < need:
                run = None
                continue
            if run is None:
                run = now if k == i else times[k]
            if times[k + 1] >= run + w:  # k + 1 exists: end_by is a segment start after k
                found = run
                break
        self.gaps.append((need, w, found, end_by))
        return found

    def _earlier(self, now: float, w: float, need: int, limit: float, reach: float = inf) -> float:
        """Earliest ``t`` in [now, limit) where a job reserved from ``limit`` on would fit
        instead, else inf (the engine's ``earliest_without`` giving the reservation back).

        From ``limit`` on the job's own processors are given back, so a window there always
        fits: a start ``t`` fits iff ``need`` stay free from ``t`` for ``w`` or until ``limit``.
        Only the segments before ``limit`` are read, as runs of enough free processors,
        and no run beginning at ``reach`` or later is tried."""
        times, vals = self.prof.times, self.prof.vals
        i = bisect_right(times, now) - 1
        hi = bisect_left(times, limit, i + 1)
        if vals[hi - 1] < need and max(vals[i:hi]) < need:
            return inf
        last = bisect_left(times, reach, i + 1)  # runs begin at segments before this one
        t: float | None = None  # start of the current run
        for k in range(i, hi):
            if vals[k] < need:
                t = None
                continue
            if t is None:
                if k >= last:
                    return inf
                t = now if k == i else times[k]
            if k + 1 == hi or times[k + 1] >= t + w:
                return t
        return inf

    # -- queries and hand-over -------------------------------------------------------
    @property
    def queue(self) -> list[Job]:
        return [self.idle[key[2]][0] for key in self.keys]

    def next_wakeup(self, now: float) -> float | None:
        return self.book.next_start(now)

    def held(self) -> list[tuple[Job, Reservation]]:
        """Job reservations with their jobs, in priority order."""
        book = self.book
        return [(self.idle[k[2]][0], book.res[k[2]]) for k in self.keys if k[2] in book.res]

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


def _merged(regions: list[tuple[float, float, Key | None]]) -> list[tuple[float, float, Key | None]]:
    """Overlapping or touching regions as one, for the jobs before the latest bound of
    either (nominating a job too many only costs a look: a job moves to its true
    earliest start, found on the profile itself)."""
    if len(regions) < 2:
        return regions
    regions.sort(key=lambda g: g[0])
    out = [regions[0]]
    for a, b, upto in regions[1:]:
        a0, b0, upto0 = out[-1]
        if a > b0:
            out.append((a, b, upto))
            continue
        wider = None if upto is None or upto0 is None else max(upto, upto0)
        out[-1] = (a0, max(b, b0), wider)
    return out

"""The lean priority pass: a site's configuration on one processor pool, decided as the
general pass decides, without the general pass's machinery.

A trace replay is one node of P processors and jobs asking processors only.  Under
RESERVATIONPOLICY CURRENTHIGHEST with FIRSTFIT or BESTFIT backfill, every question the
general pass (:meth:`Scheduler._schedule`) asks of the placement engine has a short
answer on that node's processor profile:

* "does it fit now" is the profile's minimum over ``[now, now + walltime)``;
* "where is its reservation" is the profile's earliest window (no admitted hold, no
  measured use: :meth:`Engine.find`'s single-node branch);
* "may the pass stop" (:class:`grid_tasks.maui.passes.PassStop`) is the same minimum
  taken the way the free-processors curve takes it.

The state stays the general engine's (placements, profiles, holds, job reservations),
so the lean pass is chosen per iteration, only when its preconditions hold for every
ranked job (:meth:`LeanPass.takes`); otherwise the general pass runs on the same
state.  Standing and administrative reservations take part as what they are on the
profile: processors nobody in the queue is admitted to.  tests/maui/test_lean.py
drives both passes in lock step on random workloads and on trace prefixes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from math import inf
from typing import TYPE_CHECKING

from grid_tasks.maui.model import ACL, IterationResult, Job, Reservation, ReservationKind
from grid_tasks.maui.policies import BestFit, CurrentHighest, FirstFit
from grid_tasks.maui.profile import StepProfile
from grid_tasks.maui.throttle import HARD, SOFT

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.scheduler import Scheduler


def curve_free(prof: StepProfile, now: float, cap: float, w: float) -> float:
    """:meth:`CapacityCurve.free_for` of a one-node curve: the free processors at ``now``
    capped by ``cap``, lowered by every drop at an offset ``time - now`` below ``w``."""
    times, vals = prof.times, prof.vals
    i = bisect_right(times, now) - 1
    low = max(0.0, min(vals[i], cap))
    for k in range(i + 1, len(times)):
        if not times[k] - now < w:
            break
        v = vals[k]
        if v < low:
            low = max(v, 0.0)
    return low


class _Steps:
    """A one-node free-processors curve for many lookups: (offset, level) at each drop,
    built the way :class:`CapacityCurve` builds it, then one bisection per walltime."""

    def __init__(self, prof: StepProfile, now: float, cap: float) -> None:
        times, vals = prof.times, prof.vals
        i = bisect_right(times, now) - 1
        low = self.v0 = max(0.0, min(vals[i], cap))
        self.offsets: list[float] = []
        self.levels: list[float] = []
        for k in range(i + 1, len(times)):
            v = vals[k]
            if v < low:
                low = max(v, 0.0)
                self.offsets.append(times[k] - now)
                self.levels.append(low)
                if low == 0:
                    break

    def free_for(self, w: float) -> float:
        n = bisect_left(self.offsets, w)
        return self.levels[n - 1] if n else self.v0


class LeanPass:
    """The priority pass of one :class:`Scheduler` on its single node (see module doc)."""

    @staticmethod
    def qualifies(sched: "Scheduler") -> bool:
        """Whether the configuration is of the class the lean pass decides exactly."""
        return (sched.config.fast_path and len(sched.engine.nodes) == 1
                and type(sched.queue_policy) is CurrentHighest
                and type(sched.backfill) in (FirstFit, BestFit))

    @classmethod
    def maybe(cls, sched: "Scheduler") -> "LeanPass | None":
        """A lean pass when the configuration is of its class."""
        return cls(sched) if cls.qualifies(sched) else None

    def __init__(self, sched: "Scheduler") -> None:
        self.sched = sched
        self.node = next(iter(sched.engine.nodes.values()))
        self.name = self.node.name
        self.prof = sched.engine.prof[self.name]["p"]
        self._ok: set[str] = set()  # job ids known to qualify, while ``_holds`` stands
        self._holds: object = None

    # -- whether this iteration qualifies ---------------------------------------------
    def takes(self, order: list[Job]) -> bool:
        """Whether every ranked job (and the node) is one the lean pass decides exactly:
        processors only, no hold admitting it, and no measured use on the node."""
        node = self.node
        if not node.usable or (node.utilized_procs and self.sched.engine.avail.counts_utilized):
            return False
        eng = self.sched.engine
        if eng._hold_list is not self._holds or len(self._ok) > 2 * len(order) + 4096:
            self._holds, self._ok = eng._hold_list, set()  # holds changed (or jobs long gone)
        ok = self._ok
        for job in order:
            if job.id not in ok:
                if not (job.simple and job.procs_per_task > 0 and job.id not in eng.acl_jobs
                        and not eng.accessible(job)):
                    return False
                ok.add(job.id)
        return True

    # -- the pass ----------------------------------------------------------------------
    def run(self, order: list[Job], now: float, res: IterationResult) -> None:
        """:meth:`Scheduler._refresh_reservations` and :meth:`Scheduler._schedule` under
        CURRENTHIGHEST: drop every job reservation, then one pass in priority order."""
        sched = self.sched
        eng, job_res = sched.engine, sched.job_res
        for job_id in list(job_res):
            pl = job_res.pop(job_id)
            eng.remove(job_id)
            res.reservations_released.append(pl.reservation)  # type: ignore[arg-type]
        sched.freed = False
        picks, deferred = self._pass(order, now, res)
        throttle = sched.throttle
        for job in sched.backfill.order(picks, lambda: 0):  # BESTFIT's order needs no count
            if self.fits(job, now) and throttle.allows(job, 1, SOFT):
                sched._start(job, {self.name: job.tasks}, now, res, True)
        for job in deferred:
            if throttle.allows(job, 1, HARD) and self.fits(job, now) and throttle.allows(job, 1, HARD):
                sched._start(job, {self.name: job.tasks}, now, res, True)

    def _pass(self, order: list[Job], now: float, res: IterationResult) -> tuple[list[Job], list[Job]]:
        sched = self.sched
        throttle, eng = sched.throttle, sched.engine
        depth = sched.queue_policy.depth
        at_once = sched.backfill.at_once
        held, blocked = 0, False
        picks: list[Job] = []
        deferred: list[Job] = []
        seen, full, fits_at = -1, False, -1  # PassStop's memory
        for i, job in enumerate(order):
            if held >= depth:
                started = len(res.started)
                if started != seen:
                    seen, full, fits_at = started, self.nothing_free(now), -1
                if full:
                    break
                if i > fits_at:
                    fits_at = self.first_fitting(order, i, now)
                    if fits_at < 0:
                        break
            if not throttle.idle_allowed(job) or not eng.can_ever_fit(job):
                res.throttled += 1
                continue
            res.considered += 1
            if not throttle.allows(job, 1, SOFT):
                deferred.append(job)
                res.throttled += 1
                continue
            if not blocked or at_once:
                if self.fits(job, now):
                    sched._start(job, {self.name: job.tasks}, now, res, blocked)
                    continue
            elif self.fits(job, now):
                picks.append(job)
                continue
            if held < depth and self.reserve(job, now, res, blocked):
                held += 1
            blocked = True
        return picks, deferred

    # -- the engine's answers on one profile ----------------------------------------------
    def cap(self) -> float:
        """What the availability policy lets the node give now."""
        return self.sched.engine.avail.procs_now(self.node)

    def fits(self, job: Job, now: float) -> bool:
        """:meth:`Scheduler._fit_now` is not None: the curve's test, then the node's."""
        cap = self.cap()
        end = now + job.walltime
        if job.procs > curve_free(self.prof, now, cap, job.walltime):
            return False
        free = min(self.prof.min_over(now, end), cap)
        return int(free // job.procs_per_task) >= job.tasks

    def reserve(self, job: Job, now: float, res: IterationResult, blocked: bool) -> bool:
        """:meth:`Scheduler._reserve_job` from ``now``; True when the job now holds a
        reservation (one that would begin at once goes the general way)."""
        t = self.prof.earliest(now, job.walltime, job.procs)
        if t == inf:
            return False
        sched = self.sched
        if t <= now:  # never after a failed fit; kept exact all the same
            if not sched._reserve_job(job, now, now, res):
                return False
            pl = sched.job_res[job.id]
            return not (pl.start <= now and sched._start_reserved(job, pl, now, res, blocked))
        alloc = {self.name: job.tasks}
        r = Reservation(name=f"job.{job.id}", start=t, end=t + job.walltime,
                        acl=ACL(jobs=frozenset({job.id})), tasks=job.tasks,
                        procs_per_task=job.procs_per_task, kind=ReservationKind.JOB,
                        job_id=job.id, allocation=dict(alloc))
        sched.job_res[job.id] = sched.engine.place(job, t, job.walltime, alloc, running=False, reservation=r)
        res.reservations_created.append(r)
        return True

    def nothing_free(self, now: float) -> bool:
        """:meth:`Scheduler.nothing_free` on the one usable node."""
        held = 0.0
        for h in self.sched.engine.holds.values():
            rem = h.rem.get(self.name)
            if rem is not None:
                held = held + rem.value_at(now)
        node = self.node
        return min(self.prof.value_at(now) + held, node.procs - node.utilized_procs) <= 0

    def first_fitting(self, order: list[Job], i: int, now: float) -> int:
        """:meth:`PassStop._first_fitting`: the first job from ``i`` on passing the
        free-processors test (no job here is admitted to a hold: no bonus), or -1."""
        steps = _Steps(self.prof, now, self.cap())
        for k in range(i, len(order)):
            job = order[k]
            if job.procs <= steps.free_for(job.walltime):
                return k
        return -1

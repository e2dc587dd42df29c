"""The site pool: a site's configuration on one processor pool, on a compiled core.

A trace replay under a site's maui.cfg (fairshare, throttles, credential priorities,
CURRENTHIGHEST reservations to a depth, FIRSTFIT or BESTFIT backfill, standing
reservations) is one node of P processors whose jobs ask processors only.  Every
iteration re-ranks the queue, charges every running job's fairshare and remakes the
reservations; on the general engine that cost 10 to 50 times an EASY replay, almost
all of it interpreter overhead.  :class:`SitePool` keeps the jobs, credentials and
:class:`Reservation` objects in Python and hands the numbers (profile, ranking,
fairshare windows, throttle counters, the pass) to ``grid_tasks.maui._site``, which
makes the same floating-point operations in the same order as the Python code.

The reference is :class:`grid_tasks.maui.lean.LeanPass` on the general engine (itself
checked against the general pass): it runs when the extension is missing or
``GRID_TASKS_PURE=1``.  Whatever the pool does not model (a job with memory or
features, one admitted to a reservation, measured node use, a non-integer clock, an
administrative reservation or a query needing the engine) moves the state to the
general engine for good (:meth:`Scheduler._leave_pool` calls :meth:`export`).
Standing reservations stay the general engine's holds: they are placed there on the
pool's profile, once per period, and mirrored onto the core.
"""

from __future__ import annotations

from bisect import bisect_right
from math import inf
from typing import TYPE_CHECKING

from grid_tasks.maui.config import CREDENTIAL_KINDS, throttle_limit
from grid_tasks.maui.lean import LeanPass
from grid_tasks.maui.model import (
    ACL, IterationResult, Job, Reservation, ReservationKind, SchedulerError, Start,
)
from grid_tasks.maui.pool_compiled import FORCED_PURE
from grid_tasks.maui.priority import credential
from grid_tasks.maui.throttle import HARD

try:
    from grid_tasks.maui import _site
except ImportError:  # no compiler at install time: the lean pass runs instead
    _site = None  # type: ignore[assignment]

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.scheduler import Scheduler

#: which core decides a site's configuration on one pool ("compiled" or "pure": the lean pass)
CORE = "compiled" if _site is not None and not FORCED_PURE else "pure"

#: subcomponents that move while a job waits, as the core numbers them
_CODES = {"QUEUETIME": 0, "XFACTOR": 1, **{"FS" + kind: 2 + i for i, kind in enumerate(CREDENTIAL_KINDS)}}
_MODES = {"": 0, "+": 1, "-": 2, "^": 2}
_RUNNING_LIMITS = ("MAXJOB", "MAXPROC", "MAXPS", "MAXNODE")
_EXACT = 2.0 ** 53  # whole seconds below this are exact doubles: the core's arithmetic is Python's


def _whole(x: float) -> bool:
    return float(x).is_integer() and abs(x) < _EXACT


def _isfloat(x: float) -> int:
    """1 for a float time, 0 for an int: the core hands times back as the type the general
    engine's arithmetic on the same objects would give (an int trace stays int)."""
    return int(isinstance(x, float))


class SitePool:
    """A site's configuration on one processor pool (see the module docstring)."""

    @classmethod
    def maybe(cls, sched: "Scheduler") -> "SitePool | None":
        """A site pool when the core is compiled and the configuration is of its class."""
        if CORE != "compiled" or not LeanPass.qualifies(sched):
            return None
        node = next(iter(sched.engine.nodes.values()))
        if not node.usable or node.utilized_procs:
            return None
        moving = [subs for _, subs, fixed in sched.ranking.terms if not fixed]
        if any(sub not in _CODES for subs in moving for sub, _, _ in subs):
            return None  # a moving part the core does not compute
        return cls(sched)

    def __init__(self, sched: "Scheduler") -> None:
        self.sched = sched
        cfg, eng, fs = sched.config, sched.engine, sched.fairshare
        self.node = next(iter(eng.nodes.values()))
        self.name = self.node.name
        comps = tuple((cw, int(fixed), () if fixed else tuple((_CODES[sub], sw) for sub, _, sw in subs))
                      for cw, subs, fixed in sched.ranking.terms)
        self.core = _site.Core(float(self.node.procs), float(eng.avail.procs_now(self.node)),
                               float(sched.queue_policy.depth), int(sched.backfill.at_once), int(cfg.fifo),
                               int(fs.enabled), float(cfg.fs_interval), int(cfg.fs_depth), float(cfg.fs_decay),
                               int(sched.throttle.active), comps)
        self.idle: dict[str, Job] = {}  # in submission order
        self.parked: set[str] = set()  # idle jobs that can never start (not ranked)
        self.slot: dict[str, int] = {}
        self.by_slot: list[Job] = []
        self.running: dict[str, tuple[Job, float, None]] = {}
        self.job_res: dict[str, Reservation] = {}  # in creation order
        self.creds: dict[tuple[str, str], int] = {}
        self._bykind: dict[tuple, tuple[int, ...]] = {}  # credential slots per credential tuple
        self._hold_times: list[float] = []  # hold starts and ends, sorted (for next_wakeup)
        self._hold_end = inf  # the earliest hold end (expiry is due from then on)
        self._standing_until = -inf  # no standing reservation has a new period before this

    @property
    def queue(self) -> list[Job]:
        """Idle jobs in submission order."""
        return list(self.idle.values())

    def accepts(self, job: Job) -> bool:
        """Processors only, whole seconds, and no reservation admitting it."""
        eng = self.sched.engine
        return (job.simple and job.procs_per_task > 0 and job.walltime > 0 and _whole(job.submit_time)
                and _whole(job.walltime) and job.id not in eng.acl_jobs and not eng.accessible(job))

    # -- events --------------------------------------------------------------------
    def _register(self, job: Job, seq: int, ready: bool) -> int:
        sched = self.sched
        creds = (job.user, job.group, job.account, job.job_class, job.qos)
        bykind = self._bykind.get(creds)
        if bykind is None:
            bykind = self._bykind[creds] = tuple(
                -1 if (name := credential(job, kind)) is None else self._cred(kind, name)
                for kind in CREDENTIAL_KINDS)
        fixed = sched.ranking._fixed(job, job.submit_time)  # credentials and size: the same floats
        sched.ranking.forget(job.id)
        slot = self.core.submit(seq, float(job.submit_time), float(job.walltime), _isfloat(job.walltime),
                                float(job.procs), job.tasks,
                                job.procs_per_task, float(job.priority), float(sched.backfill.metric(job)),
                                float(sched.fairshare.usage_rate(job)), 0.0, bykind, fixed, int(ready),
                                int(sched.engine.can_ever_fit(job)))
        self.slot[job.id] = slot
        if slot == len(self.by_slot):
            self.by_slot.append(job)
        else:  # the slot of a job gone, reused
            self.by_slot[slot] = job
        return slot

    def _cred(self, kind: str, name: str) -> int:
        hit = self.creds.get((kind, name))
        if hit is None:
            sched = self.sched
            target = sched.config.fs_targets.get(kind, {}).get(name)
            limits = sched.throttle._limits(kind, name) if sched.throttle.active else {}
            maxi = throttle_limit(limits, "MAXIJOB")
            hit = self.creds[(kind, name)] = self.core.credential(
                CREDENTIAL_KINDS.index(kind), None if target is None else target.value,
                0 if target is None else _MODES[target.mode],
                tuple(throttle_limit(limits, key) for key in _RUNNING_LIMITS),
                None if maxi is None else maxi[HARD])
        return hit

    def submit(self, job: Job, seq: int) -> None:
        ready = self.sched.may_ever_start(job)
        self._register(job, seq, ready)
        self.idle[job.id] = job
        if not ready:
            self.parked.add(job.id)

    def ended(self, job_id: str, now: float) -> None:
        if self.running.pop(job_id, None) is None:
            raise SchedulerError(f"job {job_id} is not running")
        self.core.ended(self.slot.pop(job_id), now, _isfloat(now))

    def cancel(self, job_id: str) -> None:
        if self.idle.pop(job_id, None) is None:
            raise SchedulerError(f"job {job_id} is not idle")
        self.parked.discard(job_id)
        if self.core.cancel(self.slot.pop(job_id)):
            del self.job_res[job_id]
            self.sched.freed = True

    def restore(self, job: Job, start: float, now: float) -> None:
        """A job already running since ``start`` (state rebuilt, or a test setup)."""
        alloc = {self.name: job.tasks}
        if not _whole(start):  # the core counts whole seconds: the general engine takes over
            sched = self.sched
            sched._leave_pool(now)
            eng = sched.engine
            if not eng.fits(job, alloc, max(start, now), start + job.walltime, now, eng.accessible(job)):
                raise SchedulerError(f"job {job.id}: allocation {alloc} is not free")
            eng.place(job, start, job.walltime, alloc, running=True)
            sched._accounted[job.id] = start
            sched.throttle.started(job, 1, start)
            return
        if self.core.min_over(max(start, now), start + job.walltime) < job.procs:
            raise SchedulerError(f"job {job.id}: allocation {alloc} is not free")
        self.core.restore(self._register(job, self.sched.seq[job.id], True), float(start), _isfloat(start))
        self.running[job.id] = (job, start, None)

    # -- the iteration -------------------------------------------------------------
    def iterate(self, now: float) -> IterationResult:
        sched = self.sched
        node = self.node
        if not (now % 1.0 == 0.0 and -_EXACT < now < _EXACT) or not node.usable or node.utilized_procs:
            sched._leave_pool(now)
            return sched._iterate(now)
        res = IterationResult(now)
        if self._holds(now, res):  # a waiting job is admitted to a new reservation
            sched._leave_pool(now)
            rest = sched._iterate(now)
            rest.reservations_released[:0] = res.reservations_released
            rest.reservations_created[:0] = res.reservations_created
            return rest
        started, created, released, considered, throttled = self.core.iterate(now, _isfloat(now))
        by_slot, job_res = self.by_slot, self.job_res
        dropped = {}
        for slot in released:
            r = dropped[slot] = job_res.pop(by_slot[slot].id)
            res.reservations_released.append(r)
        for slot, backfill in started:
            job = by_slot[slot]
            del self.idle[job.id]
            self.running[job.id] = (job, now, None)
            res.started.append(Start(job.id, now, {self.name: job.tasks}))
            res.backfilled += backfill
        for slot, t, tf in created:
            job = by_slot[slot]
            t = t if tf else int(t)  # the type the general engine's own arithmetic gives
            r = dropped.get(slot)
            if r is None or r.start != t or type(r.start) is not type(t):  # made again: the same object
                r = Reservation(name=f"job.{job.id}", start=t, end=t + job.walltime,
                                acl=ACL(jobs=frozenset({job.id})), tasks=job.tasks,
                                procs_per_task=job.procs_per_task, kind=ReservationKind.JOB, job_id=job.id,
                                allocation={self.name: job.tasks})
            job_res[job.id] = r
            res.reservations_created.append(r)
        res.considered = considered
        res.throttled = len(self.parked) + throttled
        return res

    def _holds(self, now: float, res: IterationResult) -> bool:
        """The general engine's hold steps (expiry, standing reservations) on the pool's
        profile; True when a waiting job is admitted to a reservation made now."""
        sched = self.sched
        eng = sched.engine
        if now >= self._hold_end:
            sched._expire_holds(now, res)  # ended: nothing of them lies ahead on the profile
            self._mirror_holds()
        if now < self._standing_until or not self._standing_due(now):
            return False
        base = eng.prof[self.name]["p"]
        base.times, base.vals = self.core.profile()  # place them on the pool's real profile
        before = set(eng.holds)
        sched._refresh_standing(now, res)
        new = [h for name, h in eng.holds.items() if name not in before]
        for hold in new:
            for prof, a, b, d in hold.ops:
                if prof is not base:  # pragma: no cover - a standing reservation borrows from no hold
                    raise SchedulerError(f"reservation {hold.res.name}: charged outside the pool")
                self.core.add(a, _isfloat(a), b, _isfloat(b), d)
        self._mirror_holds()
        return bool(new) and any(job.id in eng.acl_jobs or eng.accessible(job) for job in self.idle.values())

    def _standing_due(self, now: float) -> bool:
        """Whether :meth:`Scheduler._refresh_standing` would look at a new period; when
        not, none will before the earliest next period (``_standing_until``)."""
        made = self.sched._standing_period
        until = inf
        for name, spec in self.sched.config.standing_reservations.items():
            hit = made.get(name)
            k = spec.period_index(now)
            if hit is None or hit[0] is not spec or hit[1] != k:
                return True
            if spec.period != "INFINITY":
                until = min(until, (k + 1) * spec._length())
        self._standing_until = until
        return False

    def _mirror_holds(self) -> None:
        """What each hold keeps on the node, for the pass's "nothing is free" test."""
        segments = []
        for hold in self.sched.engine.holds.values():
            rem = hold.rem.get(self.name)
            if rem is not None:
                segments.extend((a, b, v) for a, b, v in rem.segments(-inf, inf) if v)
        self.core.set_holds(segments)
        holds = [h.res for h in self.sched.engine.holds.values()]
        self._hold_times = sorted(t for r in holds for t in (r.start, r.end) if t < inf)
        self._hold_end = min((r.end for r in holds), default=inf)

    # -- queries and hand-over -------------------------------------------------------
    def next_wakeup(self, now: float) -> float | None:
        """Earliest reservation start, or hold start or end, after ``now``."""
        best, isfloat = self.core.next_reservation(now)
        if best < inf and not isfloat:
            best = int(best)  # the type the general engine's own arithmetic gives
        times = self._hold_times  # sorted by value, ties in hold order: min() takes the first
        if times:
            i = bisect_right(times, now)
            if i < len(times) and times[i] < best:
                best = times[i]
        return None if best == inf else best

    def reservations(self) -> list[Reservation]:
        out = [h.res for h in self.sched.engine.holds.values()]
        out += [Reservation(name=f"job.{jid}", start=start, end=start + job.walltime,
                            acl=ACL(jobs=frozenset({jid})), tasks=job.tasks, procs_per_task=job.procs_per_task,
                            kind=ReservationKind.RUNNING, job_id=jid, allocation={self.name: job.tasks})
                for jid, (job, start, _) in self.running.items()]
        out += self.job_res.values()
        return sorted(out, key=lambda r: (r.start, r.name))

    def held(self) -> list[tuple[Job, Reservation]]:
        """Job reservations with their jobs, in the order they were made."""
        return [(self.idle[jid], r) for jid, r in self.job_res.items()]

    def handed_over(self) -> None:
        """After :meth:`export`: the general engine's processor profile becomes the core's
        own, breakpoint for breakpoint (the same free amounts the placements just made,
        and the same times, so later reservations start at the same int or float times)."""
        base = self.sched.engine.prof[self.name]["p"]
        base.times, base.vals = self.core.profile()
        self.sched.engine.curve = None

    def export(self) -> tuple[list[Job], list[tuple[Job, float]]]:
        """Idle jobs in order and running jobs with their start, for the general engine;
        the fairshare windows, accrual marks and processor profile go there too."""
        sched = self.sched
        eng, fs = sched.engine, sched.fairshare
        running, _, usage, totals = self.core.export()
        for (kind, name), index in self.creds.items():
            for window, value in usage[index]:
                fs.usage[kind][name][window] = value
        for window, value in totals:
            fs.totals[window] = value
        fs._cache.clear()
        for slot, _, accounted in running:
            sched._accounted[self.by_slot[slot].id] = accounted
        base = eng.prof[self.name]["p"]  # capacity less the holds; the jobs are placed by the caller
        base.times, base.vals = [-inf], [self.node.procs]
        for hold in eng.holds.values():
            for prof, a, b, d in hold.ops:
                if prof is base:
                    base.add(a, b, d)
        eng.curve = None
        for job in self.idle.values():
            sched.ranking.forget(job.id)
        return list(self.idle.values()), [self.running[self.by_slot[slot].id][:2] for slot, _, _ in running]

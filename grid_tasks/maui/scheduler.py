"""The Maui scheduler core: one pure iteration over nodes, jobs and reservations.

``Scheduler`` holds the cluster state (nodes, idle and running jobs, reservations) and,
on ``iterate(now)``, goes through Maui's steps: refresh reservations, feasibility,
priority, throttling, start in priority order, job reservations up to RESERVATIONDEPTH,
backfill without delaying any reservation, statistics.  It returns decisions and never
does I/O or reads the clock.

A single node carrying only processor requests (a trace machine) runs on a pool fast
path making the same decisions at a fraction of the cost: :mod:`~grid_tasks.maui.pool`
(submission order, depth 0 or 1), :mod:`~grid_tasks.maui.pool_conservative` (conservative
backfill) or :mod:`~grid_tasks.maui.pool_site` (a site's CURRENTHIGHEST configuration,
whose pure reference is the lean pass of :mod:`~grid_tasks.maui.lean`); anything a pool
does not model moves the state to the general engine, once and for all.
"""

from __future__ import annotations

from math import inf
from operator import attrgetter
from typing import Iterable

from grid_tasks.maui.config import SchedulerConfig
from grid_tasks.maui.engine import Engine, Placement
from grid_tasks.maui.ever import EverStart
from grid_tasks.maui.idle import IdleQueue
from grid_tasks.maui.lean import LeanPass
from grid_tasks.maui.model import (
    ACL, IterationResult, Job, Node, Reservation, ReservationKind, SchedulerError, Start,
)
from grid_tasks.maui.nodeset import NodeSet
from grid_tasks.maui.passes import Pass, PassStop
from grid_tasks.maui.policies import machine_totals, policies_for
from grid_tasks.maui.pool import Pool
from grid_tasks.maui.pool_compiled import conservative_pool
from grid_tasks.maui.pool_conservative import ConservativePool
from grid_tasks.maui.pool_site import SitePool
from grid_tasks.maui.queue_cache import QueueCache
from grid_tasks.maui.priority import Fairshare
from grid_tasks.maui.queries import QueriesMixin
from grid_tasks.maui.ranking import Ranking
from grid_tasks.maui.throttle import HARD, SOFT, Throttle
from grid_tasks.states import NodeState

_ID, _WALLTIME = attrgetter("id"), attrgetter("walltime")


class Scheduler(QueriesMixin):
    """One cluster's Maui scheduler (pure: ``now`` is always an argument)."""

    def __init__(self, nodes: Iterable[Node] | NodeSet, config: SchedulerConfig | None = None) -> None:
        """Over ``nodes``, or a :class:`NodeSet` shared by the schedulers of one node list
        (the same decisions; its nodes are never changed: the engine copies one first)."""
        self.config = config or SchedulerConfig()
        shared = nodes if isinstance(nodes, NodeSet) and len(nodes) > 1 else None
        nodes = list(shared.nodes.values()) if shared is not None else \
            [n.copy() for n in nodes.nodes.values()] if isinstance(nodes, NodeSet) else list(nodes)
        if not nodes:
            raise SchedulerError("a scheduler needs at least one node")
        machine = shared.machine() if shared is not None else machine_totals(nodes)
        policies = policies_for(self.config, machine)  # chosen once: no branching on names
        self.queue_policy, self.backfill = policies.queue, policies.backfill
        self.engine = Engine(shared or nodes, self.config, policies.availability)
        self.seq: dict[str, int] = {}
        self.completed: set[str] = set()
        self.job_res: dict[str, Placement] = {}
        self.freed = False
        self._counter = 0
        self.fairshare = Fairshare(self.config)
        self.fairshare.machine = machine  # type: ignore[assignment]
        self.throttle = Throttle(self.config)
        self.ranking = Ranking(self.config, self.fairshare)
        self.may_ever_start = EverStart(self.engine, self.throttle)
        self.queue = IdleQueue(self.may_ever_start, self.ranking)
        self.idle: dict[str, Job] = self.queue.jobs  # read-only view; changed through self.queue
        self._accounted: dict[str, float] = {}
        self._offsets: tuple[float, ...] = ()
        active = self.fairshare.enabled or self.throttle.active
        self.pool: Pool | ConservativePool | SitePool | None = (
            Pool.maybe(nodes, self.config, active)
            or conservative_pool().maybe(nodes, self.config, policies.queue, policies.backfill, active)
            or SitePool.maybe(self))
        self.standing_refused: dict[str, str] = {}
        self._standing_seen: set[str] = set()
        self._standing_period: dict[str, tuple[object, int]] = {}  # spec name -> (spec, period done)
        self.lean = LeanPass.maybe(self)  # the one-pool pass for a site's configuration

    # -- events --------------------------------------------------------------------
    def submit(self, job: Job, now: float) -> None:
        """A new idle job."""
        if job.id in self.seq and job.id not in self.completed:
            raise SchedulerError(f"job {job.id} is already known")
        self._counter += 1
        self.seq[job.id] = self._counter
        self.completed.discard(job.id)
        if self.pool is not None:
            if self.pool.accepts(job):
                self.pool.submit(job, self._counter)
                return
            self._leave_pool(now)
        self.queue.add(job)

    def submit_many(self, jobs: list[Job], now: float, cache: QueueCache | None = None) -> None:
        """:meth:`submit` of each job in turn, the same state; with ``cache`` (this RM's
        :class:`~grid_tasks.maui.queue_cache.QueueCache`) what an earlier scheduler
        derived from the very same job objects is reused rather than derived again
        (``jobs`` is then never changed in place: a changed queue is a new list)."""
        if cache is None or self.pool is not None or self.completed:
            for job in jobs:
                self.submit(job, now)
            return
        cache.bind(self.config, list(self.engine.nodes.values()))
        cache.prune(jobs)
        first = self._counter + 1
        seq = cache.numbering(jobs, first)  # SchedulerError for a job listed twice
        if any(job_id in seq for job_id in self.seq):
            raise SchedulerError("a job is already known")
        self._counter += len(jobs)
        merged = dict(seq)  # (a copy of a kept dict: no per-job work)
        merged.update(self.seq)
        self.seq = merged
        self.ranking.share(cache)
        self.queue.load(jobs, cache)

    def job_ended(self, job_id: str, now: float) -> None:
        """A running job left (completed, killed, cancelled): free the rest of its walltime."""
        if self.pool is not None:
            self.pool.ended(job_id, now)
            self.completed.add(job_id)
            return
        pl = self.engine.placements.get(job_id)
        if pl is None or not pl.running:
            raise SchedulerError(f"job {job_id} is not running")
        self._accrue_one(pl, now)
        self.engine.remove(job_id, since=now)
        self._accounted.pop(job_id, None)
        self.throttle.ended(pl.job, len(pl.alloc), pl.job.walltime)
        self.completed.add(job_id)
        self.freed = True
        self._release_bound(job_id, now)

    def cancel(self, job_id: str, now: float) -> None:
        """Remove an idle job (and its reservation)."""
        if self.pool is not None:
            self.pool.cancel(job_id)
            return
        if self.queue.drop(job_id) is None:
            raise SchedulerError(f"job {job_id} is not idle")
        if self.job_res.pop(job_id, None) is not None:
            self.engine.remove(job_id)
            self.freed = True
        self._release_bound(job_id, now)

    def restore_running(self, job: Job, start: float, allocation: dict[str, int], now: float) -> None:
        """Record a job already running (state rebuilt from the database, or a test setup)."""
        if job.id in self.seq and job.id not in self.completed:
            raise SchedulerError(f"job {job.id} is already known")
        if sum(allocation.values()) != job.tasks:
            raise SchedulerError(f"job {job.id}: allocation {allocation} does not hold its {job.tasks} tasks")
        self._counter += 1
        self.seq[job.id] = self._counter
        if self.pool is not None and self.pool.accepts(job) and set(allocation) == {self.pool.name}:
            self.pool.restore(job, start, now)
            return
        self._leave_pool(now)
        eng = self.engine
        if not eng.fits(job, allocation, max(start, now), start + job.walltime, now, eng.accessible(job)):
            raise SchedulerError(f"job {job.id}: allocation {allocation} is not free")
        eng.place(job, start, job.walltime, allocation, running=True)
        self._accounted[job.id] = start
        self.throttle.started(job, len(allocation), start)

    def update_node(self, name: str, now: float, **changes: object) -> None:
        """Change a node's state, load or utilized resources (from the node daemons)."""
        self._leave_pool(now)
        node = self.engine.own(name)  # over a node set: the engine's copy
        if node is None:
            raise SchedulerError(f"no node named {name!r}")
        for key, value in changes.items():
            if not hasattr(node, key) or key in ("name", "procs", "memory", "disk", "swap"):
                raise SchedulerError(f"node field {key!r} cannot be updated")
            if key == "state":
                try:
                    value = NodeState(value)
                except ValueError:
                    raise SchedulerError(f"unknown node state {value!r}") from None
            setattr(node, key, value)
        self.engine.nodes_changed()
        self.freed = True
        self.queue.reclassify()

    # -- the iteration -----------------------------------------------------------------
    def iterate(self, now: float) -> IterationResult:
        """One scheduling iteration at ``now``; returns the decisions.

        Scheduler modules (MODULES) are not called here: the core has no effects, and
        the shell calls them afterwards (:class:`grid_tasks.maui.modules.Observers`)."""
        if self.pool is not None:
            return self.pool.iterate(now)
        return self._iterate(now)

    def _iterate(self, now: float) -> IterationResult:
        res = IterationResult(now)
        eng = self.engine
        eng.prune(now)
        self._expire_holds(now, res)
        self._refresh_standing(now, res)
        self._accrue(now)
        self.throttle.new_iteration()
        res.throttled += self.queue.parked  # never to start: not ranked, not considered
        ranked = self.queue.feasible(self._feasible)
        # a queue loaded whole (submit_many) is ranked in submission order: ties by position
        order = self.ranking.rank(ranked, self.seq, now, self.queue.parked_priority,
                                  ranked is self.queue.loaded_ready)  # by_position
        if self.lean is not None and self.lean.takes(order):
            self.lean.run(order, now, res)
        else:
            walls = self.ranking.walltimes_of(order)
            self._offsets = walls if walls is not None else tuple(set(map(_WALLTIME, order)))
            self._refresh_reservations(order, now, res)
            self._schedule(order, now, res)
        eng.iteration_over()
        return res

    def _schedule(self, order: list[Job], now: float, res: IterationResult) -> None:
        # without backfill nobody may overtake a blocked job: later reservations start no
        # earlier than theirs (floor None once a blocked job holds no reservation at all)
        p = Pass(held=len(self.job_res), floor=now)
        job_res = self.job_res
        quick = not self.throttle.active
        done = PassStop(self, now, order, self._offsets)
        for i, job in enumerate(order):
            if done.possible and p.held >= done.depth and done(p, len(res.started), i):
                break  # the rest of the queue could neither start nor get a reservation
            pl = job_res.get(job.id)
            if quick and pl is not None and pl.start > now:
                # the common case under deep reservations: it simply keeps waiting
                res.considered += 1
                p.blocked = True
                if p.floor is not None:
                    p.floor = max(p.floor, pl.start)
                continue
            if not self.throttle.idle_allowed(job) or not self.engine.can_ever_fit(job):
                res.throttled += 1
                continue
            res.considered += 1
            self._consider(job, now, res, p)
        for job in self.backfill.order(p.picks, lambda: self._free_procs(now)):
            self._try_start(job, now, res, SOFT, backfill=True)
        if self.backfill.backfills:
            for job in p.deferred:
                if self.throttle.allows(job, 1, HARD):
                    self._try_start(job, now, res, HARD, backfill=True)

    def _consider(self, job: Job, now: float, res: IterationResult, p: Pass) -> None:
        """One job of the priority pass: start it, reserve for it, or leave it to backfill."""
        bf = self.backfill
        pl = self.job_res.get(job.id)
        if pl is not None:
            if pl.start <= now and self._start_reserved(job, pl, now, res, p.blocked):
                p.held -= 1  # its reservation is gone: the next blocked job may take one
                return
            self._blocked(job, p)
            return
        if not self.throttle.allows(job, 1, SOFT):
            p.deferred.append(job)
            res.throttled += 1
            return
        if not p.blocked or bf.at_once:
            outcome = self._try_start(job, now, res, SOFT, backfill=p.blocked)
            if outcome != "nofit":
                if outcome == "throttled":
                    p.deferred.append(job)
                return
        elif bf.backfills and self._fit_now(job, now):
            p.picks.append(job)  # ordered by the backfill policy after the pass
            return
        start_from = now if bf.backfills else p.floor
        if p.held < self.queue_policy.depth and start_from is not None and self._reserve_job(job, start_from, now, res):
            pl = self.job_res[job.id]
            if pl.start <= now and self._start_reserved(job, pl, now, res, p.blocked):
                return  # a reservation that begins now is a start now
            p.held += 1
        self._blocked(job, p)

    def _blocked(self, job: Job, p: Pass) -> None:
        """The job waits: later jobs may only backfill, and without backfill may not pass it."""
        p.blocked = True
        pl = self.job_res.get(job.id)
        p.floor = None if p.floor is None or pl is None else max(p.floor, pl.start)

    def _free_procs(self, now: float) -> int:
        """Processors free on usable nodes at ``now``, measured use counted (for GREEDY)."""
        return self.engine.free_procs_now(now)

    # -- helpers: starting and reserving -----------------------------------------------
    def _not_before(self, job: Job, now: float) -> float:
        if job.early_start or job.id not in self.engine.acl_jobs:
            return now
        bound = [h.res.start for h in self.engine.holds.values() if job.id in h.res.acl.jobs]
        return max([now] + bound)

    def _fit_now(self, job: Job, now: float) -> dict[str, int] | None:
        """Where the job can start right now for its whole walltime, else None."""
        eng = self.engine
        if not job.early_start and job.id in eng.acl_jobs and self._not_before(job, now) > now:
            return None
        holds = eng.accessible(job)
        end = now + job.walltime
        curve = eng.curve
        if curve is None or curve.now != now:
            curve = eng.capacity(now, self._offsets)
        bonus = sum(h.size for h in holds if h.res.start < end and h.res.end > now) if holds else 0
        if job.procs > curve.free_for(job.walltime) + bonus:
            return None  # not enough processors stay free that long anywhere
        if eng.splits(job):  # fresh nodes per class, the same allocation
            return eng.fit_split(job, holds, now, end, now)
        nodes, names = eng.eligible_set(job)
        live = curve.nodes_free_now()  # (fresh nodes left out: all of them free)
        if len(live) + curve.fresh_live < len(nodes) // 2 and not curve.fresh_live:
            cand = {n for n in live if n in names}
            for h in holds:
                cand.update(n for n in h.rem if n in names)
            nodes = [eng.nodes[n] for n in cand]
        views = {n.name: eng.view(n.name, holds) for n in nodes}
        return eng._alloc_at(job, nodes, views, now, end, now)

    def _try_start(self, job: Job, now: float, res: IterationResult, level: int, backfill: bool) -> str:
        """'started', 'nofit' or 'throttled' (fits, but its nodes break a MAXNODE limit)."""
        alloc = self._fit_now(job, now)
        if not alloc:
            return "nofit"
        if not self.throttle.allows(job, len(alloc), level):
            return "throttled"
        self._start(job, alloc, now, res, backfill)
        return "started"

    def _start(self, job: Job, alloc: dict[str, int], now: float, res: IterationResult, backfill: bool) -> None:
        self.engine.place(job, now, job.walltime, alloc, running=True)
        self.queue.drop(job.id)
        self._accounted[job.id] = now
        self.throttle.started(job, len(alloc), now)
        res.started.append(Start(job.id, now, dict(alloc)))
        if backfill:
            res.backfilled += 1

    def _start_reserved(self, job: Job, pl: Placement, now: float, res: IterationResult, backfill: bool) -> bool:
        eng = self.engine
        eng.remove(job.id)
        del self.job_res[job.id]
        holds = eng.accessible(job)
        alloc = pl.alloc if eng.fits(job, pl.alloc, now, now + job.walltime, now, holds) else self._fit_now(job, now)
        if alloc and self.throttle.allows(job, len(alloc), HARD):
            res.reservations_released.append(pl.reservation)  # type: ignore[arg-type]
            self._start(job, alloc, now, res, backfill)
            return True
        self._reserve_job(job, now, now, res)
        return False

    def _reserve_job(self, job: Job, start_from: float, now: float, res: IterationResult) -> bool:
        t, alloc = self.engine.find(job, max(start_from, self._not_before(job, now)), job.walltime, now)
        if t == inf:
            return False
        r = Reservation(name=f"job.{job.id}", start=t, end=t + job.walltime, acl=ACL(jobs=frozenset({job.id})),
                        tasks=job.tasks, procs_per_task=job.procs_per_task, kind=ReservationKind.JOB,
                        job_id=job.id, allocation=dict(alloc))
        self.job_res[job.id] = self.engine.place(job, t, job.walltime, alloc, running=False, reservation=r)
        res.reservations_created.append(r)
        return True

    def _refresh_reservations(self, order: list[Job], now: float, res: IterationResult) -> None:
        policy = self.queue_policy
        ranked = set(map(_ID, order)) if self.job_res else set()  # (none yet: a fresh core)
        for job_id in policy.dropped(self.job_res, ranked):
            pl = self.job_res.pop(job_id)
            self.engine.remove(job_id)
            res.reservations_released.append(pl.reservation)  # type: ignore[arg-type]
        if not (self.freed and policy.reoptimizes):
            self.freed = False
            return
        self.freed = False
        # keep each reservation but move it as early as it now goes, in priority order;
        # without backfill a job may not move ahead of a higher-priority reservation
        strict = not self.backfill.backfills
        floor: float | None = now
        for job in order:
            pl = self.job_res.get(job.id)
            if pl is None:
                floor = None if strict else floor
                continue
            if job.early_start and pl.start > now and floor is not None:
                self._advance(job, pl, max(now, floor) if strict else now, now, res)
            if strict and floor is not None:
                floor = max(floor, self.job_res[job.id].start)

    def _advance(self, job: Job, pl: Placement, start_from: float, now: float, res: IterationResult) -> None:
        better = self.engine.advance(pl, start_from, now)
        if better is None:
            return
        t, alloc = better
        self.engine.remove(job.id)
        r = pl.reservation
        self.job_res[job.id] = self.engine.place(job, t, job.walltime, alloc, running=False, reservation=r)
        r.start, r.end, r.allocation = t, t + job.walltime, dict(alloc)  # type: ignore[union-attr]
        res.reservations_created.append(r)  # type: ignore[arg-type]

    def _feasible(self, job: Job) -> bool:
        """No hold, and every job it depends on has completed."""
        if not job.depends_on:
            return not job.holds
        return not job.holds and all(d in self.completed for d in job.depends_on)

    # -- fairshare accounting -------------------------------------------------------------
    def _accrue(self, now: float) -> None:
        fs = self.fairshare
        if not fs.enabled:
            return
        accounted = self._accounted
        due = []
        for pl in self.engine.placements.values():
            if pl.running:  # _accrue_one, skipping jobs already accounted up to now
                job = pl.job
                since = accounted.get(job.id, pl.start)
                upto = min(now, pl.end)
                if upto > since:
                    due.append((job, since, upto))
                    accounted[job.id] = upto
        fs.charge_running(due)

    def _accrue_one(self, pl: Placement, now: float) -> None:
        if not self.fairshare.enabled:
            return
        since = self._accounted.get(pl.job.id, pl.start)
        self.fairshare.charge(pl.job, self.fairshare.usage_rate(pl.job), since, min(now, pl.end))
        self._accounted[pl.job.id] = max(since, min(now, pl.end))

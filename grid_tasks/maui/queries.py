"""Scheduler queries and reservation management: showres, showstart, showbf, setres,
releaseres, the metascheduler's ``reserve``, and ``diagnose -p`` (a mixin of Scheduler)."""

from __future__ import annotations

from collections.abc import Sequence
from math import inf
from typing import TYPE_CHECKING

from grid_tasks.maui.config import AvailabilityPolicy
from grid_tasks.maui.engine import Engine
from grid_tasks.maui.model import (
    ACL, IterationResult, Job, PriorityBreakdown, Reservation, ReservationKind, ReservationRefused,
    StartEstimate, Window,
)
from grid_tasks.maui.priority import breakdown
from grid_tasks.maui.ranking import VECTOR_FROM

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.scheduler import Scheduler


class QueriesMixin:
    """Read-only queries and reservation commands of :class:`Scheduler`."""

    # -- listings ------------------------------------------------------------------------
    def idle_jobs(self: "Scheduler") -> list[Job]:
        """Idle jobs in submission order."""
        if self.pool is not None:
            return list(self.pool.queue)
        idle = self.idle  # (ids sorted by a C key: a lambda per job cost 0.1 s at 100,000)
        return [idle[i] for i in sorted(idle, key=self.seq.__getitem__)]

    def idle_count(self: "Scheduler") -> int:
        """How many jobs are idle (without listing them)."""
        return len(self.pool.queue) if self.pool is not None else len(self.idle)

    def nothing_free(self: "Scheduler", now: float) -> bool:
        """Whether no job at all could start at ``now``: some node is usable and each
        processor of every usable node is taken by a running job.  Processors a
        reservation holds count as free (the jobs its ACL admits may take them); a
        reservation can only take free processors, so none added later frees any.
        Never said for the single-node pool."""
        eng = self.engine
        if self.pool is not None:
            return False
        holds = eng.holds.values()
        if eng.free_procs_fresh():
            return False  # a fresh node (engine over a node set) is free and in no hold
        if self.config.availability_policy is not AvailabilityPolicy.DEDICATED:
            # the free-processors curve knows the nodes with min(free, procs - utilized) > 0
            # at now; one that no hold covers settles it without looking at every node
            held_on = {name for h in holds for name in h.rem}
            if any(name not in held_on for name in eng.capacity(now, self._offsets).nodes_free_now()):
                return False
        # over a node set the fresh nodes left have nothing free (the test above), as
        # the test below would find: only the nodes looked at one by one remain
        usable = [n for n in eng.individual_nodes() if n.usable]
        # what the holds keep on each node, summed in hold order (one pass over the holds,
        # not one per node: a full machine with many reservations asks this every start)
        held: dict[str, float] = {}
        for h in holds:
            for name, rem in h.rem.items():
                held[name] = held.get(name, 0) + rem.value_at(now)
        return (bool(usable) or eng.fresh_count() > 0) and all(
            min(eng.prof[n.name]["p"].value_at(now) + held.get(n.name, 0),
                n.procs - n.utilized_procs) <= 0
            for n in usable)

    def running_jobs(self: "Scheduler") -> dict[str, tuple[float, dict[str, int]]]:
        """Running job id -> (start, allocation)."""
        if self.pool is not None:
            return {jid: (start, {self.pool.name: job.tasks}) for jid, (job, start, _) in self.pool.running.items()}
        return {jid: (pl.start, dict(pl.alloc)) for jid, pl in self.engine.placements.items() if pl.running}

    def reservations(self: "Scheduler") -> list[Reservation]:
        """Administrative reservations, job reservations and running jobs' reservations."""
        if self.pool is not None:
            return self.pool.reservations()
        out = [h.res for h in self.engine.holds.values()]
        for jid, pl in self.engine.placements.items():
            if pl.running:
                out.append(Reservation(name=f"job.{jid}", start=pl.start, end=pl.end,
                                       acl=ACL(jobs=frozenset({jid})), tasks=pl.job.tasks,
                                       procs_per_task=pl.job.procs_per_task, kind=ReservationKind.RUNNING,
                                       job_id=jid, allocation=dict(pl.alloc)))
            elif pl.reservation is not None:
                out.append(pl.reservation)
        return sorted(out, key=lambda r: (r.start, r.name))

    def next_wakeup(self: "Scheduler", now: float) -> float | None:
        """Earliest time after ``now`` when a reservation begins or ends (else None)."""
        if self.pool is not None:
            return self.pool.next_wakeup(now)
        times = [pl.start for pl in self.job_res.values() if pl.start > now]
        for hold in self.engine.holds.values():
            times.extend(t for t in (hold.res.start, hold.res.end) if now < t < inf)
        return min(times) if times else None

    def may_start_later(self: "Scheduler") -> bool:
        """Whether an idle job could still start once nothing runs any more: False when
        every idle job is held, waits on a dependency, can never fit the nodes or breaks
        a hard throttle on its own.  A replay whose only events left are reservation
        wake-ups is over when this is False (standing reservations wake it forever)."""
        jobs = self.pool.queue if self.pool is not None else self.idle.values()
        return any(self._feasible(j) and self.engine.can_ever_fit(j) and self.throttle.ever_allows(j)
                   for j in jobs)

    def diagnose_priority(self: "Scheduler", now: float) -> list[PriorityBreakdown]:
        """Every idle job's priority and its weighted components, highest first."""
        if self.pool is not None and self.fairshare.enabled:
            self._leave_pool(now)  # the site pool keeps the fairshare windows in its core
        rows = [breakdown(j, now, self.config, self.fairshare) for j in self.idle_jobs()]
        return sorted(rows, key=lambda r: (-r.total, self.seq[r.job_id]))

    def priority_scores(self: "Scheduler", now: float) -> tuple[list[Job], Sequence[float]]:
        """Every idle job (in :meth:`idle_jobs` order) and its total priority: the very
        float of its :meth:`diagnose_priority` row, scored as the iteration ranks (a
        deep queue column-wise) without a breakdown per job, which cost a deep queue's
        plan seconds where only the totals were wanted (showq's order, a kept plan)."""
        if self.pool is not None and self.fairshare.enabled:
            self._leave_pool(now)  # as diagnose_priority: the same fairshare windows
        jobs = self.idle_jobs()
        if len(jobs) >= VECTOR_FROM:
            return jobs, self.ranking.vector_scores(jobs, now)
        return jobs, self.ranking.scores(jobs, now)

    # -- showstart / showbf ------------------------------------------------------------------
    def _query_engine(self: "Scheduler", now: float) -> Engine:
        """The general engine holding the current state (built aside in pool mode)."""
        if self.pool is not None and self.engine.holds:
            self._leave_pool(now)  # a site pool's holds live in the general engine
        if self.pool is None:
            return self.engine
        eng = Engine(list(self.engine.nodes.values()), self.config)
        for job, start in self.pool.export()[1]:
            end = start + job.walltime
            if end > now:
                eng.place(job, start, job.walltime, {self.pool.name: job.tasks}, running=True)
        for job, r in self.pool.held():
            eng.place(job, r.start, job.walltime, dict(r.allocation), running=False, reservation=r)
        return eng

    def estimate(self: "Scheduler", request: Job, now: float, limit: int = 3) -> list[StartEstimate]:
        """``showstart``: when and where the request could start, earliest first; later
        entries are alternatives on other nodes (at most ``limit``, best effort)."""
        eng = self._query_engine(now)
        t0 = self._not_before(request, now) if self.pool is None else now
        return [StartEstimate(t, a) for t, a in eng.find_all(request, t0, request.walltime, now, limit)]

    def free_windows(self: "Scheduler", now: float) -> list[Window]:
        """``showbf``: processors free from ``now``, each level with how long it lasts."""
        eng = self._query_engine(now)
        profs = [(n, eng.prof[n.name]["p"]) for n in eng.nodes.values() if n.usable]
        times = sorted({t for _, p in profs for t in p.times if t > now} | {inf})
        out: list[Window] = []
        last = None
        for t in times:
            mins = [max(0, int(p.min_over(now, t))) for _, p in profs]
            procs = sum(mins)
            if procs <= 0:
                break
            if last is not None and last.procs == procs:
                out[-1] = Window(procs, last.nodes, now, t - now)
            else:
                out.append(Window(procs, sum(1 for m in mins if m > 0), now, t - now))
            last = out[-1]
        return out

    # -- reservations ------------------------------------------------------------------------
    def reserve(self: "Scheduler", request: Job, start: float, duration: float, acl: ACL,
                now: float) -> Reservation:
        """Reserve the request's resources over ``[start, start + duration)`` for ``acl``.

        Never overcommits and never overlaps a reservation whose ACL refuses the request;
        raises :class:`ReservationRefused` otherwise."""
        if start < now:
            raise ReservationRefused(f"reservation for {request.id}: start {start:g} is in the past (now {now:g})")
        if not duration > 0:
            raise ReservationRefused(f"reservation for {request.id}: duration must be positive")
        self._leave_pool(now)
        res = Reservation(name=f"meta.{request.id}", start=start, end=start + duration, acl=acl,
                          tasks=request.tasks, procs_per_task=request.procs_per_task,
                          mem_per_task=request.mem_per_task, kind=ReservationKind.ADMIN, job_id=request.id)
        return self.engine.add_hold(res, now, self.engine.accessible(request))

    def add_reservation(self: "Scheduler", res: Reservation, now: float | None = None, *,
                        take_in_admitted: bool = False, within: Job | None = None) -> Reservation:
        """``setres``: an administrative reservation; refused if anything would overcommit.

        ``take_in_admitted=True`` lets jobs the reservation admits, already running on (or
        reserved to) its resources, continue inside it instead of refusing it — what a
        state reload that restores running jobs first needs.  ``within`` (the credentials
        the reservation is made for) lets reservations admitting them lend it their
        resources: a grid reservation nests inside its user's administrative one, as
        :meth:`estimate` and :meth:`reserve` allow for the same credentials."""
        self._leave_pool(res.start if now is None else now)
        lenders = self.engine.accessible(within) if within is not None else []
        return self.engine.add_hold(res, -inf if now is None else now, lenders,
                                    take_in=take_in_admitted)

    def release_reservation(self: "Scheduler", name: str, now: float | None = None) -> Reservation:
        """``releaseres``: drop an administrative reservation; its resources become free."""
        self._leave_pool(-inf if now is None else now)
        res = self.engine.release_hold(name, -inf if now is None else now)
        self.freed = True
        return res

    def _refresh_standing(self: "Scheduler", now: float, res: IterationResult) -> None:
        """Instantiate standing reservations for the coming periods (SRCFG DEPTH), once
        per period: every occurrence listed later in the same period was made already."""
        made = self._standing_period
        for name, spec in self.config.standing_reservations.items():
            k = spec.period_index(now)
            hit = made.get(name)
            if hit is not None and hit[0] is spec and hit[1] == k:
                continue
            made[name] = (spec, k)
            for inst in spec.instances(now):
                if inst.name in self._standing_seen:
                    continue
                self._standing_seen.add(inst.name)
                try:
                    res.reservations_created.append(self.engine.add_hold(inst, now, []))
                except ReservationRefused as exc:
                    self.standing_refused[inst.name] = str(exc)

    def _expire_holds(self: "Scheduler", now: float, res: IterationResult) -> None:
        for name in [n for n, h in self.engine.holds.items() if h.res.end <= now]:
            res.reservations_released.append(self.engine.release_hold(name, now))
            self.freed = True

    def _release_bound(self: "Scheduler", job_id: str, now: float) -> None:
        """A reservation made for one job only dies with that job."""
        for name, hold in list(self.engine.holds.items()):
            acl = hold.res.acl
            if acl.jobs == {job_id} and acl == ACL(jobs=acl.jobs):
                self.engine.release_hold(name, now)

    def _leave_pool(self: "Scheduler", now: float) -> None:
        """Move the pool's state into the general engine, for good."""
        pool = self.pool
        if pool is None:
            return
        self.pool = None
        idle, running = pool.export()
        for job in idle:
            self.queue.add(job)
        for job, start in running:
            self.engine.place(job, start, job.walltime, {pool.name: job.tasks}, running=True)
            self.throttle.started(job, 1, start)
        for job, r in pool.held():  # reservations keep their place (HIGHEST moves them only earlier)
            self.job_res[job.id] = self.engine.place(job, r.start, job.walltime, dict(r.allocation),
                                                     running=False, reservation=r)
        getattr(pool, "handed_over", lambda: None)()  # a pool may have more to put in place
        self.freed = True


"""The event-driven replay engine: it owns the clock, the scheduling core decides.

Each cluster is one scheduling core (anything with the four calls of
:class:`SchedulerLike`, in practice :class:`grid_tasks.maui.Scheduler`) fed by
its own job source.  All clusters share one event queue and one clock.

Event semantics (the reference simulator's, so results compare one to one):

* events are ordered by time; at one instant all **submissions** come first,
  then **terminations**, then **wake-ups** (reservation boundaries announced by
  ``next_wakeup``); events of one kind at one instant keep their creation order
  (trace order for submissions);
* the core is called after **each** event, never once per instant: a
  termination handled alone may let a backfill job start that a batch of
  terminations would have given to the queue head, and pyss decides per event;
* a job runs for ``min(runtime, estimate)``: the estimate is its walltime and
  the engine kills it there (``killed`` is set).

Submissions are pulled lazily from each source (one pending per cluster), so a
trace streams through the engine; the source must be ordered by submit time.
A caller (the metascheduler) can :meth:`Engine.inject` jobs into any cluster at
any future time and observe starts and ends through callbacks.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from grid_tasks.errors import GridTasksError
from grid_tasks.sim.conventions import SimJob

__all__ = ["Engine", "Cluster", "SchedulerLike", "SimulationError", "Progress", "PROGRESS_EVERY",
           "SUBMIT", "END", "WAKE"]

SUBMIT, END, WAKE = 0, 1, 2  # the order of event kinds at one instant


class SimulationError(GridTasksError):
    """The replay cannot go on: unordered trace, duplicate job, unknown cluster..."""


class SchedulerLike(Protocol):
    """The calls the engine makes on a scheduling core (the Maui core's API)."""

    def submit(self, job: Any, now: float) -> Any: ...

    def iterate(self, now: float) -> Any: ...

    def job_ended(self, job_id: Any, now: float) -> Any: ...

    def next_wakeup(self, now: float) -> float | None: ...

    def cancel(self, job_id: Any, now: float) -> Any: ...


StartCallback = Callable[["Cluster", SimJob, float], None]
#: ``progress(submitted, finished)``: jobs submitted and finished so far
Progress = Callable[[int, int], None]
#: Events between two progress calls.  A slow configuration's core took up to 0.1 s
#: for one event (KTH, config/maui.cfg), so 8 events stay under a second; on a fast
#: core a call per 8 events (two counters, no clock) costs about 1 % of the replay.
PROGRESS_EVERY = 8
EndCallback = Callable[["Cluster", SimJob, float], None]


@dataclass(eq=False)
class Cluster:
    """One machine of the replay: its core, its size and its bookkeeping."""

    name: str
    procs: int
    scheduler: SchedulerLike
    to_core_job: Callable[[SimJob], Any]
    index: int = 0
    waiting: dict[Any, SimJob] = field(default_factory=dict)
    running: dict[Any, SimJob] = field(default_factory=dict)
    wakeups: set[float] = field(default_factory=set)
    source: Iterator[SimJob] | None = None
    next_from_source: SimJob | None = None
    submitted: int = 0
    iterations: int = 0


class Engine:
    """Replays job sources through scheduling cores on one shared clock."""

    def __init__(self) -> None:
        self.clusters: dict[str, Cluster] = {}
        self._order: list[Cluster] = []
        self._heap: list[tuple[float, int, int, int, SimJob | None]] = []
        self._seq = 0
        self.now: float = float("-inf")
        self.events = 0
        self.finished: list[SimJob] = []
        self.cancelled: list[SimJob] = []
        self._on_start: list[StartCallback] = []
        self._on_end: list[EndCallback] = []
        self._on_iterate: list[Callable[[Cluster, float, Any], None]] = []

    # ---- set-up -----------------------------------------------------------
    def add_cluster(self, name: str, procs: int, scheduler: SchedulerLike,
                    to_core_job: Callable[[SimJob], Any],
                    jobs: Iterable[SimJob] | None = None) -> Cluster:
        """Register a cluster; ``jobs`` (ordered by submit time) is pulled lazily."""
        if name in self.clusters:
            raise SimulationError(f"cluster {name!r} is already defined")
        cluster = Cluster(name, procs, scheduler, to_core_job, index=len(self._order))
        self.clusters[name] = cluster
        self._order.append(cluster)
        if jobs is not None:
            cluster.source = iter(jobs)
            self._pull(cluster)
        return cluster

    def on_start(self, callback: StartCallback) -> None:
        """Call ``callback(cluster, job, time)`` whenever a job starts."""
        self._on_start.append(callback)

    def on_end(self, callback: EndCallback) -> None:
        """Call ``callback(cluster, job, time)`` whenever a job ends (or is killed)."""
        self._on_end.append(callback)

    def on_iterate(self, callback: Callable[[Cluster, float, Any], None]) -> None:
        """Call ``callback(cluster, now, result)`` after every core iteration."""
        self._on_iterate.append(callback)

    def inject(self, cluster: str, job: SimJob, at: float | None = None) -> None:
        """Submit ``job`` to ``cluster`` at time ``at`` (default: now)."""
        target = self._cluster(cluster)
        when = self.now if at is None else at
        if when == float("-inf"):
            raise SimulationError(f"job {job.id}: give its submit time, the clock has not started")
        if when < self.now:
            raise SimulationError(f"cannot submit job {job.id} at {when}: the clock is at {self.now}")
        job.submit = when
        self._push(when, SUBMIT, target.index, job)

    def cancel(self, cluster: str, job_id: str) -> SimJob:
        """Withdraw a waiting job from ``cluster`` now (a metascheduler moving it elsewhere).

        The core forgets it (and its reservation); the cluster is then iterated, since
        the freed reservation may let other jobs start.  Running jobs cannot be cancelled.
        """
        target = self._cluster(cluster)
        job = target.waiting.get(job_id)
        if job is None:
            raise SimulationError(f"job {job_id!r} is not waiting in cluster {cluster!r}")
        target.scheduler.cancel(job_id, now=self.now)
        del target.waiting[job_id]
        self.cancelled.append(job)
        self._iterate(target, self.now)
        return job

    def _cluster(self, name: str) -> Cluster:
        try:
            return self.clusters[name]
        except KeyError:
            raise SimulationError(f"no cluster named {name!r}") from None

    # ---- the loop -----------------------------------------------------------
    def _push(self, time: float, kind: int, cluster: int, job: SimJob | None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, kind, self._seq, cluster, job))

    def _pull(self, cluster: Cluster) -> None:
        """Queue the source's next submission (the source is ordered by submit time)."""
        source = cluster.source
        if source is None:
            return
        job = next(source, None)
        if job is None:
            cluster.source = cluster.next_from_source = None
            return
        if job.submit < self.now:
            raise SimulationError(
                f"trace of cluster {cluster.name!r} is not ordered by submit time: job "
                f"{job.id} is submitted at {job.submit}, before the clock ({self.now})")
        cluster.next_from_source = job
        self._push(job.submit, SUBMIT, cluster.index, job)

    @property
    def pending(self) -> int:
        """Events still queued."""
        return len(self._heap)

    def next_time(self) -> float | None:
        """Time of the next event, or ``None`` when the replay is over."""
        return self._heap[0][0] if self._heap else None

    def run(self, until: float | None = None,
            progress: Progress | None = None, every: int = PROGRESS_EVERY) -> None:
        """Handle events until none is left (or the next one is after ``until``).

        ``progress(submitted, finished)`` is called every ``every`` events and once at
        the end, with the jobs submitted and finished so far over every cluster (both
        never decrease).  The engine counts events, never time: a caller who wants a
        display to move once a second throttles by the wall clock on its side.
        """
        if every < 1:
            raise SimulationError(f"progress every {every} events: must be at least 1")
        heap = self._heap
        pop = heapq.heappop
        order = self._order
        while heap:
            if until is not None and heap[0][0] > until:
                self.now = max(self.now, until)
                break
            time, kind, _, index, job = pop(heap)
            self.now = time
            self.events += 1
            cluster = order[index]
            if kind == SUBMIT:
                self._submit(cluster, job, time)  # type: ignore[arg-type]
            elif kind == END:
                self._end(cluster, job, time)  # type: ignore[arg-type]
            elif time in cluster.wakeups:
                cluster.wakeups.discard(time)
                self._iterate(cluster, time)
            if progress is not None and self.events % every == 0:
                progress(self.submitted(), len(self.finished))
        if progress is not None:
            progress(self.submitted(), len(self.finished))

    def submitted(self) -> int:
        """Jobs submitted so far over every cluster."""
        return sum(c.submitted for c in self._order)

    def _submit(self, cluster: Cluster, job: SimJob, now: float) -> None:
        if job.id in cluster.waiting or job.id in cluster.running:
            raise SimulationError(f"job {job.id} is already in cluster {cluster.name!r}")
        if job is cluster.next_from_source:
            self._pull(cluster)
        job.cluster = cluster.name
        cluster.waiting[job.id] = job
        cluster.submitted += 1
        cluster.scheduler.submit(cluster.to_core_job(job), now=now)
        self._iterate(cluster, now)

    def _end(self, cluster: Cluster, job: SimJob, now: float) -> None:
        del cluster.running[job.id]
        job.end = now
        self.finished.append(job)
        cluster.scheduler.job_ended(job.id, now=now)
        for callback in self._on_end:
            callback(cluster, job, now)
        self._iterate(cluster, now)

    def _iterate(self, cluster: Cluster, now: float) -> None:
        scheduler = cluster.scheduler
        result = scheduler.iterate(now=now)
        cluster.iterations += 1
        for start in result.started:
            self._start(cluster, start.job_id, start.time)
        for callback in self._on_iterate:
            callback(cluster, now, result)
        wake = scheduler.next_wakeup(now)
        if wake is not None and wake > now and wake not in cluster.wakeups:
            cluster.wakeups.add(wake)
            self._push(wake, WAKE, cluster.index, None)

    def _start(self, cluster: Cluster, job_id: Any, time: float) -> None:
        try:
            job = cluster.waiting.pop(job_id)
        except KeyError:
            raise SimulationError(
                f"the core of cluster {cluster.name!r} started job {job_id!r}, "
                "which is not waiting there") from None
        job.start = time
        if job.runtime > job.estimate:
            job.killed = True
            end = time + job.estimate
        else:
            end = time + job.runtime
        cluster.running[job_id] = job
        self._push(end, END, cluster.index, job)
        for callback in self._on_start:
            callback(cluster, job, time)

    def unfinished(self) -> list[SimJob]:
        """Jobs still waiting or running (non-empty only if the core left some behind)."""
        return [job for c in self._order for job in (*c.waiting.values(), *c.running.values())]

"""Metascheduling evaluated by simulation (seed 002's argument, measured).

Each trace is a cluster with its own Maui core, all on one clock.  A share of every
trace's jobs becomes **grid jobs**: instead of entering their own cluster's queue they
go to a metascheduler, and some of them are **coallocated**: split into two halves
(``ceil(p/2)`` and ``floor(p/2)`` processors, same walltime and run time) that must
start at the same instant on two different clusters.  The selection is deterministic:
each job draws its fate from a generator seeded with ``(seed, cluster, job id)``, so it
does not depend on the other jobs or on the policy.

Three metascheduling policies (small classes in :mod:`grid_tasks.sim.grid_policies`)
are compared on the very same jobs:

``slice``
    a fixed share of every cluster is handed to the metascheduler: grid jobs run only
    in the slices, local jobs only outside (each part is its own core); inside the
    slices the metascheduler estimates and reserves as ``reserve`` does;
``least-loaded``
    a grid job goes to the queue of the cluster with the least load at submission
    (processors running plus waiting over size; ties: home cluster, then trace order);
    a coallocated job picks the two least loaded clusters that can hold its halves and
    waits in the metascheduler until both can start it *now* (each core's estimate
    answers "now"), then both halves are reserved from now and submitted together;
``reserve``
    estimate-and-reserve: every core estimates, :func:`grid_tasks.broker.planner.plan`
    finds the earliest common start, each part is reserved there with
    ``Scheduler.reserve`` (a reservation admitting that subjob only) and submitted at
    once; it starts when its reservation begins, or earlier if it allows early start
    and its resources free up (its reservation is then released).  Coallocated halves
    never start early (they could not stay together).

A grid job arriving at ``t`` is handled after every trace event at ``t``.  Local
jobs too wide for what their policy leaves them (``slice``: outside the slice) and
grid jobs no cluster (or slice) can ever hold are *refused* and counted, not replayed.

Metrics (:meth:`PolicyRun.metrics`): utilization of the whole grid (busy processor
seconds over the total size times the span from the first submission to the last
end), split into the local and the grid part; mean wait and bounded slowdown of local
jobs and of grid jobs (a grid job waits until its parts start and runs until the last
one ends).  Like all of ``sim``, this module never reads the clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grid_tasks.errors import GridTasksError
from grid_tasks.maui import SchedulerConfig
from grid_tasks.sim.conventions import SimJob, get_convention
from grid_tasks.sim.core import new_scheduler, observe_modules, to_core_job
from grid_tasks.sim.engine import Engine
from grid_tasks.sim.metrics import BSLD_THRESHOLD
from grid_tasks.sim.replay import ClusterSpec, _trace_name
from grid_tasks.sim.swf import SWFReader

__all__ = ["GridError", "GridOptions", "GridJob", "GridWorkload", "PolicyRun", "GridSim",
           "load_workload", "select", "GRID_POLICIES"]

#: the CLI's names, in report order
GRID_POLICIES = ("slice", "least-loaded", "reserve")


class GridError(GridTasksError):
    """A grid simulation cannot be set up (bad share, unknown policy, no trace...)."""


@dataclass(frozen=True)
class GridOptions:
    """How the workload is turned into grid jobs, and the slice size.

    ``grid_share``: fraction of each trace's jobs sent to the metascheduler;
    ``coalloc_share``: fraction of grid jobs split over two clusters (needs two
    clusters and at least two processors); ``early_share``: fraction of the other grid
    jobs that allow starting before their reservation; ``slice``: share of each
    cluster handed to the metascheduler by the ``slice`` policy.
    """

    grid_share: float = 0.1
    coalloc_share: float = 0.3
    early_share: float = 0.5
    slice: float = 0.25
    seed: int = 1

    def __post_init__(self) -> None:
        for name in ("grid_share", "coalloc_share", "early_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise GridError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")
        if not 0.0 < self.slice < 1.0:
            raise GridError(f"--slice must be strictly between 0 and 1, got {self.slice}")


@dataclass(eq=False)
class GridJob:
    """A job handed to the metascheduler; ``parts`` are its subjobs once placed."""

    id: str
    home: str
    submit: float
    estimate: float
    runtime: float
    procs: int
    user: int = -1
    group: int = -1
    coallocated: bool = False
    early_start: bool = False
    parts: list[SimJob] = field(default_factory=list)
    #: subjob id -> (cluster, reservation start) for reserved placements
    reserved: dict[str, tuple[str, float]] = field(default_factory=dict)
    refused: str | None = None

    def sizes(self) -> list[int]:
        """Processors of each subjob: two halves when coallocated."""
        if not self.coallocated:
            return [self.procs]
        first = (self.procs + 1) // 2
        return [first, self.procs - first]

    def subjob(self, index: int, procs: int) -> SimJob:
        """A fresh subjob to submit to a cluster (its id is ``<grid id>/<index>``)."""
        return SimJob(f"{self.id}/{index}", self.submit, self.estimate, self.runtime, procs,
                      self.user, self.group)

    @property
    def started(self) -> bool:
        return bool(self.parts) and all(p.start >= 0 for p in self.parts)

    def view(self) -> SimJob:
        """The grid job as one replayed job, for the metrics (start: first part, end: last)."""
        job = SimJob(self.id, self.submit, self.estimate, self.runtime, self.procs,
                     self.user, self.group, cluster="+".join(p.cluster for p in self.parts))
        if self.parts and all(p.end >= 0 for p in self.parts):
            job.start = min(p.start for p in self.parts)
            job.end = max(p.end for p in self.parts)
            job.killed = any(p.killed for p in self.parts)
        return job


@dataclass
class GridWorkload:
    """The clusters (name -> processors), local jobs per cluster, and the grid jobs."""

    procs: dict[str, int]
    local: dict[str, list[SimJob]]
    grid: list[GridJob]
    options: GridOptions

    @property
    def total_procs(self) -> int:
        return sum(self.procs.values())


def select(clusters: dict[str, list[SimJob]], procs: dict[str, int],
           options: GridOptions) -> GridWorkload:
    """Split each cluster's jobs into local and grid jobs (deterministic in the seed)."""
    local: dict[str, list[SimJob]] = {}
    grid: list[GridJob] = []
    for name, jobs in clusters.items():
        local[name] = []
        for job in jobs:
            draw = random.Random(f"{options.seed}|{name}|{job.id}")
            if not job.measured or draw.random() >= options.grid_share:
                local[name].append(job)
                continue
            coalloc = (draw.random() < options.coalloc_share and job.procs >= 2
                       and len(clusters) >= 2)
            early = not coalloc and draw.random() < options.early_share
            grid.append(GridJob(f"{name}:{job.id}", name, job.submit, job.estimate, job.runtime,
                                job.procs, job.user, job.group, coalloc, early))
    grid.sort(key=lambda g: (g.submit, g.id))
    return GridWorkload(dict(procs), local, grid, options)


def load_workload(specs: Sequence[ClusterSpec], options: GridOptions, *, first: int | None = None,
                  conventions: str = "default", skip_bad: bool = False) -> GridWorkload:
    """Read the traces (each its own cluster) and select the grid jobs."""
    if not specs:
        raise GridError("a grid simulation needs at least one trace")
    jobs: dict[str, list[SimJob]] = {}
    procs: dict[str, int] = {}
    for spec in specs:
        path = Path(spec.trace)
        with SWFReader(path, skip_bad=skip_bad, first=first) as reader:
            size = spec.procs or reader.header.max_procs or reader.header.max_nodes
            if not size:
                raise GridError(f"{path}: the header gives no MaxProcs; give TRACE:P")
            name = spec.name or _trace_name(path)
            base, n = name, 2
            while name in jobs:
                name, n = f"{base}#{n}", n + 1
            convention = get_convention(conventions, size)
            converted = (convention.convert(r) for r in reader)
            jobs[name] = [j for j in converted if j is not None]
            procs[name] = size
    return select(jobs, procs, options)


@dataclass
class PolicyRun:
    """What one policy made of the workload."""

    policy: str
    procs: dict[str, int]
    local: list[SimJob]
    grid: list[GridJob]
    refused_local: int = 0
    events: int = 0
    #: physical cluster of each engine cluster (the slice policy splits clusters in two)
    physical: dict[str, str] = field(default_factory=dict)
    #: processors handed to the metascheduler (slice policy only)
    slice_procs: int = 0
    #: processors of each engine cluster (core)
    cores: dict[str, int] = field(default_factory=dict)

    def grid_views(self) -> list[SimJob]:
        """One finished replayed job per grid job that ran."""
        return [v for v in (g.view() for g in self.grid if g.refused is None) if v.end >= 0]

    def subjobs(self) -> list[SimJob]:
        return [p for g in self.grid for p in g.parts]

    def busy_jobs(self) -> list[SimJob]:
        """Every job that occupied processors: local jobs and grid subjobs."""
        return [j for j in self.local if j.end >= 0] + [p for p in self.subjobs() if p.end >= 0]

    def coalloc_skew(self) -> float:
        """Largest start difference between the halves of a coallocated job (0 is right)."""
        skews = [max(p.start for p in g.parts) - min(p.start for p in g.parts)
                 for g in self.grid if g.coallocated and g.started]
        return max(skews, default=0.0)

    def metrics(self) -> dict[str, Any]:
        """Utilization (total, local, grid, per cluster), and local/grid wait and bsld."""
        local = [j for j in self.local if j.end >= 0]
        parts = [p for p in self.subjobs() if p.end >= 0]
        busy = local + parts
        first = min((j.submit for j in busy), default=0.0)
        last = max((j.end for j in busy), default=0.0)
        total = sum(self.procs.values())
        refused = sum(1 for g in self.grid if g.refused is not None)
        out: dict[str, Any] = {
            "policy": self.policy,
            "utilization": _utilization(busy, total, first, last),
            "utilization_local": _utilization(local, total, first, last),
            "utilization_grid": _utilization(parts, total, first, last),
            "makespan_s": max(last - first, 0.0),
            "clusters": self._per_cluster(busy),
            "local": {**_waits(local), "refused": self.refused_local},
            "grid": {**_waits(self.grid_views()), "refused": refused, **self._grid_facts()},
            "unfinished": len(self.local) - len(local) - self.refused_local + sum(
                1 for g in self.grid if g.refused is None and g.view().end < 0),
            "events": self.events,
        }
        if self.slice_procs:
            out["slice_utilization"] = _utilization(parts, self.slice_procs, first, last)
        return out

    def _grid_facts(self) -> dict[str, Any]:
        return {"coallocated": sum(1 for g in self.grid if g.coallocated and g.started),
                "early_start_allowed": sum(1 for g in self.grid if g.early_start),
                "started_early": sum(1 for g in self.grid for p in g.parts
                                     if p.id in g.reserved and 0 <= p.start < g.reserved[p.id][1]),
                "coalloc_max_skew_s": self.coalloc_skew()}

    def _per_cluster(self, busy: list[SimJob]) -> dict[str, float]:
        """Each physical cluster's utilization over its own span."""
        out = {}
        for name, procs in self.procs.items():
            mine = [j for j in busy if self.physical.get(j.cluster, j.cluster) == name]
            if mine:
                out[name] = _utilization(mine, procs, min(j.submit for j in mine),
                                         max(j.end for j in mine))
        return out


def _utilization(jobs: Sequence[SimJob], procs: int, first: float, last: float) -> float:
    if not last > first:
        return 0.0
    return sum(j.procs * (j.end - j.start) for j in jobs) / (procs * (last - first))


def _waits(jobs: Sequence[SimJob]) -> dict[str, Any]:
    if not jobs:
        return {"jobs": 0, "mean_wait_s": None, "p95_wait_s": None, "mean_bsld": None}
    wait = np.fromiter((j.start - j.submit for j in jobs), float, len(jobs))
    run = np.fromiter((j.end - j.start for j in jobs), float, len(jobs))
    bsld = np.maximum(1.0, (wait + run) / np.maximum(run, BSLD_THRESHOLD))
    return {"jobs": len(jobs), "mean_wait_s": float(wait.mean()),
            "p95_wait_s": float(np.percentile(wait, 95)), "mean_bsld": float(bsld.mean())}


class GridSim:
    """One policy's replay: the engine, the clusters and the grid jobs' book-keeping."""

    def __init__(self, workload: GridWorkload, config: SchedulerConfig) -> None:
        self.workload = workload
        self.config = config
        self.engine = Engine()
        self.physical: dict[str, str] = {}
        #: subjob id -> (grid job, whether it may start early)
        self.owner: dict[str, GridJob] = {}
        self.refused_local = 0
        self.slice_procs = 0
        self.engine.on_start(self._started)

    # -- set-up (called by the policies) ---------------------------------------------------
    def add_cluster(self, name: str, physical: str, procs: int,
                    jobs: Sequence[SimJob] = ()) -> None:
        """A core of ``procs`` processors fed by ``jobs`` (too-wide ones are refused)."""
        fitting = [j for j in jobs if j.procs <= procs]
        self.refused_local += len(jobs) - len(fitting)
        self.physical[name] = physical
        cluster = self.engine.add_cluster(name, procs, new_scheduler(procs, self.config, name),
                                          self._to_core_job, fitting)
        observe_modules(self.engine, cluster, self.config)

    def _to_core_job(self, job: SimJob) -> Any:
        core = to_core_job(job)
        owner = self.owner.get(job.id)
        if owner is not None:
            core.early_start = owner.early_start and not owner.coallocated
        return core

    def scheduler(self, cluster: str) -> Any:
        return self.engine.clusters[cluster].scheduler

    # -- grid subjobs -----------------------------------------------------------------------
    def submit_part(self, gjob: GridJob, index: int, cluster: str, procs: int, now: float,
                    reserved_at: float | None = None) -> SimJob:
        """Submit subjob ``index`` of ``gjob`` to ``cluster`` now."""
        part = gjob.subjob(index, procs)
        self.owner[part.id] = gjob
        gjob.parts.append(part)
        if reserved_at is not None:
            gjob.reserved[part.id] = (cluster, reserved_at)
        self.engine.inject(cluster, part, at=now)
        return part

    def _started(self, cluster: Any, job: SimJob, time: float) -> None:
        """An early-started subjob gives its reservation back (nobody else may use it)."""
        gjob = self.owner.get(job.id)
        if gjob is None or job.id not in gjob.reserved:
            return
        if time < gjob.reserved[job.id][1]:
            cluster.scheduler.release_reservation(f"meta.{job.id}", now=time)

    def run(self, policy: "Any", progress: Callable[[int, int], None] | None = None) -> PolicyRun:
        """Play the traces, handing each grid job to ``policy`` at its submit time."""
        grid = self.workload.grid
        for done, gjob in enumerate(grid):
            self.engine.run(until=gjob.submit)
            policy.submit(self, gjob, gjob.submit)
            if progress is not None:
                progress(done + 1, len(grid))
        self.engine.run()
        policy.finish(self)
        local = [j for jobs in self.workload.local.values() for j in jobs]
        return PolicyRun(policy.name, dict(self.workload.procs), local, grid,
                         refused_local=self.refused_local, events=self.engine.events,
                         physical=dict(self.physical), slice_procs=self.slice_procs,
                         cores={n: c.procs for n, c in self.engine.clusters.items()})


def fresh(workload: GridWorkload) -> GridWorkload:
    """A copy whose jobs carry no result yet (each policy replays the same input)."""
    local = {name: [SimJob(j.id, j.submit, j.estimate, j.runtime, j.procs, j.user, j.group,
                           j.queue, j.measured) for j in jobs]
             for name, jobs in workload.local.items()}
    grid = [GridJob(g.id, g.home, g.submit, g.estimate, g.runtime, g.procs, g.user, g.group,
                    g.coallocated, g.early_start) for g in workload.grid]
    return GridWorkload(dict(workload.procs), local, grid, workload.options)

"""The metascheduling policies compared by ``simulate --grid`` (see :mod:`grid_tasks.sim.grid`).

Each policy is a small class with three calls: ``setup(sim)`` adds the clusters (cores)
to the simulation, ``submit(sim, job, now)`` handles a grid job at its submit time, and
``finish(sim)`` closes the books when the traces are over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grid_tasks.broker.planner import Need, Placement, Schedule, maui_estimator, plan
from grid_tasks.maui import ACL, Job, ReservationRefused, SchedulerConfig
from grid_tasks.sim.grid import (
    GRID_POLICIES, GridError, GridJob, GridOptions, GridSim, GridWorkload, PolicyRun, fresh,
)

__all__ = ["MetaPolicy", "SlicePolicy", "LeastLoadedPolicy", "ReservePolicy", "make_policy",
           "reserve_and_submit"]


def _home_first(names: list[str], home: str) -> list[str]:
    """Cluster names with the job's home first (ties then favour staying at home)."""
    return sorted(names, key=lambda n: n != home)


def _reserve(sim: GridSim, cluster: str, subjob_id: str, procs: int, start: float,
             duration: float, now: float) -> None:
    """A reservation on ``cluster`` that admits subjob ``subjob_id`` only."""
    sim.scheduler(cluster).reserve(Job(id=subjob_id, tasks=procs, walltime=duration), start,
                                   duration, ACL(jobs=frozenset({subjob_id})), now)


def _enact(sim: GridSim, gjob: GridJob, schedule: Schedule, now: float) -> bool:
    """Reserve every placement of ``schedule`` (all or nothing), then submit the parts."""
    made: list[tuple[str, str]] = []
    try:
        for p in schedule.placements:
            subjob_id = f"{gjob.id}/{p.subjob}"
            _reserve(sim, p.rm, subjob_id, p.procs, p.start, p.duration, now)
            made.append((p.rm, subjob_id))
    except ReservationRefused:
        for cluster, subjob_id in made:
            sim.scheduler(cluster).release_reservation(f"meta.{subjob_id}", now=now)
        return False
    for p in schedule.placements:
        sim.submit_part(gjob, p.subjob, p.rm, p.procs, now, reserved_at=p.start)
    return True


def reserve_and_submit(sim: GridSim, gjob: GridJob, clusters: list[str], now: float) -> bool:
    """Estimate on ``clusters``, plan a common start, reserve it and submit (seed 002, 3.3).

    Coallocated halves must land on two different clusters, so only such schedules
    are enacted.  Returns False (and marks the job refused) when nothing can hold it.
    """
    sizes = gjob.sizes()
    estimators = {c: maui_estimator(sim.scheduler(c), job_id=f"{gjob.id}/probe") for c in clusters}
    needs = [Need(p, float(gjob.estimate)) for p in sizes]
    schedules = plan(needs, estimators, now, policy="spread",
                     limit=max(1, len(clusters) ** len(sizes)))
    for schedule in schedules:
        if len(schedule.rms) == len(sizes) and _enact(sim, gjob, schedule, now):
            return True
    gjob.refused = "no cluster can ever hold it" if not schedules else "every reservation refused"
    return False


class MetaPolicy:
    """Base: every cluster is one core fed by its local jobs."""

    name = "base"

    def __init__(self, options: GridOptions) -> None:
        self.options = options

    def setup(self, sim: GridSim) -> None:
        for name, procs in sim.workload.procs.items():
            sim.add_cluster(name, name, procs, sim.workload.local[name])

    def submit(self, sim: GridSim, gjob: GridJob, now: float) -> None:  # pragma: no cover
        raise NotImplementedError

    def finish(self, sim: GridSim) -> None:
        """Nothing left to do by default."""


class ReservePolicy(MetaPolicy):
    """(c) estimate-and-reserve over whole clusters."""

    name = "reserve"

    def submit(self, sim: GridSim, gjob: GridJob, now: float) -> None:
        reserve_and_submit(sim, gjob, _home_first(list(sim.workload.procs), gjob.home), now)


class SlicePolicy(MetaPolicy):
    """(a) a fixed slice of every cluster belongs to the metascheduler.

    Cluster ``X`` of ``P`` processors becomes two cores: ``X`` with ``P - S`` for local
    jobs and ``X/grid`` with ``S = round(slice * P)`` (at least 1, at most ``P - 1``)
    where the metascheduler estimates and reserves as :class:`ReservePolicy` does.
    """

    name = "slice"

    def setup(self, sim: GridSim) -> None:
        for name, procs in sim.workload.procs.items():
            if procs < 2:
                raise GridError(f"cluster {name} has {procs} processor: nothing to slice")
            share = min(procs - 1, max(1, round(self.options.slice * procs)))
            sim.add_cluster(name, name, procs - share, sim.workload.local[name])
            sim.add_cluster(f"{name}/grid", name, share, ())
            sim.slice_procs += share

    def submit(self, sim: GridSim, gjob: GridJob, now: float) -> None:
        slices = [f"{n}/grid" for n in sim.workload.procs]
        reserve_and_submit(sim, gjob, _home_first(slices, f"{gjob.home}/grid"), now)


class LeastLoadedPolicy(MetaPolicy):
    """(b) the least loaded cluster at submission, no reservation in advance.

    Load = processors of the running and waiting jobs over the cluster's size.  A
    coallocated job takes the two least loaded clusters able to hold its halves and
    waits, in submission order, until both cores can start their half *now*; both
    halves are then reserved from now and submitted together.  The check runs at the
    job's submission and after every iteration of either cluster.
    """

    name = "least-loaded"

    def __init__(self, options: GridOptions) -> None:
        super().__init__(options)
        self.pending: list[tuple[GridJob, tuple[str, str]]] = []

    def setup(self, sim: GridSim) -> None:
        super().setup(sim)
        sim.engine.on_iterate(lambda cluster, now, _result: self._iterated(sim, cluster.name, now))
        sim.engine.hold_open(lambda: bool(self.pending))

    @staticmethod
    def load(sim: GridSim, name: str) -> float:
        cluster = sim.engine.clusters[name]
        busy = sum(j.procs for j in cluster.running.values())
        queued = sum(j.procs for j in cluster.waiting.values())
        return (busy + queued) / cluster.procs

    def submit(self, sim: GridSim, gjob: GridJob, now: float) -> None:
        names = list(sim.workload.procs)
        ranked = sorted(names, key=lambda n: (self.load(sim, n), n != gjob.home, names.index(n)))
        sizes = gjob.sizes()
        first = next((n for n in ranked if sim.workload.procs[n] >= sizes[0]), None)
        if first is None:
            gjob.refused = "no cluster can ever hold it"
            return
        if not gjob.coallocated:
            sim.submit_part(gjob, 0, first, sizes[0], now)
            return
        second = next((n for n in ranked if n != first and sim.workload.procs[n] >= sizes[1]), None)
        if second is None:
            gjob.refused = "no second cluster can hold its other half"
            return
        self.pending.append((gjob, (first, second)))
        self._try(sim, now)

    def _iterated(self, sim: GridSim, cluster: str, now: float) -> None:
        if any(cluster in pair for _, pair in self.pending):
            self._try(sim, now)

    def _try(self, sim: GridSim, now: float) -> None:
        for item in list(self.pending):
            gjob, pair = item
            if all(self._starts_now(sim, c, p, gjob, now) for c, p in zip(pair, gjob.sizes())):
                self.pending.remove(item)
                schedule = _now_schedule(gjob, pair, now)
                if not _enact(sim, gjob, schedule, now):  # pragma: no cover - estimate said yes
                    self.pending.insert(0, item)

    @staticmethod
    def _starts_now(sim: GridSim, cluster: str, procs: int, gjob: GridJob, now: float) -> bool:
        answers = maui_estimator(sim.scheduler(cluster), job_id=f"{gjob.id}/probe")(
            procs, float(gjob.estimate), now)
        return bool(answers) and answers[0].time == now

    def finish(self, sim: GridSim) -> None:
        for gjob, _ in self.pending:
            gjob.refused = "its halves never could start together"
        self.pending.clear()


def _now_schedule(gjob: GridJob, pair: tuple[str, str], now: float) -> Schedule:
    return Schedule(now, tuple(Placement(i, c, now, float(gjob.estimate), ((c, p),))
                               for i, (c, p) in enumerate(zip(pair, gjob.sizes()))))


POLICY_CLASSES: dict[str, type[MetaPolicy]] = {
    SlicePolicy.name: SlicePolicy, LeastLoadedPolicy.name: LeastLoadedPolicy,
    ReservePolicy.name: ReservePolicy,
}
assert tuple(POLICY_CLASSES) == GRID_POLICIES


def make_policy(name: str, options: GridOptions) -> Any:
    """A fresh policy object by its CLI name."""
    try:
        return POLICY_CLASSES[name](options)
    except KeyError:
        raise GridError(f"unknown grid policy {name!r} (known: {', '.join(GRID_POLICIES)})") from None


def run_policy(workload: GridWorkload, name: str, config: SchedulerConfig | None = None,
               progress: Callable[[int, int], None] | None = None) -> PolicyRun:
    """Replay ``workload`` (a fresh copy) under metascheduling policy ``name``."""
    policy = make_policy(name, workload.options)
    sim = GridSim(fresh(workload), config or SchedulerConfig.preset("easy"))
    policy.setup(sim)
    return sim.run(policy, progress)

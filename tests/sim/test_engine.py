"""The replay engine driving the real Maui core: event order, kills, wake-ups, clusters."""

from __future__ import annotations

import dataclasses

import pytest

from grid_tasks.maui import Reservation
from grid_tasks.sim.conventions import SimJob
from grid_tasks.sim.core import load_config, new_scheduler, observe_modules, to_core_job
from grid_tasks.sim.engine import Cluster, Engine, SimulationError


def job(jid: str, submit: float, procs: int, runtime: float, estimate: float | None = None) -> SimJob:
    return SimJob(jid, submit, runtime if estimate is None else estimate, runtime, procs)


def engine_with(procs: int, jobs: list[SimJob], policy: str = "easy", name: str = "c") -> Engine:
    engine = Engine()
    engine.add_cluster(name, procs, new_scheduler(procs, load_config(policy)), to_core_job, jobs)
    return engine


def by_id(engine: Engine) -> dict[str, SimJob]:
    return {j.id: j for j in engine.finished}


@pytest.mark.parametrize("policy", ["easy", "conservative"])
def test_submissions_before_terminations_at_one_instant(policy: str) -> None:
    """At t=10, S is submitted while A (ending at 10) still holds a processor.

    Submission first: S backfills at 10 into the free processor without delaying W's
    reservation (t=100, A's estimated end); A's end then lets W start only when S ends.
    Had the termination come first, W would start at 10 and S would wait until 210.
    """
    jobs = [job("A", 0, 1, 10, estimate=100), job("B", 0, 1, 1000),
            job("W", 1, 2, 200), job("S", 10, 1, 50)]
    engine = engine_with(3, jobs, policy)
    engine.run()
    done = by_id(engine)
    assert done["S"].start == 10
    assert done["W"].start == 60
    assert done["A"].end == 10 and done["B"].start == 0


def test_jobs_are_killed_at_their_walltime() -> None:
    engine = engine_with(1, [job("long", 0, 1, 500, estimate=100), job("next", 5, 1, 10)])
    engine.run()
    done = by_id(engine)
    assert done["long"].killed and done["long"].end == 100
    assert done["next"].start == 100 and not done["next"].killed


def test_wakeup_at_a_reservation_boundary_with_no_other_event() -> None:
    """A maintenance reservation [50, 150) blocks the whole machine; the job that does
    not fit before it must start at 150, when nothing but the boundary happens."""
    engine = Engine()
    sched = new_scheduler(4, load_config("conservative"))
    sched.add_reservation(Reservation(name="maint", start=50, end=150, tasks=4), now=0)
    engine.add_cluster("c", 4, sched, to_core_job, [job("J", 0, 4, 80), job("K", 1, 1, 40)])
    engine.run()
    done = by_id(engine)
    assert done["K"].start == 1  # fits before the reservation
    assert done["J"].start == 150


def test_iterates_after_each_event_and_counts() -> None:
    jobs = [job(str(i), i, 1, 5) for i in range(10)]
    engine = engine_with(2, jobs, "fcfs")
    engine.run()
    cluster = engine.clusters["c"]
    assert engine.events >= 20 and cluster.iterations >= 20  # a submission and an end per job
    assert len(engine.finished) == 10 and not engine.unfinished()


def test_clusters_share_one_clock_and_observers_see_every_start() -> None:
    engine = Engine()
    seen: list[tuple[str, str, float]] = []
    for name, procs, offset in (("small", 2, 0), ("big", 8, 3)):
        jobs = [job(f"{name}{i}", offset + 10 * i, procs, 25) for i in range(4)]
        engine.add_cluster(name, procs, new_scheduler(procs, load_config("easy"), name),
                           to_core_job, jobs)
    engine.on_start(lambda c, j, t: seen.append((c.name, j.id, t)))
    ended: list[float] = []
    engine.on_end(lambda c, j, t: ended.append(t))
    engine.run()
    assert len(seen) == 8 and ended == sorted(ended)
    assert [t for _, _, t in seen] == sorted(t for _, _, t in seen)
    assert {j.cluster for j in engine.finished if j.id.startswith("small")} == {"small"}
    # each cluster serialises its own whole-machine jobs: 0, 25, 50, 75 and 3, 28, 53, 78
    starts = {j.id: j.start for j in engine.finished}
    assert [starts[f"small{i}"] for i in range(4)] == [0, 25, 50, 75]
    assert [starts[f"big{i}"] for i in range(4)] == [3, 28, 53, 78]


def test_inject_into_a_cluster_between_partial_runs() -> None:
    engine = Engine()
    engine.add_cluster("a", 2, new_scheduler(2, load_config("easy")), to_core_job)
    with pytest.raises(SimulationError, match="clock has not started"):
        engine.inject("a", job("early", 0, 1, 1))
    starts: dict[str, float] = {}
    engine.on_start(lambda c, j, t: starts.__setitem__(j.id, t))
    engine.inject("a", job("g1", 0, 2, 100), at=5)
    engine.run(until=50)
    assert starts == {"g1": 5} and engine.now == 50
    engine.inject("a", job("g2", 0, 1, 10))  # now = 50: waits for g1 (ends at 105)
    with pytest.raises(SimulationError, match="the clock is at 50"):
        engine.inject("a", job("late", 0, 1, 10), at=10)
    engine.run()
    assert starts["g2"] == 105 and by_id(engine)["g2"].submit == 50


def test_errors_are_typed() -> None:
    engine = engine_with(2, [job("x", 10, 1, 5), job("y", 3, 1, 5)])
    with pytest.raises(SimulationError, match="not ordered by submit time: job y"):
        engine.run()
    engine = engine_with(2, [job("x", 0, 1, 5), job("x", 1, 1, 5)])
    with pytest.raises(SimulationError, match="job x is already in cluster 'c'"):
        engine.run()
    with pytest.raises(SimulationError, match="no cluster named 'zz'"):
        engine.inject("zz", job("q", 0, 1, 1))
    with pytest.raises(SimulationError, match="already defined"):
        engine.add_cluster("c", 1, new_scheduler(1, load_config("easy")), to_core_job)


def test_cluster_record_is_exposed() -> None:
    engine = engine_with(4, [job("a", 0, 4, 10)])
    assert isinstance(engine.clusters["c"], Cluster)
    assert engine.next_time() == 0
    engine.run()
    assert engine.next_time() is None and engine.pending == 0


def test_cancel_a_waiting_job_frees_its_place() -> None:
    """A metascheduler withdraws the blocked head job; under fcfs the job behind it,
    which fits beside the running one, then starts at once."""
    engine = engine_with(4, [job("run", 0, 2, 100), job("head", 1, 4, 50), job("next", 2, 2, 10)],
                         policy="fcfs")
    engine.run(until=10)
    assert set(engine.clusters["c"].waiting) == {"head", "next"}
    with pytest.raises(SimulationError, match="'run' is not waiting"):
        engine.cancel("c", "run")
    withdrawn = engine.cancel("c", "head")
    assert withdrawn.id == "head" and engine.cancelled == [withdrawn]
    engine.run()
    done = by_id(engine)
    assert "head" not in done and withdrawn.start == -1
    assert done["next"].start == 10 and done["run"].end == 100


def test_progress_is_reported_per_events_with_counts_that_never_go_back() -> None:
    """The engine reports every ``every`` events (it never reads the clock), the counts
    only grow, and the last call gives the final figures."""
    jobs = [job(str(i), i, 1 + i % 3, 50 + i % 7) for i in range(300)]
    engine = engine_with(4, jobs, "easy")
    calls: list[tuple[int, int]] = []
    engine.run(progress=lambda submitted, finished: calls.append((submitted, finished)),
               every=8)
    assert len(calls) == engine.events // 8 + 1
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(calls, calls[1:]))
    assert all(f <= s for s, f in calls)
    assert calls[-1] == (300, 300) and calls[0][0] > 0
    # a slow core is still heard from often: no gap of more than `every` events
    assert len({c for c in calls}) > 300 * 2 // 8 // 2


def test_progress_every_must_be_positive() -> None:
    with pytest.raises(SimulationError, match="at least 1"):
        engine_with(1, [job("a", 0, 1, 1)]).run(progress=lambda s, f: None, every=0)


def test_modules_a_configuration_names_observe_each_cluster_from_the_replay() -> None:
    engine = Engine()
    config = dataclasses.replace(load_config("easy"), modules=("statistics",))
    stats = {}
    for name, procs in (("a", 2), ("b", 4)):
        jobs = [job(f"{name}{i}", 5 * i, procs, 20) for i in range(3)]
        cluster = engine.add_cluster(name, procs, new_scheduler(procs, config, name), to_core_job, jobs)
        stats[name] = observe_modules(engine, cluster, config)
    engine.run()
    for name in ("a", "b"):
        [mod] = stats[name]
        cluster = engine.clusters[name]
        assert mod.running and mod.iterations == cluster.iterations > 0  # one call per iteration
        assert mod.started == 3  # each cluster's own starts only
    assert observe_modules(engine, engine.clusters["a"], load_config("easy")) is None

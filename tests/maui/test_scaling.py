"""Structures that must stay bounded as a replay goes on (no timing: sizes).

Each would have caught a super-linear replay of issue 22: jobs no throttle ever admits
ranked again every iteration, standing-reservation occurrences or profile points piling
up over simulated days, throttle plans growing with the job count.
"""

from __future__ import annotations

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig
from grid_tasks.maui.standing import StandingReservation
from grid_tasks.sim.conventions import SimJob
from grid_tasks.sim.core import new_scheduler, to_core_job
from grid_tasks.sim.engine import Engine

DAY = 86400.0


def test_jobs_no_hard_throttle_admits_are_not_ranked_each_iteration() -> None:
    # the general engine's ranking (the site pool never ranks parked jobs either:
    # tests/maui/test_site_pool.py compares its throttled counts with this path's)
    cfg = SchedulerConfig(throttles={"USER": {"DEFAULT": {"MAXPROC": (2, 3)}}}, fast_path=False)
    sched = Scheduler([Node("n0", procs=8)], cfg)
    ranked: list[int] = []
    rank = sched.ranking.rank
    sched.ranking.rank = lambda jobs, *a: ranked.append(len(jobs)) or rank(jobs, *a)  # type: ignore[method-assign]
    for i in range(200):
        sched.submit(Job(f"big{i}", tasks=4, walltime=100, user="u", submit_time=i), now=i)
    for i in range(3):
        sched.submit(Job(f"s{i}", tasks=1, walltime=100, user="u", submit_time=300), now=300)
        res = sched.iterate(300)
    assert ranked[-1] <= 1 and max(ranked) <= 3  # only the small jobs are ever ranked
    # the two the soft limit admits start at once, the third only up to the hard limit
    assert sorted(sched.running_jobs()) == ["s0", "s1", "s2"] and res.throttled >= 200
    assert len(sched.idle_jobs()) == 200 and not sched.may_start_later()


def test_a_job_too_wide_for_the_nodes_is_parked_until_the_nodes_change() -> None:
    sched = Scheduler([Node("n0", procs=4), Node("n1", procs=4, state="Down")],
                      SchedulerConfig(throttles={"USER": {"DEFAULT": {"MAXJOB": (9, 9)}}}))
    sched.submit(Job("wide", tasks=6, walltime=10, user="u"), now=0)
    assert not sched.iterate(0).started and not sched.may_start_later()
    sched.update_node("n1", 1, state="Idle")
    assert [s.job_id for s in sched.iterate(1).started] == ["wide"]


def test_standing_reservation_occurrences_and_profiles_stay_bounded_over_three_weeks() -> None:
    sr = StandingReservation(name="maint", tasks=4, start=2 * 3600, end=3 * 3600, period="DAY", depth=2)
    sched = new_scheduler(16, SchedulerConfig(standing_reservations={"maint": sr},
                                              fs_policy="DEDICATEDPS", reservation_depth=3))
    jobs = [SimJob(str(i), i * 3600.0, 7200, 1000 + (i * 37) % 5000, 1 + i % 13, user=i % 5)
            for i in range(int(21 * DAY / 3600))]
    engine = Engine()
    engine.add_cluster("c", 16, sched, to_core_job, jobs)
    holds, points = [], []

    def watch(cluster, now, result) -> None:
        holds.append(len(sched.engine.holds))
        points.append(max(len(p.times) for profs in sched.engine.prof.values() for p in profs.values()))
    engine.on_iterate(watch)
    engine.run()
    assert len(engine.finished) == len(jobs) and engine.now < 22 * DAY
    assert max(holds) <= sr.depth + 1  # occurrences are made a bounded horizon ahead
    assert max(points) < 40  # the past is pruned: a profile holds the running jobs' ends
    assert len(sched._standing_seen) <= 23 and len(sched.ranking.memo) == 0


def test_throttle_plans_grow_with_credentials_not_jobs() -> None:
    sched = Scheduler([Node("n0", procs=64)], SchedulerConfig(
        throttles={"USER": {"DEFAULT": {"MAXJOB": (2, 4)}}, "GROUP": {"DEFAULT": {"MAXPROC": (40, 48)}}}))
    for i in range(1000):
        sched.submit(Job(f"j{i}", tasks=1 + i % 4, walltime=50, user=f"u{i % 7}", group=f"g{i % 2}",
                         submit_time=i), now=i)
        for st in sched.iterate(i).started:
            sched.job_ended(st.job_id, now=i + 0.5)
    assert len(sched.throttle._plans) <= 14  # 7 users x 2 groups

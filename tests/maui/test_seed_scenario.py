"""Seed 004, figures 2 and 3: first-fit backfill over node slots at time t0."""

from grid_tasks.maui import Job, Node, ReservationKind, Scheduler, SchedulerConfig


def figure2() -> Scheduler:
    nodes = [Node(f"n{i}", procs=4) for i in range(4)]
    sched = Scheduler(nodes, SchedulerConfig.preset("conservative"))
    # j0 holds all of n0 until t18; j1 holds n3's slot p3 until t7; j2 holds n2 and n3 p0,p1
    sched.restore_running(Job("j0", tasks=4, walltime=18), 0, {"n0": 4}, now=0)
    sched.restore_running(Job("j1", tasks=1, walltime=7), 0, {"n3": 1}, now=0)
    sched.restore_running(Job("j2", tasks=6, walltime=25), 0, {"n2": 4, "n3": 2}, now=0)
    # the queue, highest priority first: q0 (4,4), q1 (2,2), q2 (4) for 5 intervals
    sched.submit(Job("q0", tasks=8, tasks_per_node=4, walltime=10, submit_time=-3), now=0)
    sched.submit(Job("q1", tasks=4, tasks_per_node=2, walltime=8, submit_time=-2), now=0)
    sched.submit(Job("q2", tasks=4, tasks_per_node=4, walltime=5, submit_time=-1), now=0)
    return sched


def test_figure3_reservations_and_immediate_start():
    sched = figure2()
    res = sched.iterate(now=0)
    assert [(s.job_id, s.time, dict(s.allocation)) for s in res.started] == [("q2", 0, {"n1": 4})]
    made = {r.job_id: r for r in res.reservations_created}
    assert set(made) == {"q0", "q1"}
    assert made["q0"].start == 18 and made["q0"].allocation == {"n0": 4, "n1": 4}
    assert made["q1"].start == 7 and made["q1"].allocation == {"n1": 2, "n3": 2}
    assert all(r.kind is ReservationKind.JOB for r in made.values())
    # q0 and q1 stay queued, holding their reservations
    assert [j.id for j in sched.idle_jobs()] == ["q0", "q1"]
    assert sched.next_wakeup(0) == 7


def test_reserved_jobs_start_when_their_reservation_begins():
    sched = figure2()
    sched.iterate(now=0)
    sched.job_ended("q2", now=5)
    sched.iterate(now=5)
    sched.job_ended("j1", now=7)
    res = sched.iterate(now=7)
    assert [(s.job_id, dict(s.allocation)) for s in res.started] == [("q1", {"n1": 2, "n3": 2})]

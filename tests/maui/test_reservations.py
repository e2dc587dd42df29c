"""Administrative reservations, the metascheduler's reserve/estimate, showbf, early start."""

import math

import pytest

from grid_tasks.maui import (
    ACL, Job, Node, Reservation, ReservationRefused, Scheduler, SchedulerConfig, SchedulerError,
)
from grid_tasks.maui.standing import StandingReservation


def cluster(n: int = 2, procs: int = 4, **cfg) -> Scheduler:
    return Scheduler([Node(f"n{i}", procs=procs) for i in range(n)], SchedulerConfig(**cfg))


def started(res):
    return {s.job_id: dict(s.allocation) for s in res.started}


def test_reservation_keeps_out_jobs_its_acl_refuses():
    sched = cluster()
    sched.add_reservation(Reservation(name="lab", start=0, end=1000, nodes=("n0",), acl=ACL.build(users=["ann"])))
    sched.submit(Job("bob1", tasks=4, walltime=10, user="bob"), now=0)
    sched.submit(Job("bob2", tasks=4, walltime=10, user="bob"), now=0)
    sched.submit(Job("ann1", tasks=4, walltime=10, user="ann"), now=0)
    res = sched.iterate(0)
    assert started(res) == {"bob1": {"n1": 4}, "ann1": {"n0": 4}}


def test_job_may_straddle_reserved_and_free_resources():
    sched = cluster()
    sched.add_reservation(Reservation(name="r", start=0, end=100, tasks=2, procs_per_task=1,
                                      acl=ACL.build(groups=["g"])))
    sched.submit(Job("g6", tasks=8, walltime=50, group="g"), now=0)
    assert sum(started(sched.iterate(0))["g6"].values()) == 8


def test_reservation_tasks_form_and_release():
    sched = cluster()
    r = sched.add_reservation(Reservation(name="r", start=0, end=100, tasks=3, procs_per_task=2))
    assert sum(r.allocation.values()) == 3
    sched.submit(Job("j", tasks=4, walltime=10), now=0)
    assert sched.iterate(0).started == []  # 6 of 8 processors are reserved
    sched.release_reservation("r", now=1)
    assert "j" in started(sched.iterate(1))


def test_overlapping_reservations_are_refused_when_they_would_overcommit():
    sched = cluster()
    sched.add_reservation(Reservation(name="a", start=0, end=100, nodes=("n0",)))
    with pytest.raises(ReservationRefused, match="n0"):
        sched.add_reservation(Reservation(name="b", start=50, end=150, nodes=("n0",)))
    sched.add_reservation(Reservation(name="c", start=100, end=150, nodes=("n0",)))  # adjacent is fine
    with pytest.raises(ReservationRefused):
        sched.add_reservation(Reservation(name="d", start=0, end=10, tasks=5, procs_per_task=1))


def test_reservation_refused_over_running_jobs():
    sched = cluster(n=1)
    sched.submit(Job("j", tasks=4, walltime=100), now=0)
    sched.iterate(0)
    with pytest.raises(ReservationRefused):
        sched.add_reservation(Reservation(name="x", start=50, end=60, nodes=("n0",)))
    sched.add_reservation(Reservation(name="y", start=100, end=160, nodes=("n0",)))


def test_reserve_for_a_job_and_overlap_only_where_acl_allows():
    sched = cluster()
    sched.add_reservation(Reservation(name="lab", start=0, end=1000, nodes=("n0",), acl=ACL.build(users=["ann"])))
    req_bob = Job("m1", tasks=8, walltime=100, user="bob")
    with pytest.raises(ReservationRefused):
        sched.reserve(req_bob, start=100, duration=100, acl=ACL.build(jobs=["m1"]), now=0)
    req_ann = Job("m2", tasks=8, walltime=100, user="ann")
    r = sched.reserve(req_ann, start=100, duration=100, acl=ACL.build(jobs=["m2"]), now=0)
    assert r.allocation == {"n0": 4, "n1": 4} and r.start == 100
    with pytest.raises(ReservationRefused):  # nothing left at that time for anyone else
        sched.reserve(Job("m3", tasks=1, walltime=10, user="ann"), 150, 10, ACL.build(jobs=["m3"]), now=0)


@pytest.mark.parametrize("early, when", [(True, 0), (False, 100)])
def test_early_start_allowed_or_forbidden(early, when):
    sched = cluster()
    sched.reserve(Job("g", tasks=8, walltime=50), start=100, duration=50, acl=ACL.build(jobs=["g"]), now=0)
    sched.submit(Job("g", tasks=4, walltime=50, early_start=early), now=0)
    times = {}
    for now in (0, 100):
        for s in sched.iterate(now).started:
            times[s.job_id] = s.time
    assert times == {"g": when}
    assert sched.next_wakeup(0) is None or sched.next_wakeup(0) >= 100


def test_bound_reservation_dies_with_its_job():
    sched = cluster()
    sched.reserve(Job("g", tasks=8, walltime=50), start=0, duration=500, acl=ACL.build(jobs=["g"]), now=0)
    sched.submit(Job("g", tasks=8, walltime=50), now=0)
    sched.iterate(0)
    sched.job_ended("g", now=20)
    sched.submit(Job("other", tasks=8, walltime=50), now=20)
    assert "other" in started(sched.iterate(20))


def test_reserve_rejects_bad_times():
    sched = cluster()
    with pytest.raises(ReservationRefused):
        sched.reserve(Job("x"), start=-5, duration=10, acl=ACL(), now=0)
    with pytest.raises(ReservationRefused):
        sched.reserve(Job("x"), start=5, duration=0, acl=ACL(), now=0)
    with pytest.raises(SchedulerError):
        Reservation(name="bad", start=10, end=5, nodes=("n0",))


def test_estimate_showstart_respects_running_jobs_and_reservations():
    sched = cluster()
    sched.submit(Job("a", tasks=4, walltime=100), now=0)
    sched.submit(Job("b", tasks=4, walltime=300), now=0)
    sched.iterate(0)
    sched.add_reservation(Reservation(name="m", start=100, end=200, nodes=("n0",)))
    est = sched.estimate(Job("q", tasks=4, walltime=50), now=0)
    assert est[0].time == 200 and dict(est[0].allocation) == {"n0": 4}
    wide = sched.estimate(Job("w", tasks=8, walltime=10), now=0)
    assert wide[0].time == 300
    for e in sched.estimate(Job("q2", tasks=2, walltime=50), now=0, limit=3):
        assert e.time >= 100 and sum(e.allocation.values()) == 2


def test_estimate_on_the_pool_fast_path():
    sched = Scheduler([Node("pool", procs=10)], SchedulerConfig.preset("easy"))
    sched.submit(Job("a", tasks=6, walltime=100), now=0)
    sched.submit(Job("b", tasks=10, walltime=100), now=0)
    sched.iterate(0)
    assert sched.pool is not None
    assert [e.time for e in sched.estimate(Job("x", tasks=4, walltime=50), now=0)] == [0]
    assert [e.time for e in sched.estimate(Job("y", tasks=5, walltime=50), now=0)] == [200]
    assert sched.pool is not None  # a query does not leave the fast path


def test_free_windows_showbf():
    sched = cluster(n=2, procs=4)
    sched.submit(Job("a", tasks=4, walltime=100), now=0)
    sched.iterate(0)
    sched.add_reservation(Reservation(name="m", start=50, end=80, tasks=2, procs_per_task=1))
    wins = sched.free_windows(0)
    assert (wins[0].procs, wins[0].nodes, wins[0].duration) == (4, 1, 50)
    # the reservation took 2 of n1's processors from t=50; n0 is busy until 100, so 2 remain for ever
    assert (wins[1].procs, wins[1].nodes, wins[1].duration) == (2, 1, math.inf)
    assert len(wins) == 2


def test_reservations_listing_and_wakeups():
    sched = cluster()
    sched.add_reservation(Reservation(name="m", start=50, end=80, nodes=("n1",)))
    sched.submit(Job("a", tasks=4, walltime=100), now=0)
    sched.iterate(0)
    kinds = {(r.name, r.kind.value) for r in sched.reservations()}
    assert kinds == {("m", "admin"), ("job.a", "running")}
    assert sched.next_wakeup(0) == 50 and sched.next_wakeup(50) == 80
    res = sched.iterate(80)
    assert [r.name for r in res.reservations_released] == ["m"]


def test_standing_reservation_repeats_daily():
    sr = StandingReservation(name="night", nodes=("n0",), start=0, end=6 * 3600, period="DAY", depth=2)
    sched = Scheduler([Node("n0", procs=4), Node("n1", procs=4)], SchedulerConfig(standing_reservations={"night": sr}))
    sched.submit(Job("long", tasks=8, walltime=7200), now=3600)
    res = sched.iterate(3600)
    names = sorted(r.name for r in res.reservations_created if r.kind.value == "admin")
    assert names == ["night.0", "night.1"]
    # the job cannot use n0 until 06:00: it gets a job reservation then
    assert res.started == []
    assert [(r.job_id, r.start) for r in res.reservations_created if r.kind.value == "job"] == [("long", 6 * 3600)]
    assert sched.estimate(Job("q", tasks=4, walltime=7200), 3600)[0].allocation == {"n1": 4}


def test_releasing_a_reservation_drawn_from_another_keeps_the_outer_one():
    sched = cluster(n=1)
    sched.add_reservation(Reservation(name="lab", start=0, end=100, nodes=("n0",), acl=ACL.build(users=["ann"])))
    sched.reserve(Job("m", tasks=4, walltime=40, user="ann"), start=0, duration=40, acl=ACL.build(jobs=["m"]), now=0)
    sched.submit(Job("m", tasks=4, walltime=40, user="ann"), now=0)
    assert "m" in started(sched.iterate(0))
    sched.release_reservation("meta.m", now=5)  # m keeps running, now inside "lab"
    sched.submit(Job("bob", tasks=1, walltime=10, user="bob"), now=5)
    sched.submit(Job("ann2", tasks=1, walltime=10, user="ann"), now=5)
    assert sched.iterate(5).started == []  # n0 is full with m, and "lab" still refuses bob
    sched.job_ended("m", now=20)
    assert list(started(sched.iterate(20))) == ["ann2"]
    sched.release_reservation("lab", now=30)
    sched.job_ended("ann2", now=30)
    assert list(started(sched.iterate(30))) == ["bob"]


def test_setres_may_not_overlap_a_reservation_it_is_not_admitted_to():
    sched = cluster(n=1)
    sched.add_reservation(Reservation(name="lab", start=0, end=100, nodes=("n0",), acl=ACL.build(users=["ann"])))
    with pytest.raises(ReservationRefused):
        sched.add_reservation(Reservation(name="other", start=50, end=150, tasks=1, acl=ACL.build(users=["ann"])))
    sched.add_reservation(Reservation(name="later", start=100, end=150, tasks=4, acl=ACL.build(users=["bob"])))


def test_reservation_added_after_an_admitted_job_already_running_inside_it():
    # rebuilding state may restore the running job first: the reservation takes it in
    sched = cluster(n=1)
    sched.restore_running(Job("vipjob", tasks=1, walltime=7200, user="vip"), 0, {"n0": 1}, now=0)
    vipres = dict(name="vipres", start=0, end=3600, nodes=("n0",), acl=ACL.build(users=["vip"]))
    with pytest.raises(ReservationRefused):  # by default the running job is in the way
        sched.add_reservation(Reservation(**vipres), now=0)
    sched.add_reservation(Reservation(**vipres), now=0, take_in_admitted=True)
    sched.submit(Job("plain", tasks=1, walltime=60, user="plain"), now=0)
    sched.submit(Job("vip2", tasks=3, walltime=60, user="vip"), now=0)
    assert list(started(sched.iterate(0))) == ["vip2"]
    assert sched.estimate(Job("p2", tasks=1, walltime=60, user="plain"), now=0)[0].time == 3600
    with pytest.raises(ReservationRefused):  # a job it does not admit still blocks it
        sched.add_reservation(Reservation(name="other", start=0, end=100, nodes=("n0",),
                                          acl=ACL.build(users=["nobody"])), now=0, take_in_admitted=True)

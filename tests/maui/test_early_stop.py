"""The priority pass stops once its reservations are made and no job left could start
now; it must decide exactly as a pass that goes on to the end of the queue."""

import random

import pytest

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig
from grid_tasks.maui.passes import PassStop
from grid_tasks.maui.config import BackfillPolicy, ReservationPolicy
from grid_tasks.maui.model import ACL, Reservation


def _replay(seed: int, stop: bool, monkeypatch) -> list:
    """Random submissions and ends on a few small nodes with a hold for user a and
    per-user throttles (MAXIJOB included: it counts the jobs a pass looks at)."""
    rng = random.Random(seed)
    cfg = SchedulerConfig(
        fast_path=False, reservation_depth=rng.choice([1, 2]),
        reservation_policy=rng.choice([ReservationPolicy.CURRENTHIGHEST, ReservationPolicy.HIGHEST]),
        backfill_policy=rng.choice(list(BackfillPolicy)),
        throttles={"USER": {"DEFAULT": {"MAXJOB": (2, 3), "MAXIJOB": (4, 4)}}})
    nodes = [Node(f"n{i}", rng.choice([2, 4])) for i in range(rng.randint(1, 3))]
    sched = Scheduler(nodes, cfg)
    sched.add_reservation(Reservation(name="lab", start=20, end=rng.randint(40, 90), nodes=("n0",),
                                      acl=ACL.build(users=["a"])), 0)
    decided = []
    for t in range(0, 120, 5):
        for job_id in list(sched.running_jobs()):
            if rng.random() < 0.3:
                sched.job_ended(job_id, t)
        for k in range(rng.randint(0, 4)):
            sched.submit(Job(f"j{t}.{k}", tasks=rng.randint(1, 5), walltime=rng.randint(5, 60),
                             user=rng.choice("abc"), submit_time=t), t)
        if not stop:
            monkeypatch.setattr(PassStop, "__call__", lambda *_: False)
        res = sched.iterate(t)
        monkeypatch.undo()
        decided.append((sorted(s.job_id for s in res.started),
                        sorted((j, pl.start, tuple(sorted(pl.alloc.items())))
                               for j, pl in sched.job_res.items())))
    return decided


@pytest.mark.parametrize("seed", range(60))
def test_a_pass_stopping_when_nothing_left_fits_decides_as_a_whole_pass(seed, monkeypatch):
    assert _replay(seed, True, monkeypatch) == _replay(seed, False, monkeypatch)


def test_the_pass_stops_when_no_job_left_fits_for_its_walltime():
    sched = Scheduler([Node("n0", 4)], SchedulerConfig(fast_path=False, reservation_depth=1))
    sched.restore_running(Job("r", tasks=2, walltime=100), 0, {"n0": 2}, 0)
    sched.submit(Job("big", tasks=4, walltime=50), 0)  # reserved at 100
    for i in range(3):
        sched.submit(Job(f"long{i}", tasks=2, walltime=500), 0)  # two free, but not that long
    res = sched.iterate(0)
    assert not res.started and [r.job_id for r in res.reservations_created] == ["big"]
    assert res.considered == 1  # the three long jobs were never looked at
    sched.submit(Job("short", tasks=2, walltime=100), 0)
    assert [s.job_id for s in sched.iterate(0).started] == ["short"]

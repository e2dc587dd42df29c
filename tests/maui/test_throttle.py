"""Per-credential throttling: soft limits in priority scheduling, hard limits in backfill."""

import pytest

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig


def run(limits: dict, jobs: list[Job], backfill: str = "FIRSTFIT", kind: str = "USER",
        nodes: int = 1) -> list[str]:
    cfg = SchedulerConfig(backfill_policy=backfill, throttles={kind: {"ann": limits}})
    sched = Scheduler([Node(f"n{i}", procs=16) for i in range(nodes)], cfg)
    for job in jobs:
        sched.submit(job, now=0)
    return [s.job_id for s in sched.iterate(0).started]


def ann(i: int, **kw) -> Job:
    kw.setdefault("walltime", 100)
    return Job(f"a{i}", user="ann", group="g", submit_time=i, **kw)


def test_maxjob_soft_limit_and_hard_limit_in_backfill():
    jobs = [ann(i) for i in range(4)]
    # soft 1: one in priority scheduling; backfill may go up to the hard limit 3
    assert run({"MAXJOB": (1, 3)}, jobs) == ["a0", "a1", "a2"]
    # without backfill the soft limit is all there is
    assert run({"MAXJOB": (1, 3)}, jobs, backfill="NONE") == ["a0"]
    assert run({"MAXJOB": (2, 2)}, jobs) == ["a0", "a1"]


def test_limits_apply_only_to_the_named_credential():
    jobs = [ann(0), ann(1), Job("b0", user="bob", submit_time=2), Job("b1", user="bob", submit_time=3)]
    assert run({"MAXJOB": (1, 1)}, jobs) == ["a0", "b0", "b1"]


def test_default_entry_applies_to_every_credential():
    cfg = SchedulerConfig(throttles={"USER": {"DEFAULT": {"MAXJOB": (1, 1)}}})
    sched = Scheduler([Node("n0", procs=8)], cfg)
    for i, user in enumerate(["u", "u", "v", "v"]):
        sched.submit(Job(f"{user}{i}", user=user, submit_time=i), now=0)
    assert [s.job_id for s in sched.iterate(0).started] == ["u0", "v2"]


def test_maxproc():
    jobs = [ann(0, tasks=6), ann(1, tasks=6), ann(2, tasks=4)]
    assert run({"MAXPROC": (10, 10)}, jobs) == ["a0", "a2"]


def test_maxps_counts_processor_seconds():
    jobs = [ann(0, tasks=2, walltime=1000), ann(1, tasks=2, walltime=1000), ann(2, tasks=1, walltime=10)]
    assert run({"MAXPS": (3000, 3000)}, jobs) == ["a0", "a2"]


def test_maxnode():
    jobs = [ann(0, tasks=2, tasks_per_node=1), ann(1, tasks=2, tasks_per_node=1), ann(2, tasks=1)]
    assert run({"MAXNODE": (3, 3)}, jobs, nodes=4) == ["a0", "a2"]


def test_maxijob_limits_idle_jobs_considered():
    jobs = [ann(i) for i in range(5)]
    assert run({"MAXIJOB": (2, 2)}, jobs) == ["a0", "a1"]


@pytest.mark.parametrize("kind, field", [("GROUP", "group"), ("ACCOUNT", "account"),
                                         ("CLASS", "job_class"), ("QOS", "qos")])
def test_every_credential_kind_can_be_throttled(kind, field):
    jobs = [Job(f"j{i}", submit_time=i, **{field: "ann"}) for i in range(3)]
    assert run({"MAXJOB": (1, 1)}, jobs, kind=kind) == ["j0"]


def test_finished_jobs_give_their_quota_back():
    cfg = SchedulerConfig(throttles={"USER": {"ann": {"MAXJOB": (1, 1)}}})
    sched = Scheduler([Node("n0", procs=8)], cfg)
    sched.submit(ann(0), now=0)
    sched.submit(ann(1), now=0)
    assert [s.job_id for s in sched.iterate(0).started] == ["a0"]
    sched.job_ended("a0", now=10)
    assert [s.job_id for s in sched.iterate(10).started] == ["a1"]

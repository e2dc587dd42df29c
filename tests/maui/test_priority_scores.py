"""Scheduler.priority_scores: every idle job's total priority, the very float of its
diagnose_priority row (what a kept plan and showq's order use), on both scoring paths
and in pool mode."""

from __future__ import annotations

import random

import pytest

from grid_tasks.maui import FSTarget, Job, Node, Scheduler, SchedulerConfig

USERS = [f"u{i}" for i in range(9)]


def _config() -> SchedulerConfig:
    return SchedulerConfig(
        fs_policy="DEDICATEDPS",
        weights={"QUEUETIMEWEIGHT": 1, "XFACTORWEIGHT": 7, "FSUSERWEIGHT": 3, "USERWEIGHT": 1,
                 "QOSWEIGHT": 10, "PROCWEIGHT": 0.3, "PEWEIGHT": 0.1, "MEMWEIGHT": 0.01},
        fs_targets={"USER": {u: FSTarget(10.0, m) for u, m in zip(USERS, ["", "+", "-"] * 3)}},
        cred_priority={"USER": {"u3": 50, "u7": -20}, "QOS": {"high": 100}},
    )


def _scheduler(nodes: list[Node], n: int, seed: int) -> Scheduler:
    rng = random.Random(seed)
    sched = Scheduler(nodes, _config())
    for i in range(6):  # running jobs: fairshare usage accrues by the iteration
        sched.submit(Job(f"r{i}", tasks=1, walltime=7200, user=USERS[i % 3], submit_time=0), now=0)
    sched.iterate(0)
    for i in range(n):
        sched.submit(Job(f"{100 + i}", tasks=rng.choice([1, 2, 64]),
                         walltime=rng.choice([60, 999, 3600.5]), submit_time=rng.uniform(0, 900),
                         user=rng.choice(USERS + [None]), qos=rng.choice(["high", None]),
                         mem_per_task=rng.choice([0, 100]), priority=rng.choice([0, 0, 5])),
                     now=1000)
    sched.iterate(1500)  # accrues the running jobs' usage
    return sched


@pytest.mark.parametrize("n", [10, 300])  # per job, and column-wise (VECTOR_FROM is 48)
@pytest.mark.parametrize("nodes", [[Node("n0", procs=4), Node("n1", procs=2)],
                                   [Node("solo", procs=6)]])  # the single-node site pool
def test_scores_are_the_breakdown_totals(n: int, nodes: list[Node]) -> None:
    now = 1800.25
    sched = _scheduler(nodes, n, seed=n)
    jobs, scores = sched.priority_scores(now)
    assert [j.id for j in jobs] == [j.id for j in sched.idle_jobs()]
    totals = {row.job_id: row.total for row in sched.diagnose_priority(now)}
    assert len(totals) == len(jobs) > n - 10
    assert [float(s) for s in scores] == [totals[j.id] for j in jobs]
    assert len(set(totals.values())) > len(totals) // 2  # (the weights make them differ)

"""Judging a deep queue once per job shape (model.by_shape) gives every job the verdict
asking it alone gives, and a shape that left out something the verdict reads is caught."""

from __future__ import annotations

import random
from operator import attrgetter

import pytest

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig
from grid_tasks.maui import model as model_module
from grid_tasks.maui import ever as ever_module
from grid_tasks.maui.model import by_shape, job_shape
from grid_tasks.states import NodeState


def _scheduler() -> Scheduler:
    """Nodes of different widths, memory and features (one down), and hard limits per
    user, group and QOS: each attribute of a job can change its verdict."""
    cfg = SchedulerConfig(fast_path=False, throttles={
        "USER": {"a": {"MAXPROC": (10, 10)}},
        "GROUP": {"g2": {"MAXPROC": (3, 3)}},
        "QOS": {"big": {"MAXPROC": (5, 5)}},
        "CLASS": {"batch": {"MAXPROC": (2, 2)}},
        "ACCOUNT": {"x": {"MAXIJOB": (2, 2)}},
    })
    nodes = [Node("n0", procs=32, memory=4000, features=frozenset({"fast"})),
             Node("n1", procs=16, memory=1000, disk=50), Node("n2", procs=16, swap=10)]
    sched = Scheduler(nodes, cfg)
    sched.update_node("n2", 0.0, state=NodeState.DOWN)
    return sched


#: Each attribute's values; a job is a plain one with one or two of them drawn (so
#: many jobs share a shape, and jobs differing in one attribute are many).
_VALUES = {"tasks": [1, 4, 12, 14], "procs_per_task": [0, 1, 2], "user": ["a", "b", None],
           "group": ["g1", "g2", None], "account": ["x", None], "job_class": ["batch", None],
           "qos": ["big", None], "mem_per_task": [0, 500, 3000], "disk_per_task": [0, 20, 80],
           "swap_per_task": [0, 5], "tasks_per_node": [None, 1, 4],
           "features": [(), ("fast",), ("gpu",)]}


def _jobs(rng: random.Random, n: int) -> list[Job]:
    out = []
    for i in range(n):
        drawn = {k: rng.choice(_VALUES[k]) for k in rng.sample(sorted(_VALUES), rng.randint(1, 2))}
        out.append(Job(f"j{i}", **{"tasks": 4, "walltime": rng.choice([60, 600]), **drawn}))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_each_job_gets_the_verdict_it_gets_alone(seed: int) -> None:
    sched, jobs = _scheduler(), _jobs(random.Random(seed), 1500)
    alone = [sched.may_ever_start(j) for j in jobs]  # the reference
    assert _scheduler().may_ever_start.many(jobs) == alone
    assert any(alone) and not all(alone)  # both verdicts are at stake


@pytest.mark.parametrize("left_out", job_shape.__reduce__()[1])
def test_a_shape_without_one_of_its_attributes_is_caught(monkeypatch: pytest.MonkeyPatch,
                                                         left_out: str) -> None:
    """The comparison above fails for a shape that leaves out any one attribute the
    verdict reads (credentials the throttles name, size, features)."""
    narrower = attrgetter(*[a for a in job_shape.__reduce__()[1] if a != left_out])
    monkeypatch.setattr(model_module, "job_shape", narrower)
    rng = random.Random(11)
    caught = False
    for _ in range(3):
        jobs = _jobs(rng, 1500)
        alone = [_scheduler().may_ever_start(j) for j in jobs]
        caught |= _scheduler().may_ever_start.many(jobs) != alone
    assert caught


def test_by_shape_numbers_each_job_by_its_first_equal() -> None:
    jobs = [Job("a", tasks=2, user="u"), Job("b", tasks=3, user="u"), Job("c", tasks=2, user="u"),
            Job("d", tasks=2, user="v")]
    shapes, reps = by_shape(jobs)
    assert shapes == [0, 1, 0, 2] and [j.id for j in reps] == ["a", "b", "d"]
    assert ever_module.by_shape is by_shape  # the verdicts are asked through it

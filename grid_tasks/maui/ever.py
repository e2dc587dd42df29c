"""Whether an idle job may ever start: the test that parks a job out of the ranking.

A job that cannot fit the usable nodes, or that a hard throttle refuses even with
nothing of its credentials running, can never start whatever ends (unless a MAXIJOB
limit counts it among its credentials' idle jobs: leaving it out would change other
jobs' fates).  Asked of every job a scheduler first sees, so for a deep queue it is
asked once per job shape (:func:`~grid_tasks.maui.model.by_shape`): all it reads is
the job's size, features and credentials; its id only keys a cache.  Pure.
"""

from __future__ import annotations

from grid_tasks.maui.engine import Engine
from grid_tasks.maui.model import Job, by_shape
from grid_tasks.maui.throttle import Throttle


class EverStart:
    """The may-ever-start test of one scheduler's nodes and limits."""

    def __init__(self, engine: Engine, throttle: Throttle) -> None:
        self.engine, self.throttle = engine, throttle

    def __call__(self, job: Job) -> bool:
        throttle = self.throttle
        return throttle.counts_idle(job) or (self.engine.can_ever_fit(job)
                                             and throttle.ever_allows(job))

    def many(self, jobs: list[Job],
             shaped: tuple[list[int], list[Job]] | None = None) -> list[bool]:
        """The verdict of each job, asked once per job shape (``shaped``: the jobs'
        :func:`~grid_tasks.maui.model.by_shape`, when the caller has it)."""
        shapes, reps = by_shape(jobs) if shaped is None else shaped
        verdicts = [self(job) for job in reps]
        return list(map(verdicts.__getitem__, shapes))

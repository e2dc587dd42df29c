"""The idle queue, and which of its jobs are ranked every iteration.

A job that can never start — no usable nodes hold it, or a hard throttle refuses it
even with nothing of its credentials running — stays idle (``showq`` lists it, a
cancel finds it) but is *parked*: ranking and considering it again every iteration
changes nothing and made a site's replay grow with the number of such jobs times the
number of iterations.  What "can never start" means is the scheduler's business
(``may_ever_start``); it is asked again whenever the nodes change.
"""

from __future__ import annotations

from typing import Callable

from grid_tasks.maui.model import Job
from grid_tasks.maui.ranking import Ranking


class IdleQueue:
    """Idle jobs by id (``jobs``), the ones that could ever start (``ready``)."""

    def __init__(self, may_ever_start: Callable[[Job], bool], ranking: Ranking) -> None:
        self.jobs: dict[str, Job] = {}
        self.ready: dict[str, Job] = {}
        self._may_ever_start = may_ever_start
        self._ranking = ranking
        self._parked_priority: set[str] = set()  # parked jobs with a system priority

    @property
    def parked(self) -> int:
        return len(self.jobs) - len(self.ready)

    @property
    def parked_priority(self) -> bool:
        """Whether a parked job carries a system priority (the ranking then is by score,
        as it would be with that job in it)."""
        return bool(self._parked_priority)

    def add(self, job: Job) -> None:
        self.jobs[job.id] = job
        self._classify(job)

    def drop(self, job_id: str) -> Job | None:
        """The job left the queue (started or cancelled); None if it was not idle."""
        self.ready.pop(job_id, None)
        self._ranking.forget(job_id)
        self._parked_priority.discard(job_id)
        return self.jobs.pop(job_id, None)

    def reclassify(self) -> None:
        """The nodes changed: what can ever fit may have changed too."""
        self.ready.clear()
        self._parked_priority.clear()
        for job in self.jobs.values():
            self._classify(job)

    def _classify(self, job: Job) -> None:
        if self._may_ever_start(job):
            self.ready[job.id] = job
        elif job.priority:
            self._parked_priority.add(job.id)
